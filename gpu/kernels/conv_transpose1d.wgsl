// conv_transpose1d: a transposed 1-D convolution over channel-major activations, as PyTorch's ConvTranspose1d:
//   y[o, t] = bias[o] + sum_i sum_{j: t + pad - j = s * stride, 0 <= s < T_in} w[i, o, j] * act(x[i, s]) (+ r[o, t])
// DEPTHWISE (groups = channels): y[c, t] = bias[c] + sum_j w[c, 0, j] * x[c, s]. REFLECT_LEFT prepends one column
// reflected about the first (ReflectionPad1d((1, 0)): column 0 is the conv's column 1), so y has T_out + 1 columns.
// w: depthwise, PyTorch's [C, 1, K]; otherwise PyTorch's [C_in, C_out, K] with its last two axes swapped at
// upload ([C_in, K, C_out]), so the 4 output channels of an invocation read 4 neighbouring weights.
// Work split: one invocation per (t, 4 output channels), 64 along t per workgroup; grid (ceil(columns / 64),
// ceil(C_out / 4)). Only the taps j = (t + pad) mod stride + m * stride reach column t.
override K: u32 = 3u;              // taps
override DEPTHWISE: bool = false;  // groups == C_in == C_out
override PRE_ACT: bool = false;    // LeakyReLU(slope) on every input value
override RESIDUAL: bool = false;   // add r[o, t] (same shape as y)
override REFLECT_LEFT: bool = false;

// params: 0 C_in, 1 C_out, 2 T_in, 3 T_out (conv columns, before any reflection pad), 4 stride, 5 pad,
// 6 slope (f32 bits); 63 is 0
#include "common/layer_bindings.wgsl"
#include "common/leaky_relu.wgsl"

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c_in = p[0];
    let c_out = p[1];
    let t_in = i32(p[2]);
    let t_conv = p[3];
    let cols = select(t_conv, t_conv + 1u, REFLECT_LEFT);
    let col = wid.x * 64u + lid;
    let o0 = wid.y * 4u;
    keep_residual_bound();
    if (col >= cols) {
        return;
    }
    var t = i32(col);
    if (REFLECT_LEFT) {
        t = select(t - 1, 1, col == 0u);
    }
    let stride = i32(p[4]);
    let pad = i32(p[5]);
    let slope = bitcast<f32>(p[6]);
    var acc = vec4<f32>(0.0);
    for (var j = (t + pad) % stride; j < i32(K); j += stride) {
        let s = (t + pad - j) / stride;
        if (s < 0 || s >= t_in) {
            continue;
        }
        if (DEPTHWISE) {
            for (var q = 0u; q < 4u; q++) {
                let c = min(o0 + q, c_out - 1u);
                var v = x[c * u32(t_in) + u32(s)];
                if (PRE_ACT) { v = leaky_relu(v, slope); }
                acc[q] += v * w[c * K + u32(j)];
            }
        } else {
            let wrow = u32(j) * c_out + o0;
            for (var i = 0u; i < c_in; i++) {
                var v = x[i * u32(t_in) + u32(s)];
                if (PRE_ACT) { v = leaky_relu(v, slope); }
                let wb = i * K * c_out + wrow;
                acc += v * vec4<f32>(w[wb], w[min(wb + 1u, wb + c_out - o0 - 1u)],
                                     w[min(wb + 2u, wb + c_out - o0 - 1u)], w[min(wb + 3u, wb + c_out - o0 - 1u)]);
            }
        }
    }
    for (var q = 0u; q < 4u; q++) {
        let o = o0 + q;
        if (o >= c_out) {
            break;
        }
        var v = acc[q] + bias[o];
        let index = o * cols + col;
        if (RESIDUAL) {
            v += r[index];
        }
        y[index] = v;
    }
}
