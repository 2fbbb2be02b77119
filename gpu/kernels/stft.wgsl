// stft: magnitude and phase of torch.stft(x, n_fft=20, hop=5, window=periodic Hann, center=True (reflect pad))
// as istftnet's TorchSTFT.transform gives them, into one channel-major [22, frames] array: rows 0..10 the
// magnitudes of bins 0..10, rows 11..21 their angles (atan2). The DC and Nyquist bins have no imaginary part
// (an FFT gives exactly 0 there, so their angle is 0 or pi as PyTorch's).
// Work split: one invocation per (frame, bin), 256 per workgroup, grid spread over x, y.
#include "common/stft_basis.wgsl"

// params: 0 N samples, 1 frames (N / HOP + 1); 63 is 0
@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * 256u + lid;
    let n_samples = i32(p[0]);
    let frames = p[1];
    if (i >= frames * BINS) {
        return;
    }
    let f = i / BINS;
    let k = i % BINS;
    var re = 0.0;
    var im = 0.0;
    for (var n = 0u; n < N_FFT; n++) {
        var s = i32(f * HOP + n) - i32(N_FFT / 2u);
        if (s < 0) { s = -s; }
        if (s >= n_samples) { s = 2 * (n_samples - 1) - s; }
        let win = hann(n);
        let v = x[u32(s)] * win;
        let ang = dft_angle(k, n);
        re += v * cos(ang);
        im -= v * sin(ang);
    }
    if (k == 0u || k == N_FFT / 2u) {
        im = 0.0;
    }
    out[k * frames + f] = sqrt(re * re + im * im);
    out[(BINS + k) * frames + f] = atan2(im, re);
}
