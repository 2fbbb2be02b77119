// matvec entry point for software adapters (lavapipe): one thread computes 4 whole rows (rows
// first + lid + j WG, j < 4; TPR = 1, ROWS = WG threads), so no reduction is needed and each 16
// values of x, loaded once, serve RPT rows. lavapipe runs a workgroup as a loop over 8-lane SIMD
// slices and turns every buffer load with lane-varying addresses into a per-lane loop of scalar
// loads, so loads, not arithmetic, bound it: sharing x over rows cuts them most (measured: x loads
// were 60% of the time with one row per thread; 8 rows per thread measured slower than 4). Rows
// are in vec4 accumulators, unrolled by hand: lavapipe's compiler does not unroll loops, and arrays
// indexed by a loop counter would live in scratch memory.

// sum of the 16 products of a dequantised group with four vec4 of x
fn dot16(w: mat4x4<f32>, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>) -> f32 {
    return dot(w[0], x0) + dot(w[1], x1) + dot(w[2], x2) + dot(w[3], x3);
}

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
    let base_a = rows_a * ROW_BYTES;
    var acc_a: array<vec4<f32>, T_MAX>;  // [token]: rows j = 0..3
    for (var gi = 0u; gi < GROUPS_PER_ROW; gi++) {
        let offset = (gi / GROUPS_PER_BLOCK) * BLOCK_BYTES;
        let g = gi % GROUPS_PER_BLOCK;
        for (var t = 0u; t < T_MAX; t++) {
            if (t < n) {
                let xi = (t * K + gi * GROUP_VALUES) / 4u;
                let x0 = x[xi];
                let x1 = x[xi + 1u];
                let x2 = x[xi + 2u];
                let x3 = x[xi + 3u];
                acc_a[t] += vec4<f32>(dot16(dequant16(base_a.x + offset, g), x0, x1, x2, x3),
                                      dot16(dequant16(base_a.y + offset, g), x0, x1, x2, x3),
                                      dot16(dequant16(base_a.z + offset, g), x0, x1, x2, x3),
                                      dot16(dequant16(base_a.w + offset, g), x0, x1, x2, x3));
            }
        }
    }
    for (var t = 0u; t < T_MAX; t++) {
        for (var j = 0u; j < 4u; j++) {
            store(first_row + j * WG, 0u, t, acc_a[t][j]);
        }
    }
}
