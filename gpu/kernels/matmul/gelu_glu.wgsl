// The epilogue of the fused gate-up linears (matvec.wgsl, matmul.wgsl with GLU = 1):
// gelu_tanh(g) * u, written exactly as kernels/gelu_mul.wgsl computes it, PyTorch's approximate="tanh":
// gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))).

fn gelu_glu(g: f32, u: f32) -> f32 {
    // tanh saturates long before |v| = 15; clamping keeps exp-based tanh from overflowing.
    let v = clamp(0.7978845608028654 * (g + 0.044715 * g * g * g), -15.0, 15.0);
    return 0.5 * g * (1.0 + tanh(v)) * u;
}

fn gelu_glu4(g: vec4<f32>, u: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(gelu_glu(g.x, u.x), gelu_glu(g.y, u.y), gelu_glu(g.z, u.z), gelu_glu(g.w, u.w));
}
