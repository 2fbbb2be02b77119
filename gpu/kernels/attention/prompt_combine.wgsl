// attention/prompt_combine: merge the parts of attention_prompt.wgsl (SPLITS > 1) into each row's output.
//   M = max_s m_s,  L = sum_s l_s 2^(m_s - M),  out[row, :] = sum_s acc_s 2^(m_s - M) / L
// with m_s in log2 units; parts with l_s = 0 (no keys) are skipped (their acc was never written).
// Work split: one thread per vec4 of an output row (D / 4 per row), WG threads per workgroup; every
// thread of a row reads the row's SPLITS (m, l) pairs (cached, shared by the row's threads).
#include "common/step.wgsl"

override D: u32 = 256u;
override HEADS: u32 = 4u;
override SPLITS: u32 = 2u;
override T_MAX: u32 = 512u;

const WG: u32 = 256u;
const VEC: u32 = D / 4u;
const ML_BASE: u32 = T_MAX * HEADS * SPLITS * VEC;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> partials: array<vec4<f32>>;  // acc [rows, SPLITS, D], then (m, l, -, -)
@group(0) @binding(2) var<storage, read_write> out: array<vec4<f32>>; // [T_MAX, HEADS, D]

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid;
    let row = i / VEC;
    let c = i % VEC;
    if (row >= step.n_tokens * HEADS) {
        return;
    }
    let first = row * SPLITS;
    var big = -3.4028235e38;
    for (var s = 0u; s < SPLITS; s++) {
        let ml = partials[ML_BASE + first + s];
        if (ml.y > 0.0) {
            big = max(big, ml.x);
        }
    }
    var total = 0.0;
    var sum = vec4<f32>();
    for (var s = 0u; s < SPLITS; s++) {
        let ml = partials[ML_BASE + first + s];
        if (ml.y > 0.0) {
            let w = exp2(ml.x - big);
            total += ml.y * w;
            sum += partials[(first + s) * VEC + c] * w;
        }
    }
    out[row * VEC + c] = sum / total;
}
