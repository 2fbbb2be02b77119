// matvec input, normalised in the prologue (X_SOURCE = "normed"): matvec/normed_input.wgsl's x, read from
// workgroup memory.
#include "matvec/normed_input.wgsl"

// Called by the entry point from uniform control flow before any x_vec: tid, the invocation's index in the
// workgroup (the entry's numbering), workgroup, its linear id, lanes_of_8: see matvec/q8_input.wgsl.
fn prepare_x(tid: u32, workgroup: u32, lanes_of_8: bool) {
    normalise_input(tid, workgroup);
}

fn x_vec(i: u32) -> vec4<f32> {
    return xs[i];
}

// Each token's factor on its row sums: none for this input (matvec/x_prenormed.wgsl's is its rms norm).
fn x_scale(t: u32) -> f32 {
    return 1.0;
}
