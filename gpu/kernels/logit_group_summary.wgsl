// logit_group_summary: a summary of one row of logits for a greedy step that keeps the row on the GPU:
// for four groups of tokens, the max logit, its token (the first on ties, as numpy's argmax) and the log-sum-exp,
// over the tokens the mask allows:
//   group 0: [0, EOT)   group 1: EOT   group 2: (EOT, TB)   group 3: [ts_lo, ts_hi]
// (for Whisper: text, <|endoftext|>, other specials, timestamps)
//   out[3 g + 0] = max, out[3 g + 1] = bitcast<f32>(argmax), out[3 g + 2] = log(sum exp) (max = -3.4e38 when empty)
// mask: one bit per token (1: allowed), the suppressed tokens cleared; params: (ts_lo, ts_hi) of this step.
// The host applies its decoding rules to these twelve numbers.
// Work split: one workgroup of 256 per group; each invocation keeps a running max / sum of exponentials over a
// strided slice, then a tree in workgroup memory combines them.
#include "common/step.wgsl"

override V: u32 = 51864u;   // vocabulary
override EOT: u32 = 50256u;
override TB: u32 = 50363u;  // first timestamp token

const WG: u32 = 256u;
const NEG_BIG: f32 = -3.4028235e38;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> logits: array<f32>;        // [>= 1, V]: row 0
@group(0) @binding(2) var<storage, read> mask: array<u32>;          // [ceil(V / 32)]
@group(0) @binding(3) var<storage, read> params: array<u32>;        // [2]: ts_lo, ts_hi
@group(0) @binding(4) var<storage, read_write> out: array<f32>;     // [12]

var<workgroup> red_max: array<f32, WG>;
var<workgroup> red_sum: array<f32, WG>;
var<workgroup> red_idx: array<u32, WG>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let g = wid.x;
    if (g >= 4u || step.n_tokens == 0u) {
        return;
    }
    var lo = 0u;
    var hi = EOT;
    if (g == 1u) { lo = EOT; hi = EOT + 1u; }
    if (g == 2u) { lo = EOT + 1u; hi = TB; }
    if (g == 3u) { lo = params[0]; hi = min(params[1] + 1u, V); }
    var m = NEG_BIG;
    var s = 0.0;
    var idx = 0xffffffffu;
    for (var j = lo + lid; j < hi; j += WG) {
        if ((mask[j / 32u] & (1u << (j % 32u))) == 0u) {
            continue;
        }
        let v = logits[j];
        if (v > m) {
            s = s * exp(m - v) + 1.0;
            m = v;
            idx = j;
        } else {
            s += exp(v - m);
        }
    }
    red_max[lid] = m;
    red_sum[lid] = s;
    red_idx[lid] = idx;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride >>= 1u) {
        if (lid < stride) {
            let m2 = red_max[lid + stride];
            let s2 = red_sum[lid + stride];
            let i2 = red_idx[lid + stride];
            let m1 = red_max[lid];
            let big = max(m1, m2);
            var total = 0.0;
            if (red_sum[lid] > 0.0) { total += red_sum[lid] * exp(m1 - big); }
            if (s2 > 0.0) { total += s2 * exp(m2 - big); }
            if (m2 > m1 || (m2 == m1 && i2 < red_idx[lid])) {
                red_idx[lid] = i2;
            }
            red_max[lid] = big;
            red_sum[lid] = total;
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        let total = red_sum[0];
        out[3u * g] = red_max[0];
        out[3u * g + 1u] = bitcast<f32>(red_idx[0]);
        out[3u * g + 2u] = select(NEG_BIG, red_max[0] + log(total), total > 0.0);
    }
}
