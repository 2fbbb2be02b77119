// int8 matvec input, quantised beforehand (X_SOURCE = "q8_buffer"): a matvec's quantised output
// (matvec/store_q8.wgsl's layout: a row's K / 4 words of q, then its K / 32 (d, sum) pairs), read where it is
// used. K a multiple of 64, so that a row is whole vec4s.

@group(0) @binding(2) var<storage, read> xq: array<vec4<u32>>;   // [T_MAX, K * 5 / 64]

const X_ROW_VEC4: u32 = K * 5u / 64u;

fn prepare_x(tid: u32, workgroup: u32, lanes_of_8: bool) {}

// 16 int8 values of x from value 16 i of the [T_MAX, K] input.
fn x_q8(i: u32) -> vec4<u32> {
    let t = 16u * i / K;
    return xq[t * X_ROW_VEC4 + i - t * (K / 16u)];
}

// (d, exact sum) of x's 32-value blocks b and b + 1 (b even) of the [T_MAX, K] input: one vec4 load.
fn x_q8_scales2(b: u32) -> vec4<f32> {
    let t = b / (K / 32u);
    return bitcast<vec4<f32>>(xq[t * X_ROW_VEC4 + K / 16u + (b - t * (K / 32u)) / 2u]);
}

// Each token's factor on its row sums: none for this input (matvec/x_prenormed.wgsl's is its rms norm).
fn x_scale(t: u32) -> f32 {
    return 1.0;
}
