// leaky_relu(v, slope) = v for v >= 0, else slope * v: PyTorch's LeakyReLU, applied before
// convolutions (on read) and after norms. One definition for every kernel that applies it.

fn leaky_relu(v: f32, slope: f32) -> f32 {
    return select(v * slope, v, v >= 0.0);
}
