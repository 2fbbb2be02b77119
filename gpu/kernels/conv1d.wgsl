// conv1d: a 1-D convolution over time-major rows, as torch.nn.functional.conv1d computes it:
//   y[t, co] = bias[co] + sum_{k < K} sum_{c < C_IN / GROUPS}
//                w[co, k, c] * x[t * STRIDE + k * DILATION - PAD_LEFT, g * C_IN / GROUPS + c]
// with g = co / (C_OUT / GROUPS), and input rows outside [0, t_in) read as zero (PAD_LEFT zeros before the
// input, PAD_RIGHT after it). t_in is T_IN, or the step's n_tokens when T_IN is 0; the output has
// t_out = (t_in + PAD_LEFT + PAD_RIGHT - DILATION * (K - 1) - 1) / STRIDE + 1 rows (rows past it are untouched).
// Layouts: x [t_in, X_STRIDE] (channel c of row t at t * X_STRIDE + X_OFFSET + c), y [t_out, Y_STRIDE]
// (channel co at t * Y_STRIDE + Y_OFFSET + co), w [C_OUT, K, C_IN / GROUPS]: PyTorch's [C_OUT, C_IN / GROUPS, K]
// with the last two axes swapped at upload (gpu/ops/conv.py), so the inner loop walks x's row and w's row together.
// Work split: one invocation per (output row, CO_TILE consecutive output channels), 64 per workgroup, over a 2-D
// grid of workgroups; neighbouring invocations share t, so they read the same input rows (from cache).
#include "common/step.wgsl"

override C_IN: u32 = 80u;        // input channels
override C_OUT: u32 = 384u;      // output channels
override K: u32 = 3u;            // kernel taps
override STRIDE: u32 = 1u;       // input rows between output rows
override DILATION: u32 = 1u;     // input rows between taps
override PAD_LEFT: u32 = 1u;     // zero rows before the input
override PAD_RIGHT: u32 = 1u;    // zero rows after the input
override GROUPS: u32 = 1u;       // channel groups (C_IN and C_OUT multiples of it; C_IN = C_OUT = GROUPS: depthwise)
override T_IN: u32 = 0u;         // input rows; 0: the step's n_tokens
override X_STRIDE: u32 = 80u;    // values per x row (>= X_OFFSET + C_IN)
override X_OFFSET: u32 = 0u;     // first input channel's column in an x row
override Y_STRIDE: u32 = 384u;   // values per y row (>= Y_OFFSET + C_OUT)
override Y_OFFSET: u32 = 0u;     // first output channel's column in a y row
override HAS_BIAS: bool = true;  // add bias[co]
override CO_TILE: u32 = 4u;      // output channels per invocation (divides C_OUT / GROUPS)

const WG: u32 = 64u;
const CIN_G: u32 = C_IN / GROUPS;    // input channels per group
const COUT_G: u32 = C_OUT / GROUPS;  // output channels per group
const TILES: u32 = C_OUT / CO_TILE;  // invocations per output row

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> x: array<f32>;         // [t_in, X_STRIDE]
@group(0) @binding(2) var<storage, read> w: array<f32>;         // [C_OUT, K, CIN_G]
@group(0) @binding(3) var<storage, read> bias: array<f32>;      // [C_OUT] (any f32 tensor unless HAS_BIAS)
@group(0) @binding(4) var<storage, read_write> y: array<f32>;   // [t_out, Y_STRIDE]

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let t_in = select(T_IN, step.n_tokens, T_IN == 0u);
    let span = DILATION * (K - 1u) + 1u;
    let padded = t_in + PAD_LEFT + PAD_RIGHT;
    if (padded < span) {
        return;
    }
    let t_out = (padded - span) / STRIDE + 1u;
    let id = (wid.x + wid.y * nwg.x) * WG + lid;
    if (id >= t_out * TILES) {
        return;
    }
    let t = id / TILES;
    let co0 = (id % TILES) * CO_TILE;
    let x_col = X_OFFSET + (co0 / COUT_G) * CIN_G;

    var acc: array<f32, CO_TILE>;
    for (var j = 0u; j < CO_TILE; j++) {
        acc[j] = select(0.0, bias[co0 + j], HAS_BIAS);
    }
    for (var k = 0u; k < K; k++) {
        let r = t * STRIDE + k * DILATION;  // row of the padded input
        if (r < PAD_LEFT || r - PAD_LEFT >= t_in) {
            continue;
        }
        let xb = (r - PAD_LEFT) * X_STRIDE + x_col;
        let wb = (co0 * K + k) * CIN_G;
        var c = 0u;
        // Four channels a round: four independent products per output channel before they are summed.
        for (; c + 4u <= CIN_G; c += 4u) {
            let xv = vec4<f32>(x[xb + c], x[xb + c + 1u], x[xb + c + 2u], x[xb + c + 3u]);
            for (var j = 0u; j < CO_TILE; j++) {
                let o = wb + j * K * CIN_G + c;
                acc[j] += dot(xv, vec4<f32>(w[o], w[o + 1u], w[o + 2u], w[o + 3u]));
            }
        }
        for (; c < CIN_G; c++) {
            let xv = x[xb + c];
            for (var j = 0u; j < CO_TILE; j++) {
                acc[j] += xv * w[wb + j * K * CIN_G + c];
            }
        }
    }
    let yb = t * Y_STRIDE + Y_OFFSET + co0;
    for (var j = 0u; j < CO_TILE; j++) {
        y[yb + j] = acc[j];
    }
}
