// matvec input in a uniform binding (X_SOURCE = "uniform"; matvec/x_binding_uniform.wgsl says when and why): x is read
// where it is used, as with "direct".
#include "matvec/x_binding_uniform.wgsl"

fn prepare_x(tid: u32, workgroup: u32, lanes_of_8: bool) {}

fn x_vec(i: u32) -> vec4<f32> {
    return x[i];
}

// Each token's factor on its row sums: none for this input (matvec/x_prenormed.wgsl's is its rms norm).
fn x_scale(t: u32) -> f32 {
    return 1.0;
}
