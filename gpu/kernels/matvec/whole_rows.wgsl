// matvec entry point for software adapters (lavapipe): one thread computes 4 whole rows (rows
// first + lid + j WG, j < 4; TPR = 1, ROWS = WG threads), so no reduction is needed and each 16
// values of x, loaded once, serve RPT rows. lavapipe runs a workgroup as a loop over 8-lane SIMD
// slices and turns every buffer load with lane-varying addresses into a per-lane loop of scalar
// loads, so loads, not arithmetic, bound it: sharing x over rows cuts them most (measured: x loads
// were 60% of the time with one row per thread; 8 rows per thread measured slower than 4). Rows
// are in vec4 accumulators, unrolled by hand: lavapipe's compiler does not unroll loops, and arrays
// indexed by a loop counter would live in scratch memory. With GLU the thread also computes the 4
// rows' up rows (x serves 8 rows). A group's values are made once for all of a step's tokens: made inside
// the token loop, 8 tokens cost 11x (Q5_0) to 38x (Q4_K) one token's time. (Steps of several tokens take the
// whole-row matmul by default, faster still: software_matvec_max_tokens in gpu/ops/matmul_tuning.py.)

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let first_row = (wid.x + wid.y * nwg.x) * WG * 4u + lid;
    if (first_row >= N_ROWS) {
        return;
    }
    let n = n_tokens();
    // byte offsets of the thread's rows (rows past the shard repeat its last; their sums are not stored)
    let rows_a = min(vec4<u32>(first_row) + vec4<u32>(0u, 1u, 2u, 3u) * WG, vec4<u32>(N_ROWS - 1u));
    let base_a = (vec4<u32>(FIRST_ROW) + rows_a) * ROW_BYTES;
    let base_u = base_a + vec4<u32>(UP_BYTES);
    var acc_a: array<vec4<f32>, T_MAX>;  // [token]: rows j = 0..3
    var acc_u: array<vec4<f32>, T_MAX>;  // [token]: their up rows (GLU)
    for (var gi = 0u; gi < GROUPS_PER_ROW; gi++) {
        let offset = (gi / GROUPS_PER_BLOCK) * BLOCK_BYTES;
        let g = gi % GROUPS_PER_BLOCK;
        // the group's values of the thread's rows, made once for all of the step's tokens
        let a0 = dequant16(base_a.x + offset, g);
        let a1 = dequant16(base_a.y + offset, g);
        let a2 = dequant16(base_a.z + offset, g);
        let a3 = dequant16(base_a.w + offset, g);
        var u0 = mat4x4<f32>();
        var u1 = mat4x4<f32>();
        var u2 = mat4x4<f32>();
        var u3 = mat4x4<f32>();
        if (GLU == 1u) {
            u0 = dequant16(base_u.x + offset, g);
            u1 = dequant16(base_u.y + offset, g);
            u2 = dequant16(base_u.z + offset, g);
            u3 = dequant16(base_u.w + offset, g);
        }
        for (var t = 0u; t < T_MAX; t++) {
            if (t < n) {
                let xi = (t * K + gi * GROUP_VALUES) / 4u;
                let x0 = x[xi];
                let x1 = x[xi + 1u];
                let x2 = x[xi + 2u];
                let x3 = x[xi + 3u];
                acc_a[t] += vec4<f32>(dot16(a0, x0, x1, x2, x3), dot16(a1, x0, x1, x2, x3),
                                      dot16(a2, x0, x1, x2, x3), dot16(a3, x0, x1, x2, x3));
                if (GLU == 1u) {
                    acc_u[t] += vec4<f32>(dot16(u0, x0, x1, x2, x3), dot16(u1, x0, x1, x2, x3),
                                          dot16(u2, x0, x1, x2, x3), dot16(u3, x0, x1, x2, x3));
                }
            }
        }
    }
    for (var t = 0u; t < n; t++) {
        var v = acc_a[t];
        if (GLU == 1u) {
            v = glu4(v, acc_u[t]);
        }
        for (var j = 0u; j < 4u; j++) {
            if (first_row + j * WG < N_ROWS) {
                y[t * Y_STRIDE + ROW_START + first_row + j * WG] = v[j];
            }
        }
    }
}
