// int8 matvec input, normalised in the prologue (X_SOURCE = "q8_normed"): matvec/normed_input.wgsl's x in
// f32 workgroup memory, then quantised (matvec/q8_input.wgsl).
#include "matvec/normed_input.wgsl"
#include "matvec/q8_input.wgsl"

fn f32_vec(i: u32) -> vec4<f32> {
    return xs[i];
}

fn prepare_x(tid: u32, workgroup: u32, lanes_of_8: bool) {
    normalise_input(tid, workgroup);
    quantise_input(tid, lanes_of_8);
}

// Each token's factor on its row sums: none for this input (matvec/x_prenormed.wgsl's is its rms norm).
fn x_scale(t: u32) -> f32 {
    return 1.0;
}
