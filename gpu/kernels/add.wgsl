// add: out[t, i] = a[t, i] + b[t, i] for the step's first n_tokens rows of width D.
// Work split: one invocation per element, 256 per workgroup, over a 2-D grid of workgroups.
#include "common/step.wgsl"

override D: u32 = 1u;  // row width in elements

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * 256u + lid;
    if (i >= step.n_tokens * D) {
        return;
    }
    out[i] = a[i] + b[i];
}
