// attention_full: full (unmasked) multi-head attention of N rows over the same N rows, in one pass (the host
// uses it where N is not a multiple of 4, else attention_full_scores / softmax_rows / attention_full_values):
//   out[t, h, :] = sum_j softmax_j(SCALE * q[t, h] . k[j, h]) v[j, h]    for j < N
// q, k and v are read from one fused row [q | k | v] of 3 * HEADS * D values.
// Work split: one invocation per (head, row), the rows of one head consecutive, 64 per workgroup. Unlike
// encoder_attention.wgsl (token-major, for packed batches with per-token spans), neighbouring invocations share
// their head and every invocation walks the same keys, so each key and value row is one uniform load for the
// whole workgroup (a broadcast across SIMD lanes on CPU adapters, a cached load on GPUs) and the loop bounds are
// uniform. Online softmax over chunks of KEYS scores, as encoder_attention.wgsl.
#include "common/step.wgsl"

override N: u32 = 1500u;        // rows (queries and keys)
override HEADS: u32 = 6u;
override D: u32 = 64u;          // head dimension (a multiple of 4)
override SCALE: f32 = 0.125;    // 1 / sqrt(D)

const WG: u32 = 64u;
const V4: u32 = D / 4u;
const STRIDE4: u32 = 3u * HEADS * V4;  // vec4s per fused row
const KEYS: u32 = 8u;
const NEG_BIG: f32 = -3.4028235e38;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> qkv: array<vec4<f32>>;         // [N, 3 * HEADS * D / 4]
@group(0) @binding(2) var<storage, read_write> out: array<vec4<f32>>;   // [N, HEADS * D / 4]

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let id = (wid.x + wid.y * nwg.x) * WG + lid;
    if (id >= N * HEADS || step.n_tokens == 0u) {  // (an empty step computes nothing)
        return;
    }
    let h = id / N;
    let t = id % N;
    var qv: array<vec4<f32>, V4>;
    var acc: array<vec4<f32>, V4>;
    let q_base = t * STRIDE4 + h * V4;
    for (var i = 0u; i < V4; i++) {
        qv[i] = qkv[q_base + i] * SCALE;
        acc[i] = vec4<f32>(0.0);
    }
    let k_head = (HEADS + h) * V4;
    let v_head = (2u * HEADS + h) * V4;
    var running_max = NEG_BIG;
    var running_sum = 0.0;
    var scores: array<f32, KEYS>;
    for (var first = 0u; first < N; first += KEYS) {
        let n = min(KEYS, N - first);
        var chunk_max = running_max;
        for (var c = 0u; c < n; c++) {
            let kb = (first + c) * STRIDE4 + k_head;
            var d = vec4<f32>(0.0);
            for (var i = 0u; i < V4; i++) {
                d += qv[i] * qkv[kb + i];
            }
            let s = d.x + d.y + d.z + d.w;
            scores[c] = s;
            chunk_max = max(chunk_max, s);
        }
        let correction = exp(running_max - chunk_max);
        running_sum *= correction;
        for (var i = 0u; i < V4; i++) {
            acc[i] *= correction;
        }
        for (var c = 0u; c < n; c++) {
            let p = exp(scores[c] - chunk_max);
            running_sum += p;
            let vb = (first + c) * STRIDE4 + v_head;
            for (var i = 0u; i < V4; i++) {
                acc[i] += p * qkv[vb + i];
            }
        }
        running_max = chunk_max;
    }
    let inv = 1.0 / running_sum;
    let out_base = (t * HEADS + h) * V4;
    for (var i = 0u; i < V4; i++) {
        out[out_base + i] = acc[i] * inv;
    }
}
