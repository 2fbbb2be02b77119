// attention_spans_combine: pass 2 of attention_spans.wgsl, merging each (row, head)'s SPLITS partial results:
//   M = max_s m_s, out = sum_s exp(m_s - M) acc_s / sum_s exp(m_s - M) l_s.
// Work split: one invocation per (row, head, value), 64 per workgroup, rows past the step's n_tokens skipped.
#include "common/step.wgsl"

override HEADS: u32 = 6u;
override D: u32 = 64u;
override SPLITS: u32 = 6u;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> partial: array<f32>;       // [T_MAX * HEADS * SPLITS, D + 2]
@group(0) @binding(2) var<storage, read_write> out: array<f32>;     // [T_MAX, HEADS * D]

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let id = (wid.x + wid.y * nwg.x) * 64u + lid;
    if (id >= step.n_tokens * HEADS * D) {
        return;
    }
    let i = id % D;
    let row = id / D;  // t * HEADS + h
    var big = -3.4028235e38;
    for (var s = 0u; s < SPLITS; s++) {
        let p = (row * SPLITS + s) * (D + 2u);
        if (partial[p + D + 1u] > 0.0) {
            big = max(big, partial[p + D]);
        }
    }
    var num = 0.0;
    var den = 0.0;
    for (var s = 0u; s < SPLITS; s++) {
        let p = (row * SPLITS + s) * (D + 2u);
        let l = partial[p + D + 1u];
        if (l > 0.0) {
            let w = exp(partial[p + D] - big);
            num += w * partial[p + i];
            den += w * l;
        }
    }
    out[id] = num / den;
}
