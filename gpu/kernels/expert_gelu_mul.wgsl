// expert_gelu_mul: every expert's gated feed-forward activation, weighted by the router:
//   act[t, e * I + j] = gelu_tanh(gu[t, e * 2I + j]) * gu[t, e * 2I + I + j] * weights[t, e]
// where gu = x W_gate_up_exps (each expert's I gate rows then its I up rows, as GGUF's ffn_gate_up_exps).
// Experts the router did not choose have weight 0, so x W_down_cat (experts side by side) sums the chosen.
// Work split: one invocation per element of the step's rows, 256 per workgroup.
#include "common/step.wgsl"
#include "common/gelu_tanh.wgsl"

override I: u32 = 704u;          // expert feed-forward width
override EXPERTS: u32 = 128u;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> gu: array<f32>;            // [T_MAX, EXPERTS * 2I]
@group(0) @binding(2) var<storage, read> weights: array<f32>;       // [T_MAX, EXPERTS]
@group(0) @binding(3) var<storage, read_write> act: array<f32>;     // [T_MAX, EXPERTS * I]

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * 256u + lid;
    if (i >= step.n_tokens * EXPERTS * I) {
        return;
    }
    let t = i / (EXPERTS * I);
    let e = (i / I) % EXPERTS;
    let j = i % I;
    let src = t * EXPERTS * 2u * I + e * 2u * I + j;
    act[i] = gelu_tanh(gu[src]) * gu[src + I] * weights[t * EXPERTS + e];
}
