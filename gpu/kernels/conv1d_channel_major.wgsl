// conv1d_channel_major: a 1-D convolution over channel-major activations x [C_in, T_in] -> y [C_out, T_out]:
//   y[o, t] = out_scale * (bias[o] + sum_{i, j < K} w[o, i, j] * act(x[i, t * stride + j * dil - pad])
//                          + r[o, t >> R_SHIFT])
// with inputs outside [0, T_in) read as zero, act a LeakyReLU applied on read (PRE_ACT) and r an optional residual
// (RESIDUAL; R_SHIFT = 1 reads it at half rate: a nearest-upsampled shortcut). Sizes are params so one pipeline
// serves every length; w is PyTorch's [C_out, C_in, K] (weight_norm folded).
// Work split: one invocation per (t, 4 consecutive output channels), 64 along t per workgroup; grid
// (ceil(T_out / 64), ceil(C_out / 4)). Neighbouring invocations read neighbouring inputs.
override K: u32 = 3u;            // taps
override PRE_ACT: bool = false;  // LeakyReLU(slope) on every input value
override RESIDUAL: bool = false; // add r
override R_SHIFT: u32 = 0u;      // residual time index = t >> R_SHIFT

// params: 0 C_in, 1 C_out, 2 T_in, 3 T_out, 4 stride, 5 pad, 6 dilation, 7 slope (f32 bits),
// 8 out_scale (f32 bits), 9 x offset, 10 y offset, 11 r offset (elements); 63 is 0
#include "common/layer_bindings.wgsl"
#include "common/leaky_relu.wgsl"

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c_in = p[0];
    let c_out = p[1];
    let t_in = i32(p[2]);
    let t_out = p[3];
    let t = wid.x * 64u + lid;
    let o0 = wid.y * 4u;
    keep_residual_bound();
    if (t >= t_out) {
        return;
    }
    let stride = i32(p[4]);
    let pad = i32(p[5]);
    let dil = i32(p[6]);
    let slope = bitcast<f32>(p[7]);
    let x_off = p[9];
    var acc = vec4<f32>(0.0);
    let wrow = c_in * K;
    for (var i = 0u; i < c_in; i++) {
        for (var j = 0u; j < K; j++) {
            let s = i32(t) * stride + i32(j) * dil - pad;
            if (s < 0 || s >= t_in) {
                continue;
            }
            var v = x[x_off + i * u32(t_in) + u32(s)];
            if (PRE_ACT) { v = leaky_relu(v, slope); }
            let wi = i * K + j;
            for (var q = 0u; q < 4u; q++) {
                let o = min(o0 + q, c_out - 1u);
                acc[q] += v * w[o * wrow + wi];
            }
        }
    }
    let scale = bitcast<f32>(p[8]);
    for (var q = 0u; q < 4u; q++) {
        let o = o0 + q;
        if (o >= c_out) {
            break;
        }
        var v = acc[q] + bias[o];
        if (RESIDUAL) {
            v += r[p[11] + o * (t_out >> R_SHIFT) + (t >> R_SHIFT)];
        }
        y[p[10] + o * t_out + t] = v * scale;
    }
}
