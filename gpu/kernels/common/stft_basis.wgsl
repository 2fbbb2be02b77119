// The short-time Fourier transform of stft.wgsl and istft.wgsl (n_fft 20, hop 5, periodic Hann
// window, as istftnet's TorchSTFT): its sizes, the window and the angles of the DFT's basis.
const N_FFT: u32 = 20u;
const HOP: u32 = 5u;
const BINS: u32 = 11u;  // N_FFT / 2 + 1 frequency bins
const TWO_PI: f32 = 6.2831855;

// The periodic Hann window at tap n (0 <= n < N_FFT).
fn hann(n: u32) -> f32 {
    return 0.5 - 0.5 * cos(TWO_PI * f32(n) / f32(N_FFT));
}

// The angle of bin k at tap n, 2 pi k n / N_FFT, with k n reduced mod N_FFT first so it stays in [0, 2 pi).
fn dft_angle(k: u32, n: u32) -> f32 {
    return TWO_PI * f32((k * n) % N_FFT) / f32(N_FFT);
}
