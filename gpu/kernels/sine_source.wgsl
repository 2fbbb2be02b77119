// sine_source: istftnet's SourceModuleHnNSF at sample rate, har[j] = tanh(sum_m w[m] * s_m[j] + b) with
//   s_m[j] = sin(phase_m(j)) * 0.1 * uv + noise,   uv = f0[j / UP] > 10,
//   noise = (uv * 0.003 + (1 - uv) * 0.1 / 3) * NOISE * gaussian(seed, j * 9 + m - 1)
// where phase_m(j) interpolates the frame-rate phases linearly (F.interpolate, align_corners=False) and f0 is
// nearest-upsampled. NOISE (0 or 1, a param) turns the Gaussian noise off for parity checks.
// Work split: one invocation per sample, 256 per workgroup, grid spread over x, y.
#include "common/sin_exact.wgsl"
#include "common/pcg_noise.wgsl"

const HARMONICS: u32 = 9u;

// params: 0 L (frames), 1 N samples, 2 samples per frame (UP), 3 scale 1/UP (f32 bits), 4 seed, 5 noise (f32 bits)
@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> f0: array<f32>;
@group(0) @binding(2) var<storage, read> phase: array<f32>;
@group(0) @binding(3) var<storage, read> lin: array<f32>;   // l_linear: 9 weights, then the bias
@group(0) @binding(4) var<storage, read_write> har: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let j = (wid.x + wid.y * nwg.x) * 256u + lid;
    let frames = p[0];
    if (j >= p[1]) {
        return;
    }
    let uv = select(0.0, 1.0, f0[j / p[2]] > 10.0);
    let src = max(bitcast<f32>(p[3]) * (f32(j) + 0.5) - 0.5, 0.0);
    let i0 = u32(src);
    let lam = clamp(src - f32(i0), 0.0, 1.0);
    let w0 = 1.0 - lam;
    let i1 = select(i0, i0 + 1u, i0 + 1u < frames);
    let noise_amp = (uv * 0.003 + ((1.0 - uv) * 0.1) / 3.0) * bitcast<f32>(p[5]);
    var acc = 0.0;
    for (var k = 0u; k < HARMONICS; k++) {
        let a = phase[i0 * HARMONICS + k] * w0;
        let ph = a + phase[i1 * HARMONICS + k] * lam;
        var s = (sin_exact(ph) * 0.1) * uv;
        if (noise_amp != 0.0) {
            s += noise_amp * gaussian(p[4], j * HARMONICS + k);
        }
        acc += s * lin[k];
    }
    har[j] = tanh(acc + lin[HARMONICS]);
}
