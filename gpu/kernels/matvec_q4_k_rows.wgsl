// matvec_q4_k_rows: y[t, ROW_START + r] = sum_k W[r, k] * x[t, k] for a Q4_K weight shard, on
// software adapters (lavapipe); the same result as kernels/matvec.wgsl, read differently.
//
// Why (as matvec_q8_0_rows.wgsl and matvec_q5_0_rows.wgsl): lavapipe compiles a buffer load with
// lane-varying addresses into a per-lane loop, so the number of loads bounds it. matvec.wgsl's Q4_K
// decoder (quant/q4_k.wgsl) reads a block's 16-byte header and 16 quant bytes as eight u32 loads for
// every 16 values; here a block (144 bytes, 16-byte aligned) is nine vec4 loads: its header once,
// then each 16 quant bytes (a unit, as in matvec_q4_k.wgsl: low nibbles 16 values of sub-block 2j,
// high nibbles 16 of sub-block 2j + 1, j the unit's 32-byte chunk). A thread computes 4 whole rows
// (rows first + j WG, j < 4), so each x value loaded serves 4 rows and no reduction is needed. The
// affine form d sc sum(q x) - dmin m sum(x) applies each sub-block's scale once (f32 rounding differs
// from dequantise-then-dot by a few ulp of the row sum). Quant words become floats inside each token's
// dot, which keeps a thread's registers to words: software adapters run matvecs for one token
// (software_matvec_max_tokens). GLU = 1 (the fused gate-up linear, as in matvec.wgsl): the thread also
// computes its 4 rows' up rows N_ROWS + r and stores act(gate) * up.
#include "matvec/four_rows.wgsl"
#include "quant/byte_floats.wgsl"
#include "matvec/q4_k_unit_scales.wgsl"

const ROW_WORDS: u32 = K / 256u * 9u;  // vec4 words of a row (K a multiple of 256)

// A unit's 32 values of x for one token: the low sub-block's 16 and the high's, and their sums.
struct UnitX {
    lo: array<vec4<f32>, 4>,
    hi: array<vec4<f32>, 4>,
    sum_lo: f32,
    sum_hi: f32,
}

fn unit_x(xb: u32) -> UnitX {
    var u: UnitX;
    for (var i = 0u; i < 4u; i++) {
        u.lo[i] = x[xb + i];
        u.hi[i] = x[xb + 8u + i];
    }
    let ones = vec4<f32>(1.0);
    u.sum_lo = dot(u.lo[0] + u.lo[1] + u.lo[2] + u.lo[3], ones);
    u.sum_hi = dot(u.hi[0] + u.hi[1] + u.hi[2] + u.hi[3], ones);
    return u;
}

// sum over a unit's 32 values of W x: q its quant words, s its scales (unit_scales).
fn unit_dot(q: vec4<u32>, s: vec4<f32>, u: UnitX) -> f32 {
    let lo = q & vec4<u32>(0x0F0F0F0Fu);
    let hi = (q >> vec4<u32>(4u)) & vec4<u32>(0x0F0F0F0Fu);
    let qx_lo = dot(u8x4_to_f32(lo.x), u.lo[0]) + dot(u8x4_to_f32(lo.y), u.lo[1]) + dot(u8x4_to_f32(lo.z), u.lo[2])
        + dot(u8x4_to_f32(lo.w), u.lo[3]);
    let qx_hi = dot(u8x4_to_f32(hi.x), u.hi[0]) + dot(u8x4_to_f32(hi.y), u.hi[1]) + dot(u8x4_to_f32(hi.z), u.hi[2])
        + dot(u8x4_to_f32(hi.w), u.hi[3]);
    return s.x * qx_lo - s.y * u.sum_lo + s.z * qx_hi - s.w * u.sum_hi;
}

// Word i of each of the thread's 4 rows (word offsets w).
struct Words4 {
    r0: vec4<u32>,
    r1: vec4<u32>,
    r2: vec4<u32>,
    r3: vec4<u32>,
}

fn words4(w: vec4<u32>, i: u32) -> Words4 {
    return Words4(weight[w.x + i], weight[w.y + i], weight[w.z + i], weight[w.w + i]);
}

// The 4 rows' unit scales of chunk j (column r: row r's), from their block headers.
fn scales4(head: Words4, j: u32) -> mat4x4<f32> {
    return mat4x4<f32>(unit_scales(head.r0, j), unit_scales(head.r1, j), unit_scales(head.r2, j),
                       unit_scales(head.r3, j));
}

// The 4 rows' sums over one unit of W x: q their quant words, s their scales.
fn dot4(q: Words4, s: mat4x4<f32>, u: UnitX) -> vec4<f32> {
    return vec4<f32>(unit_dot(q.r0, s[0], u), unit_dot(q.r1, s[1], u), unit_dot(q.r2, s[2], u),
                     unit_dot(q.r3, s[3], u));
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let first_row = first_row_of(wid, nwg, lid);
    let n = min(step.n_tokens, T_MAX);
    if (first_row >= N_ROWS) {
        return;
    }
    let words = row_words(first_row);
    let w0 = words.gate;
    let wu = words.up;
    var acc: array<vec4<f32>, T_MAX>;  // [token]: rows j = 0..3
    var acc_u: array<vec4<f32>, T_MAX>;  // [token]: up rows (GLU)
    for (var b = 0u; b < K / 256u; b++) {
        let block = 9u * b;
        let head = words4(w0, block);
        var head_u = Words4();
        if (GLU == 1u) {
            head_u = words4(wu, block);
        }
        for (var j = 0u; j < 4u; j++) {
            let s = scales4(head, j);
            var s_u = mat4x4<f32>();
            if (GLU == 1u) {
                s_u = scales4(head_u, j);
            }
            for (var part = 0u; part < 2u; part++) {
                let unit = block + 1u + 2u * j + part;  // the unit's quant words
                let q = words4(w0, unit);
                var q_u = Words4();
                if (GLU == 1u) {
                    q_u = words4(wu, unit);
                }
                for (var t = 0u; t < T_MAX; t++) {
                    if (t < n) {
                        // the low sub-block's first value: block b, chunk j, 16 values a part
                        let u = unit_x((t * K + 256u * b + 64u * j + 16u * part) / 4u);
                        acc[t] += dot4(q, s, u);
                        if (GLU == 1u) {
                            acc_u[t] += dot4(q_u, s_u, u);
                        }
                    }
                }
            }
        }
    }
    store_rows(first_row, n, acc, acc_u);
}
