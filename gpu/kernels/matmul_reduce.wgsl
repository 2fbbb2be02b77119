// matmul_reduce: the second pass of a matmul split over k (kernels/matmul/tiles.wgsl, SPLIT > 1):
// y[t, ROW_START + c] = sum_s part[s T_MAX + t, c] for the step's first min(n_tokens, T_MAX) tokens
// and c < N_ROWS; with GLU = 1, gelu_tanh(g) * u of the gate sums g (columns c) and up sums u
// (columns N_ROWS + c). Parts are added in order s = 0, 1, ... Work split: one invocation per
// output value, 256 per workgroup.
#include "common/step.wgsl"
#include "matmul/glu.wgsl"

override N_ROWS: u32 = 1u;     // y columns
override ROW_START: u32 = 0u;  // y column of the first
override Y_STRIDE: u32 = 1u;   // values per y row
override T_MAX: u32 = 1u;      // rows of y (and of each part)
override SPLIT: u32 = 2u;      // parts
override GLU: u32 = 0u;        // 1: gelu_tanh(gate) * up

const WIDTH: u32 = N_ROWS * (1u + GLU);  // values per part row

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> part: array<f32>;      // [SPLIT * T_MAX, WIDTH]
@group(0) @binding(2) var<storage, read_write> y: array<f32>;   // [T_MAX, Y_STRIDE]

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * 256u + lid;
    let t = i / N_ROWS;
    let c = i % N_ROWS;
    if (t >= min(step.n_tokens, T_MAX)) {
        return;
    }
    var g = 0.0;
    var u = 0.0;
    for (var s = 0u; s < SPLIT; s++) {
        let row = (s * T_MAX + t) * WIDTH;
        g += part[row + c];
        if (GLU == 1u) {
            u += part[row + N_ROWS + c];
        }
    }
    if (GLU == 1u) {
        g = glu(g, u);
    }
    y[t * Y_STRIDE + ROW_START + c] = g;
}
