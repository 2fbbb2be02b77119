// gelu_tanh(v) = 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))), PyTorch's approximate="tanh"
// (Gemma's GeGLU). One definition for every kernel that applies it.

fn gelu_tanh(v: f32) -> f32 {
    // tanh saturates long before |u| = 15; clamping keeps exp-based tanh from overflowing.
    let u = clamp(0.7978845608028654 * (v + 0.044715 * v * v * v), -15.0, 15.0);
    return 0.5 * v * (1.0 + tanh(u));
}
