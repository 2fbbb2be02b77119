// sigmoid_mul: out[t, i] = x[t, i] * sigmoid(x[t, G_OFF + i]) for i < D on the step's first n_tokens rows, rows of
// x X_STRIDE wide. G_OFF = 0 is SiLU (x sigmoid(x)); G_OFF = D over rows of 2 D is torch's GLU on the last axis
// (the first half gated by the second), as Gemma 4's audio conformer uses both.
// sigmoid(v) = 1 / (1 + exp(-v)): exp(-v) overflows to inf for v < -88, giving the limit 0.
// Work split: one invocation per output element, 256 per workgroup, over a 2-D grid of workgroups.
#include "common/step.wgsl"

override D: u32 = 1024u;        // output row width in elements
override X_STRIDE: u32 = 1024u; // input row width in elements
override G_OFF: u32 = 0u;       // column of the gate of element 0

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> x: array<f32>;          // [T_MAX, X_STRIDE]
@group(0) @binding(2) var<storage, read_write> out: array<f32>;  // [T_MAX, D]

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let index = (wid.x + wid.y * nwg.x) * 256u + lid;
    if (index >= step.n_tokens * D) {
        return;
    }
    let t = index / D;
    let i = index % D;
    let base = t * X_STRIDE;
    out[index] = x[base + i] / (1.0 + exp(-x[base + G_OFF + i]));
}
