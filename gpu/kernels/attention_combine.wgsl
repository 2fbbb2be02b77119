// attention_combine: merge the SPLITS partial softmaxes of attention.wgsl into each row's output.
//   M = max_s m_s,  L = sum_s l_s e^(m_s - M),  out[row, :] = sum_s acc_s e^(m_s - M) / L
// A part with no keys has m = -max f32 and l = 0, so its weight is 0.
// Work split: one workgroup of 256 invocations per (token, head) row. Invocation s < SPLITS loads
// part s's (m, l) into workgroup memory; then every invocation forms M, L and the part weights
// itself from those broadcast reads (no invocation walks the parts while the others wait: invocation 0
// doing it alone, three serial passes over 32 parts, cost ~10 us of a 16 us dispatch on an H100), and
// sums its dim(s) over the parts (one dim each for D <= 256).
#include "common/step.wgsl"

override D: u32 = 256u;
override HEADS: u32 = 4u;
override SPLITS: u32 = 2u;

const WG: u32 = 256u;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> partials: array<f32>;   // [T_MAX * HEADS, SPLITS, D + 4]: acc[D], m, l, -, -
@group(0) @binding(2) var<storage, read_write> out: array<f32>;  // [T_MAX, HEADS, D]

var<workgroup> part_max: array<f32, SPLITS>;
var<workgroup> part_sum: array<f32, SPLITS>;

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
        part_sum[s] = partials[first + s * (D + 4u) + D + 1u];
    }
    workgroupBarrier();
    var m = -3.4028235e38;
    for (var s = 0u; s < SPLITS; s++) {
        m = max(m, part_max[s]);
    }
    var weights: array<f32, SPLITS>;
    var total = 0.0;
    for (var s = 0u; s < SPLITS; s++) {
        weights[s] = exp(part_max[s] - m);
        total += part_sum[s] * weights[s];
    }
    for (var dim = lid; dim < D; dim += WG) {
        var sum = 0.0;
        for (var s = 0u; s < SPLITS; s++) {
            if (weights[s] > 0.0) {  // parts left empty (short rows) are not read
                sum += partials[first + s * (D + 4u) + dim] * weights[s];
            }
        }
        out[row * D + dim] = sum / total;
    }
}
