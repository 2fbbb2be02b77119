// softmax_rows: x[r, :] = softmax(x[r, :]) in place for ROWS rows of N values (attention scores,
// between attention_full_scores.wgsl and attention_full_values.wgsl, so that each exponential is computed once
// rather than by every invocation that reads the score).
// Work split: one workgroup of 64 per row; max and sum by tree reductions in workgroup memory.
#include "common/step.wgsl"

override ROWS: u32 = 9000u;
override N: u32 = 1500u;

const WG: u32 = 64u;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;  // [ROWS, N]

var<workgroup> reduce: array<f32, WG>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= ROWS || step.n_tokens == 0u) {
        return;  // uniform over the workgroup
    }
    let base = row * N;
    var m = -3.4028235e38;
    for (var j = lid; j < N; j += WG) {
        m = max(m, x[base + j]);
    }
    reduce[lid] = m;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride >>= 1u) {
        if (lid < stride) {
            reduce[lid] = max(reduce[lid], reduce[lid + stride]);
        }
        workgroupBarrier();
    }
    m = reduce[0];
    workgroupBarrier();
    var total = 0.0;
    for (var j = lid; j < N; j += WG) {
        let p = exp(x[base + j] - m);
        x[base + j] = p;
        total += p;
    }
    reduce[lid] = total;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride >>= 1u) {
        if (lid < stride) {
            reduce[lid] += reduce[lid + stride];
        }
        workgroupBarrier();
    }
    let inv = 1.0 / reduce[0];
    for (var j = lid; j < N; j += WG) {
        x[base + j] *= inv;
    }
}
