// expert_route: Gemma 4's expert router from its scores, per token row:
//   p = softmax(scores[t, :]);  the TOP_K largest p (ties: the lower expert first, as torch.topk on CPU)
//   weights[t, e] = p[e] / sum of the chosen p * expert_scale[e] for chosen e, else 0
// so the experts' outputs can be summed densely with these weights (kernels/expert_gelu_mul.wgsl); and the same
// choices as lists: choice[t, k] the k-th expert picked, route[t, k] its weight (kernels/expert_matvec.wgsl).
// Work split: one invocation per token row (EXPERTS is small: 128 in the largest Gemma 4).
#include "common/step.wgsl"

override EXPERTS: u32 = 128u;
override TOP_K: u32 = 8u;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> scores: array<f32>;          // [T_MAX, EXPERTS] router logits
@group(0) @binding(2) var<storage, read> expert_scale: array<f32>;    // [EXPERTS] per-expert output scale
@group(0) @binding(3) var<storage, read_write> weights: array<f32>;   // [T_MAX, EXPERTS]
@group(0) @binding(4) var<storage, read_write> choice: array<u32>;    // [T_MAX, TOP_K]
@group(0) @binding(5) var<storage, read_write> route: array<f32>;     // [T_MAX, TOP_K]

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let t = (wid.x + wid.y * nwg.x) * 64u + lid;
    if (t >= step.n_tokens) {
        return;
    }
    let base = t * EXPERTS;
    var top = -3.4028235e38;
    for (var e = 0u; e < EXPERTS; e++) {
        top = max(top, scores[base + e]);
        weights[base + e] = 0.0;
    }
    var total = 0.0;
    for (var e = 0u; e < EXPERTS; e++) {
        total += exp(scores[base + e] - top);
    }
    // pick TOP_K times the largest score not yet picked (marked by a non-zero weight)
    var chosen_sum = 0.0;
    for (var k = 0u; k < TOP_K; k++) {
        var best = 0u;
        var best_score = -3.4028235e38;
        var found = false;
        for (var e = 0u; e < EXPERTS; e++) {
            let s = scores[base + e];
            if (weights[base + e] == 0.0 && (!found || s > best_score)) {
                best = e;
                best_score = s;
                found = true;
            }
        }
        let p = exp(best_score - top) / total;
        weights[base + best] = max(p, 1e-38);   // non-zero marks it chosen
        choice[t * TOP_K + k] = best;
        chosen_sum += p;
    }
    for (var e = 0u; e < EXPERTS; e++) {
        let p = weights[base + e];
        if (p != 0.0) {
            weights[base + e] = p / chosen_sum * expert_scale[e];
        }
    }
    for (var k = 0u; k < TOP_K; k++) {
        route[t * TOP_K + k] = weights[base + choice[t * TOP_K + k]];
    }
}
