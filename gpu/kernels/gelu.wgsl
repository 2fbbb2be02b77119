// gelu: out[t, i] = gelu(x[t, i] (+ bias[i])) (* up[t, i])
//   exact (TANH = false): gelu(v) = 0.5 v (1 + erf(v / sqrt(2)))       PyTorch's default (BERT)
//   TANH:                 gelu(v) = 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3)))   (Gemma's GeGLU)
// HAS_BIAS adds the previous linear's bias first; GATED multiplies by up (GeGLU). Unread
// bindings (bias, up) are still bound: pass any f32 tensor.
// erf: W. J. Cody's rational approximations (as in Cephes and glibc's erff), |error| < 1e-7
// relative over all of f32 once summed in f32, so the exact GELU agrees with PyTorch's erf to
// about an f32 ulp of the result.
// Work split: one invocation per element, 256 per workgroup, over a 2-D grid of workgroups.
#include "common/step.wgsl"
#include "common/gelu_tanh.wgsl"

override D: u32 = 1536u;          // row width in elements
override TANH: bool = false;      // the tanh approximation instead of erf
override HAS_BIAS: bool = false;
override GATED: bool = false;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> x: array<f32>;          // [T_MAX, D]
@group(0) @binding(2) var<storage, read> bias: array<f32>;       // [D]
@group(0) @binding(3) var<storage, read> up: array<f32>;         // [T_MAX, D]
@group(0) @binding(4) var<storage, read_write> out: array<f32>;  // [T_MAX, D]

// erf(z) for f32: a polynomial in z^2 for |z| < 0.84375, erf(1) - P/Q around 1 up to 1.25,
// and 1 - exp(-z^2 - 0.5625 + R/S) / |z| beyond (Sun Microsystems' fdlibm s_erf.c coefficients,
// the single-precision set of e_erff.c).
fn erf_f32(z: f32) -> f32 {
    let a = abs(z);
    var r: f32;
    if (a < 0.84375) {
        let s = a * a;
        let p = 1.2837917e-01 + s * (-3.2504210e-01 + s * (-2.8481750e-02 + s * (-5.7702702e-03 + s * -2.3763017e-05)));
        let q = 1.0 + s * (3.9791720e-01 + s * (6.5022250e-02 + s * (5.0813062e-03 + s * (1.3249474e-04
            + s * -3.9602282e-06))));
        r = a + a * (p / q);
    } else if (a < 1.25) {
        let s = a - 1.0;
        let p = -2.3621186e-03 + s * (4.1485610e-01 + s * (-3.7220788e-01 + s * (3.1834662e-01 + s * (-1.1089470e-01
            + s * (3.5478305e-02 + s * -2.1663755e-03)))));
        let q = 1.0 + s * (1.0642088e-01 + s * (5.4039794e-01 + s * (7.1828656e-02 + s * (1.2617122e-01
            + s * (1.3637084e-02 + s * 1.1984500e-02)))));
        r = 8.4506291e-01 + p / q;
    } else if (a < 6.0) {
        let s = 1.0 / (a * a);
        var rr: f32;
        var ss: f32;
        if (a < 2.857143) {
            rr = -9.8649440e-03 + s * (-6.9385856e-01 + s * (-1.0558626e+01 + s * (-6.2375331e+01 + s * (-1.6239667e+02
                + s * (-1.8460509e+02 + s * (-8.1287437e+01 + s * -9.8143291e+00))))));
            ss = 1.0 + s * (1.9651272e+01 + s * (1.3765776e+02 + s * (4.3456589e+02 + s * (6.4538727e+02
                + s * (4.2900815e+02 + s * (1.0863500e+02 + s * (6.5702496e+00 + s * -6.0424414e-02)))))));
        } else {
            rr = -9.8649431e-03 + s * (-7.9928327e-01 + s * (-1.7757956e+01 + s * (-1.6063638e+02 + s * (-6.3756646e+02
                + s * (-1.0250951e+03 + s * -4.8351920e+02)))));
            ss = 1.0 + s * (3.0338060e+01 + s * (3.2579251e+02 + s * (1.5367296e+03 + s * (3.1998582e+03
                + s * (2.5530503e+03 + s * (4.7452853e+02 + s * -2.2440952e+01))))));
        }
        // exp(-a^2) split as exp(-t^2) exp((t - a)(t + a)) with t = a rounded to 12 bits, as fdlibm
        // does, so the large exponent loses no precision.
        let t = bitcast<f32>(bitcast<u32>(a) & 0xfffff000u);
        let e = exp(-t * t - 0.5625) * exp((t - a) * (t + a) + rr / ss);
        r = 1.0 - e / a;
    } else {
        r = 1.0;
    }
    return select(r, -r, z < 0.0);
}

fn gelu(v: f32) -> f32 {
    if (TANH) {
        return gelu_tanh(v);
    }
    return 0.5 * v * (1.0 + erf_f32(v * 0.70710678118654752));
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * 256u + lid;
    if (i >= step.n_tokens * D) {
        return;
    }
    var v = x[i];
    if (HAS_BIAS) { v += bias[i % D]; }
    var r = gelu(v);
    if (GATED) { r *= up[i]; }
    out[i] = r;
}
