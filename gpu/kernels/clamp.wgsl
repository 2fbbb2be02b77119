// clamp: out[t, i] = min(max(x[t, i], LO), HI) for the step's first n_tokens rows of width D
// (Gemma 4's clipped linears: a matrix's input and output held to bounds stored beside its weight).
// Work split: one invocation per element, 256 per workgroup, over a 2-D grid of workgroups.
#include "common/step.wgsl"

override D: u32 = 384u;  // row width in elements
override LO: f32 = -3.0e38;
override HI: f32 = 3.0e38;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> x: array<f32>;          // [T_MAX, D]
@group(0) @binding(2) var<storage, read_write> out: array<f32>;  // [T_MAX, D]

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * 256u + lid;
    if (i >= step.n_tokens * D) {
        return;
    }
    out[i] = min(max(x[i], LO), HI);
}
