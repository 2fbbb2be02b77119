// matvec_q8_0_rows_i8: matvec_q8_0_rows on x quantised to 8 bits per 32 values (common/q8_block.wgsl's rule, by
// each workgroup's prologue into workgroup memory: matvec/q8_input.wgsl), as llama.cpp's CPU kernels do:
//   y[t, r] = sum over blocks b of d_w[r, b] * d_x[t, b] * sum_i q_w[r, b, i] * q_x[t, b, i]
// the inner sums exact in i32 by dot4I8Packed. On lavapipe an int8 dot of four values is one instruction where the
// f32 path converts each byte first: a streaming dot over int8 weights ran nearly twice as fast on int8 x.
// Runs where the executor asks for int8 matmuls (HEARTH_INT8_ACTIVATIONS) on a software adapter.
#include "matvec/q8_0_pairs.wgsl"
#include "matvec/q8_input.wgsl"

fn f32_vec(i: u32) -> vec4<f32> {
    return x[i];
}

fn prepare_x(tid: u32) {
    quantise_input(tid, false);
}

// The int8 values of one block pair's worth of x (16 words) and the two blocks' scales, for one token.
struct PairX {
    q: array<vec4<u32>, 4>,
    d: vec2<f32>,
}

fn pair_x(t: u32, p: u32) -> PairX {
    let first = (t * K) / 16u + 4u * p;  // x_q8 counts 16 values
    let scales = x_q8_scales2((t * K) / 32u + 2u * p);
    return PairX(array<vec4<u32>, 4>(x_q8(first), x_q8(first + 1u), x_q8(first + 2u), x_q8(first + 3u)),
                 scales.xz);
}

fn dot16_i8(a: vec4<u32>, b: vec4<u32>) -> i32 {
    return dot4I8Packed(a.x, b.x) + dot4I8Packed(a.y, b.y) + dot4I8Packed(a.z, b.z) + dot4I8Packed(a.w, b.w);
}

fn pair_dot(w: Pair, xs: PairX) -> f32 {
    let s0 = dot16_i8(w.q0, xs.q[0]) + dot16_i8(w.q1, xs.q[1]);
    let s1 = dot16_i8(w.q2, xs.q[2]) + dot16_i8(w.q3, xs.q[3]);
    return w.d0 * xs.d.x * f32(s0) + w.d1 * xs.d.y * f32(s1);
}
