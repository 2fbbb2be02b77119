// istft: istftnet's output, torch.istft(exp(x[0..10]) * e^{i sin(x[11..21])}, n_fft=20, hop=5, periodic Hann,
// center=True) from the channel-major conv_post output x [22, frames]: each frame's inverse real DFT (the
// imaginary parts of the DC and Nyquist bins ignored, as an inverse real FFT does), windowed, overlap-added,
// divided by the summed squared window, and the first and last n_fft / 2 samples trimmed:
// (frames - 1) * 5 samples. Work split: one invocation per output sample (its <= 4 frames), 256 per group.
#include "common/stft_basis.wgsl"

// params: 0 frames, 1 output samples; 63 is 0
@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let j = (wid.x + wid.y * nwg.x) * 256u + lid;
    let frames = i32(p[0]);
    if (j >= p[1]) {
        return;
    }
    let pos = i32(j + N_FFT / 2u);
    let f_first = max((pos - i32(N_FFT) + 1 + i32(HOP) - 1) / i32(HOP), 0);
    let f_last = min(pos / i32(HOP), frames - 1);
    var acc = 0.0;
    var env = 0.0;
    for (var f = f_first; f <= f_last; f++) {
        let n = u32(pos - f * i32(HOP));
        let win = hann(n);
        var v = 0.0;
        for (var k = 0u; k < BINS; k++) {
            let mag = exp(x[k * u32(frames) + u32(f)]);
            let ph = sin(x[(BINS + k) * u32(frames) + u32(f)]);
            let ang = dft_angle(k, n);
            let re = mag * cos(ph);
            let im = mag * sin(ph);
            if (k == 0u) {
                v += re;
            } else if (k == N_FFT / 2u) {
                v += re * cos(ang);
            } else {
                v += 2.0 * (re * cos(ang) - im * sin(ang));
            }
        }
        acc += v / f32(N_FFT) * win;
        env += win * win;
    }
    y[j] = select(acc, acc / env, env > 1e-11);
}
