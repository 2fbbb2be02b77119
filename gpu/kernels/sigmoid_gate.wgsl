// sigmoid_gate: x[t, h * D + j] *= sigmoid(g[t, G_OFFSET + h * G_HEAD_STRIDE + j]) in place on the step's rows:
// an attention output gated per head by columns of another product (Qwen3.5 / Qwen3-Next: the query projection
// holds each head's query and then its gate, so G_HEAD_STRIDE = 2 D and G_OFFSET = D).
// Work split: one invocation per value of x's step rows, 256 per workgroup.
#include "common/step.wgsl"

override D: u32 = 256u;              // values per head
override HEADS: u32 = 8u;            // heads per row of x
override G_STRIDE: u32 = 4096u;      // values per row of g
override G_OFFSET: u32 = 256u;       // column of head 0's gate in a row of g
override G_HEAD_STRIDE: u32 = 512u;  // columns between two heads' gates

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> g: array<f32>;            // [T_MAX, G_STRIDE]
@group(0) @binding(2) var<storage, read_write> x: array<f32>;      // [T_MAX, HEADS * D]

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * 256u + lid;
    if (i >= step.n_tokens * HEADS * D) {
        return;
    }
    let t = i / (HEADS * D);
    let h = (i / D) % HEADS;
    let gate = g[t * G_STRIDE + G_OFFSET + h * G_HEAD_STRIDE + i % D];
    x[i] = x[i] / (1.0 + exp(-gate));
}
