// Counter-based noise, reproducible in numpy (models/kokoro/noise.py `source_noise`):
// uniform(seed, i) from a PCG hash of (i, seed), Gaussian by Box-Muller from uniforms 2i and 2i + 1.
fn pcg_hash(v: u32) -> u32 {
    let state = v * 747796405u + 2891336453u;
    let word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
    return (word >> 22u) ^ word;
}

fn uniform01(seed: u32, i: u32) -> f32 {
    let h = pcg_hash(i + pcg_hash(seed));
    return (f32(h >> 8u) + 0.5) / 16777216.0;  // (0, 1), 24 bits
}

fn gaussian(seed: u32, i: u32) -> f32 {
    let u1 = uniform01(seed, 2u * i);
    let u2 = uniform01(seed, 2u * i + 1u);
    return sqrt(-2.0 * log(u1)) * cos(6.2831855 * u2);
}
