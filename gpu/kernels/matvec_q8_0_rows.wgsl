// matvec_q8_0_rows: y[t, ROW_START + r] = sum_k W[r, k] * x[t, k] for a Q8_0 weight shard, on
// software adapters (lavapipe); the same result as kernels/matvec.wgsl, read differently.
//
// lavapipe runs a workgroup as a loop over 8-lane SIMD slices and compiles every buffer load with
// lane-varying addresses into a per-lane loop of scalar loads, so the number of loads bounds it.
// Two things cut them: (1) a thread computes 4 whole rows (rows first + j WG, j < 4), so each x
// value loaded serves 4 rows and no reduction is needed; (2) the weight is bound as vec4 words and
// read two blocks at a time: a pair of Q8_0 blocks is 68 bytes = 17 words at a 4-byte aligned
// offset (K is a multiple of 64, so every row and pair starts at a word), which five aligned vec4
// loads cover whatever the word's place in its vec4; selects pick the 17 words out of the 20.
// Measured on lavapipe, 640 x 32768: 2-3x faster than matvec.wgsl's split rows. A pair's words are read
// once for all of a step's tokens: read again for each, 8 tokens cost 12x one token's time. (Steps of several
// tokens take the whole-row matmul by default: software_matvec_max_tokens in gpu/ops/matmul_tuning.py.)
// GLU = 1 (the fused gate-up linear, as in matvec.wgsl): the thread also computes its 4 rows' up
// rows N_ROWS + r and stores gelu_tanh(gate) * up.
// The pairs' loads and the entry point: matvec/q8_0_pairs.wgsl; x here is f32 (matvec_q8_0_rows_i8.wgsl: int8).
#include "matvec/q8_0_pairs.wgsl"

// 64 values of x (one block pair's worth) for one token.
struct PairX {
    v: array<vec4<f32>, 16>,
}

fn prepare_x(tid: u32) {}

fn pair_x(t: u32, p: u32) -> PairX {
    var xs: PairX;
    for (var i = 0u; i < 16u; i++) {
        xs.v[i] = x[(t * K) / 4u + 16u * p + i];
    }
    return xs;
}

// The four int8 of w as f32: each byte shifted to the top and back with its sign, then converted (a CPU converts
// integers to floats at full rate, unlike a GPU: quant/byte_floats.wgsl).
fn i8x4(w: u32) -> vec4<f32> {
    return vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(w) << vec4<u32>(24u, 16u, 8u, 0u)) >> vec4<u32>(24u));
}

// sum over 16 int8 q (four words) times x[i .. i + 15]
fn dot16(q: vec4<u32>, xs: PairX, i: u32) -> f32 {
    return dot(i8x4(q.x), xs.v[i]) + dot(i8x4(q.y), xs.v[i + 1u]) + dot(i8x4(q.z), xs.v[i + 2u])
        + dot(i8x4(q.w), xs.v[i + 3u]);
}

// The dot product of a block pair with x.
fn pair_dot(w: Pair, xs: PairX) -> f32 {
    let s0 = dot16(w.q0, xs, 0u) + dot16(w.q1, xs, 4u);
    let s1 = dot16(w.q2, xs, 8u) + dot16(w.q3, xs, 12u);
    // d * sum(q x) rather than sum((d q) x): the same sum up to f32 rounding of the sum
    return w.d0 * s0 + w.d1 * s1;
}
