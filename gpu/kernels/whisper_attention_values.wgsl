// whisper_attention_values: out[t, h, :] = sum_j softmax_j(s[h, t, :]) v[j, h], the second half of Whisper's encoder
// self-attention (after whisper_attention_scores.wgsl): a softmax over each row of scores and the weighted sum of
// the value rows, read from the fused row [q | k | v].
// Work split: one invocation per (head, 4 queries, 4 dimensions); the D / 4 invocations of one head and query
// block are neighbours, so they read the same scores (one load for the group) and consecutive vec4s of each value
// row. Online softmax over chunks of KEYS keys (one rescale per chunk), as encoder_attention.wgsl.
#include "common/step.wgsl"

override N: u32 = 1500u;        // rows, a multiple of 4
override HEADS: u32 = 6u;
override D: u32 = 64u;          // head dimension (a multiple of 4)

const WG: u32 = 64u;
const V4: u32 = D / 4u;
const STRIDE4: u32 = 3u * HEADS * V4;
const B: u32 = N / 4u;
const KEYS: u32 = 4u;           // keys per chunk: one vec4 of scores per query
const NEG_BIG: f32 = -3.4028235e38;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> s: array<vec4<f32>>;           // [HEADS, N, N / 4]
@group(0) @binding(2) var<storage, read> qkv: array<vec4<f32>>;         // [N, 3 * HEADS * D / 4]
@group(0) @binding(3) var<storage, read_write> out: array<vec4<f32>>;   // [N, HEADS * D / 4]

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let id = (wid.x + wid.y * nwg.x) * WG + lid;
    if (id >= HEADS * B * V4 || step.n_tokens == 0u) {
        return;
    }
    let c = id % V4;
    let qb = (id / V4) % B;
    let h = id / (V4 * B);
    var m = vec4<f32>(NEG_BIG);   // running max of queries 4 qb + 0..3
    var l = vec4<f32>(0.0);       // running sums
    var acc: array<vec4<f32>, 4>;  // acc[i]: dimensions 4c..4c+3 of query 4 qb + i
    for (var i = 0u; i < 4u; i++) {
        acc[i] = vec4<f32>(0.0);
    }
    let v0 = (2u * HEADS + h) * V4 + c;
    let s0 = (h * N + 4u * qb) * B;
    for (var jb = 0u; jb < B; jb++) {
        let r0 = s[s0 + jb];
        let r1 = s[s0 + B + jb];
        let r2 = s[s0 + 2u * B + jb];
        let r3 = s[s0 + 3u * B + jb];
        let chunk = vec4<f32>(max(max(r0.x, r0.y), max(r0.z, r0.w)), max(max(r1.x, r1.y), max(r1.z, r1.w)),
                              max(max(r2.x, r2.y), max(r2.z, r2.w)), max(max(r3.x, r3.y), max(r3.z, r3.w)));
        let m_new = max(m, chunk);
        let correction = exp(m - m_new);
        let p0 = exp(r0 - vec4<f32>(m_new.x));
        let p1 = exp(r1 - vec4<f32>(m_new.y));
        let p2 = exp(r2 - vec4<f32>(m_new.z));
        let p3 = exp(r3 - vec4<f32>(m_new.w));
        l = l * correction + vec4<f32>(dot(p0, vec4<f32>(1.0)), dot(p1, vec4<f32>(1.0)), dot(p2, vec4<f32>(1.0)),
                                       dot(p3, vec4<f32>(1.0)));
        let va = qkv[4u * jb * STRIDE4 + v0];
        let vb = qkv[(4u * jb + 1u) * STRIDE4 + v0];
        let vc = qkv[(4u * jb + 2u) * STRIDE4 + v0];
        let vd = qkv[(4u * jb + 3u) * STRIDE4 + v0];
        acc[0] = acc[0] * correction.x + p0.x * va + p0.y * vb + p0.z * vc + p0.w * vd;
        acc[1] = acc[1] * correction.y + p1.x * va + p1.y * vb + p1.z * vc + p1.w * vd;
        acc[2] = acc[2] * correction.z + p2.x * va + p2.y * vb + p2.z * vc + p2.w * vd;
        acc[3] = acc[3] * correction.w + p3.x * va + p3.y * vb + p3.z * vc + p3.w * vd;
        m = m_new;
    }
    for (var i = 0u; i < 4u; i++) {
        out[((4u * qb + i) * HEADS + h) * V4 + c] = acc[i] / l[i];
    }
}
