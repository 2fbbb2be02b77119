// attention_full_scores: s[h, t, j] = SCALE * q[t, h] . k[j, h] for all N x N pairs of each head, the first pass
// of full (unmasked) self-attention over N rows (softmax_rows.wgsl and attention_full_values.wgsl finish it).
// q and k are read from one fused row [q | k | v] of 3 * ROW_HEADS * D values; this dispatch computes heads
// [FIRST_HEAD, FIRST_HEAD + HEADS) of the row's ROW_HEADS (a group of them, where all heads' scores would not fit
// one binding), s holding only those.
// Work split: one invocation per (head, 4 queries, 4 keys) block: 16 dot products from 4 + 4 vec4 loads per step of
// 4 dimensions (a register tile, as a matmul), 64 invocations per workgroup with neighbouring invocations on
// neighbouring key blocks of the same queries (their q loads are shared).
#include "common/step.wgsl"

override N: u32 = 1500u;        // rows (queries and keys), a multiple of 4
override HEADS: u32 = 6u;      // heads computed here
override ROW_HEADS: u32 = HEADS;  // heads in a fused row
override FIRST_HEAD: u32 = 0u;  // the first head computed here
override D: u32 = 64u;          // head dimension (a multiple of 4)
override SCALE: f32 = 0.125;    // 1 / sqrt(D)

const WG: u32 = 64u;
const V4: u32 = D / 4u;
const STRIDE4: u32 = 3u * ROW_HEADS * V4;  // vec4s per fused row
const B: u32 = N / 4u;                 // 4-row blocks

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> qkv: array<vec4<f32>>;         // [N, 3 * ROW_HEADS * D / 4]
@group(0) @binding(2) var<storage, read_write> s: array<vec4<f32>>;     // [HEADS, N, N / 4]

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let id = (wid.x + wid.y * nwg.x) * WG + lid;
    if (id >= HEADS * B * B || step.n_tokens == 0u) {
        return;
    }
    let kb = id % B;
    let qb = (id / B) % B;
    let h = id / (B * B);
    var acc: array<vec4<f32>, 4>;  // acc[i][j]: query 4 qb + i, key 4 kb + j
    for (var i = 0u; i < 4u; i++) {
        acc[i] = vec4<f32>(0.0);
    }
    let q0 = 4u * qb * STRIDE4 + (FIRST_HEAD + h) * V4;
    let k0 = 4u * kb * STRIDE4 + (ROW_HEADS + FIRST_HEAD + h) * V4;
    for (var c = 0u; c < V4; c++) {
        let k_0 = qkv[k0 + c];
        let k_1 = qkv[k0 + STRIDE4 + c];
        let k_2 = qkv[k0 + 2u * STRIDE4 + c];
        let k_3 = qkv[k0 + 3u * STRIDE4 + c];
        for (var i = 0u; i < 4u; i++) {
            let q = qkv[q0 + i * STRIDE4 + c];
            acc[i] += vec4<f32>(dot(q, k_0), dot(q, k_1), dot(q, k_2), dot(q, k_3));
        }
    }
    for (var i = 0u; i < 4u; i++) {
        s[(h * N + 4u * qb + i) * B + kb] = acc[i] * SCALE;
    }
}
