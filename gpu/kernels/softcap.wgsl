// softcap: in place on the output rows' logits: z = CAP * tanh(z / CAP) (Gemma's final logit softcap).
// The argument is clamped to +-10 first (tanh is 1 in f32 beyond ~9), so no tanh ever sees a huge value.
// Work split: one invocation per logit of the step's first n_out rows, 256 per workgroup.
#include "common/step.wgsl"

override V: u32 = 262144u;   // logits per row
override CAP: f32 = 30.0;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read_write> logits: array<f32>;   // [R_MAX, V]

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * 256u + lid;
    if (i >= step.n_out * V) {
        return;
    }
    logits[i] = CAP * tanh(clamp(logits[i] / CAP, -10.0, 10.0));
}
