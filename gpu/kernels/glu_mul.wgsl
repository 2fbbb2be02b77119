// glu_mul: out = act(gate) * up, the gated feed-forward (matmul/glu.wgsl: GeGLU or SwiGLU by GLU_ACT) where gate
// and up come from separate products.
// Work split: one invocation per element of the step's rows, 256 per workgroup.
#include "common/step.wgsl"
#include "matmul/glu.wgsl"

override D: u32 = 2048u;  // feed-forward width

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> gate: array<f32>;        // [T_MAX, D]
@group(0) @binding(2) var<storage, read> up: array<f32>;          // [T_MAX, D]
@group(0) @binding(3) var<storage, read_write> out: array<f32>;   // [T_MAX, D]

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * 256u + lid;
    if (i >= step.n_tokens * D) {
        return;
    }
    out[i] = glu(gate[i], up[i]);
}
