// int8 matvec input, direct (X_SOURCE = "q8_direct"): x is a binding, quantised in the prologue
// (matvec/q8_input.wgsl).

@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;   // [T_MAX, K]

#include "matvec/q8_input.wgsl"

fn f32_vec(i: u32) -> vec4<f32> {
    return x[i];
}

fn prepare_x(tid: u32, workgroup: u32, lanes_of_8: bool) {
    quantise_input(tid, lanes_of_8);
}

// Each token's factor on its row sums: none for this input (matvec/x_prenormed.wgsl's is its rms norm).
fn x_scale(t: u32) -> f32 {
    return 1.0;
}
