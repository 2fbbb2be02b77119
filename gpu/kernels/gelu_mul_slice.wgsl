// gelu_mul_slice: a gate times a slice of another tensor's columns: out[t, j] = gelu_tanh(g[t, j]) * pli[t, OFFSET + j]
// for j < P (a per-layer input gate: pli holds every layer's inputs side by side, row stride STRIDE, this
// layer's at OFFSET).
// Work split: one invocation per element of the step's rows, 256 per workgroup.
#include "common/step.wgsl"
#include "common/gelu_tanh.wgsl"

override P: u32 = 256u;          // per-layer input width
override STRIDE: u32 = 8960u;    // values per row of pli (layers * P)
override OFFSET: u32 = 0u;       // this layer's first column in pli

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> g: array<f32>;            // [T_MAX, P] x W_inp_gate
@group(0) @binding(2) var<storage, read> pli: array<f32>;          // [T_MAX, STRIDE]
@group(0) @binding(3) var<storage, read_write> out: array<f32>;    // [T_MAX, P]

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * 256u + lid;
    if (i >= step.n_tokens * P) {
        return;
    }
    out[i] = gelu_tanh(g[i]) * pli[(i / P) * STRIDE + OFFSET + i % P];
}
