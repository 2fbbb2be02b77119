// attention_combine: merge the SPLITS partial softmaxes of attention.wgsl into each row's output.
//   M = max_s m_s,  L = sum_s l_s e^(m_s - M),  out[row, :] = sum_s acc_s e^(m_s - M) / L
// A part with no keys has m = -max f32 and l = 0, so its weight is 0.
// Work split: one workgroup of 64 invocations per (token, head) row; the part weights
// e^(m_s - M) / L are computed once into workgroup memory, then each invocation sums D/64 dims.
#include "common/step.wgsl"

override D: u32 = 256u;
override HEADS: u32 = 4u;
override SPLITS: u32 = 2u;

const WG: u32 = 64u;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> partials: array<f32>;   // [T_MAX * HEADS, SPLITS, D + 2]
@group(0) @binding(2) var<storage, read_write> out: array<f32>;  // [T_MAX, HEADS, D]

var<workgroup> part_weight: array<f32, SPLITS>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= step.n_tokens * HEADS) {
        return;
    }
    let first = row * SPLITS * (D + 2u);
    if (lid == 0u) {
        var m = -3.4028235e38;
        for (var s = 0u; s < SPLITS; s++) {
            m = max(m, partials[first + s * (D + 2u)]);
        }
        var total = 0.0;
        for (var s = 0u; s < SPLITS; s++) {
            let base = first + s * (D + 2u);
            let w = exp(partials[base] - m);
            part_weight[s] = w;
            total += partials[base + 1u] * w;
        }
        for (var s = 0u; s < SPLITS; s++) {
            part_weight[s] /= total;
        }
    }
    workgroupBarrier();
    for (var dim = lid; dim < D; dim += WG) {
        var sum = 0.0;
        for (var s = 0u; s < SPLITS; s++) {
            sum += partials[first + s * (D + 2u) + 2u + dim] * part_weight[s];
        }
        out[row * D + dim] = sum;
    }
}
