// sine_phase: the instantaneous phase of istftnet's SineGen at frame rate, for harmonics m = 1..9 of f0 [L]:
//   rad[i] = (f0[i] * m / SR) mod 1;  phase[i, m - 1] = f32(cumsum(rad)[i]) * 2 * pi * UPSAMPLE
// with the cumulative sum carried in double-f32 (PyTorch's CPU cumsum accumulates float in double) and the
// products in upstream's order, so the f32 phases agree with the reference bit for bit where rounding allows.
// (SineGen's random initial phase lands on sample 0 only, which the linear downsampling never reads: no effect.)
// Work split: one workgroup, one invocation per harmonic walking the L frames.
const HARMONICS: u32 = 9u;
const SR: f32 = 24000.0;
const PI_F32: f32 = 3.1415927;

// params: 0 L (frames), 1 upsample (f32 bits: samples per frame); 63 is 0
@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> f0: array<f32>;
@group(0) @binding(2) var<storage, read_write> phase: array<f32>;

@compute @workgroup_size(16)
fn main(@builtin(local_invocation_index) k: u32) {
    if (k >= HARMONICS) {
        return;
    }
    let m = f32(k + 1u);
    let up = bitcast<f32>(p[1]);
    var hi = 0.0;
    var lo = 0.0;
    for (var i = 0u; i < p[0]; i++) {
        let v = (f0[i] * m) / SR;
        let rad = v - floor(v);
        // two-sum: hi + lo += rad without losing bits
        let s = hi + rad;
        let bb = s - hi;
        let e = (hi - (s - bb)) + (rad - bb);
        hi = s;
        lo += e;
        let c = hi + lo;
        phase[i * HARMONICS + k] = ((c * 2.0) * PI_F32) * up;
    }
}
