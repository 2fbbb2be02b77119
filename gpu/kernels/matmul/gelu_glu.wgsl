// The epilogue of the fused gate-up linears (matvec.wgsl, matmul.wgsl with GLU = 1):
// gelu_tanh(g) * u, with the same gelu_tanh as kernels/gelu_mul.wgsl (common/gelu_tanh.wgsl).

#include "common/gelu_tanh.wgsl"

fn gelu_glu(g: f32, u: f32) -> f32 {
    return gelu_tanh(g) * u;
}

fn gelu_glu4(g: vec4<f32>, u: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(gelu_glu(g.x, u.x), gelu_glu(g.y, u.y), gelu_glu(g.z, u.z), gelu_glu(g.w, u.w));
}
