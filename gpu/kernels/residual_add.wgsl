// residual_add: x[t, i] += y[t, i] (+ bias[i]) in place, for the step's first n_tokens rows of width D:
// the residual stream of a pre-norm block taking a linear's output and its bias in one pass, or a positional
// embedding added to activations (no bias).
// Work split: one invocation per element, 256 per workgroup, over a 2-D grid of workgroups.
#include "common/step.wgsl"

override D: u32 = 384u;           // row width in elements
override HAS_BIAS: bool = true;   // add bias[i] (else the bias binding is not read: bind any f32 tensor)

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;  // [T_MAX, D] the residual stream
@group(0) @binding(2) var<storage, read> y: array<f32>;        // [T_MAX, D] what is added
@group(0) @binding(3) var<storage, read> bias: array<f32>;     // [D]

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * 256u + lid;
    if (i >= step.n_tokens * D) {
        return;
    }
    x[i] += y[i] + select(0.0, bias[i % D], HAS_BIAS);
}
