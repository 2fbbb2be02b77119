// attention_combine: merge the SPLITS partial softmaxes of attention.wgsl into each row's output.
//   M = max_s m_s,  L = sum_s l_s e^(m_s - M),  out[row, :] = sum_s acc_s e^(m_s - M) / L
// A part with no keys has m = -max f32 and l = 0, so its weight is 0.
// Work split: one workgroup of 256 invocations per (token, head) row. Invocation s reads part s's
// (m, l) (loads in parallel, not one invocation walking all parts), invocation 0 forms the part
// weights e^(m_s - M) / L in workgroup memory, then each invocation sums its dim(s) over the parts
// (one dim each for D <= 256: 64 invocations walking 4 dims x 32 parts took ~36 us on an H200).
#include "common/step.wgsl"

override D: u32 = 256u;
override HEADS: u32 = 4u;
override SPLITS: u32 = 2u;

const WG: u32 = 256u;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> partials: array<f32>;   // [T_MAX * HEADS, SPLITS, D + 4]: acc[D], m, l, -, -
@group(0) @binding(2) var<storage, read_write> out: array<f32>;  // [T_MAX, HEADS, D]

var<workgroup> part_max: array<f32, SPLITS>;
var<workgroup> part_weight: array<f32, SPLITS>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= step.n_tokens * HEADS) {
        return;
    }
    let first = row * SPLITS * (D + 4u);
    for (var s = lid; s < SPLITS; s += WG) {
        part_max[s] = partials[first + s * (D + 4u) + D];
        part_weight[s] = partials[first + s * (D + 4u) + D + 1u];  // the part's sum l_s, for now
    }
    workgroupBarrier();
    if (lid == 0u) {
        var m = -3.4028235e38;
        for (var s = 0u; s < SPLITS; s++) {
            m = max(m, part_max[s]);
        }
        var total = 0.0;
        for (var s = 0u; s < SPLITS; s++) {
            let w = exp(part_max[s] - m);
            total += part_weight[s] * w;
            part_max[s] = w;
        }
        for (var s = 0u; s < SPLITS; s++) {
            part_weight[s] = part_max[s] / total;
        }
    }
    workgroupBarrier();
    for (var dim = lid; dim < D; dim += WG) {
        var sum = 0.0;
        for (var s = 0u; s < SPLITS; s++) {
            sum += partials[first + s * (D + 4u) + dim] * part_weight[s];
        }
        out[row * D + dim] = sum;
    }
}
