// attention_full_values: out[t, h, :] = sum_j p[h, t, j] v[j, h], the last pass of full
// (unmasked) self-attention over N rows: the probabilities come from attention_full_scores.wgsl and
// softmax_rows.wgsl, the value rows from the fused row [q | k | v] of ROW_HEADS heads, of which this dispatch
// computes [FIRST_HEAD, FIRST_HEAD + HEADS) (p holding only those).
// Work split: one invocation per (head, 4 queries, 4 dimensions); the D / 4 invocations of one head and query
// block are neighbours, so they read the same probabilities (one load for the group) and consecutive vec4s of each
// value row; a register tile of 4 queries x 4 dimensions, as a matmul.
#include "common/step.wgsl"

override N: u32 = 1500u;        // rows, a multiple of 4
override HEADS: u32 = 6u;      // heads computed here
override ROW_HEADS: u32 = HEADS;  // heads in a fused row (and in an output row)
override FIRST_HEAD: u32 = 0u;  // the first head computed here
override D: u32 = 64u;          // head dimension (a multiple of 4)

const WG: u32 = 64u;
const V4: u32 = D / 4u;
const STRIDE4: u32 = 3u * ROW_HEADS * V4;
const B: u32 = N / 4u;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> p: array<vec4<f32>>;           // [HEADS, N, N / 4]
@group(0) @binding(2) var<storage, read> qkv: array<vec4<f32>>;         // [N, 3 * ROW_HEADS * D / 4]
@group(0) @binding(3) var<storage, read_write> out: array<vec4<f32>>;   // [N, ROW_HEADS * D / 4]

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
    var acc: array<vec4<f32>, 4>;  // acc[i]: dimensions 4c..4c+3 of query 4 qb + i
    for (var i = 0u; i < 4u; i++) {
        acc[i] = vec4<f32>(0.0);
    }
    let v0 = (2u * ROW_HEADS + FIRST_HEAD + h) * V4 + c;
    let p0 = (h * N + 4u * qb) * B;
    for (var jb = 0u; jb < B; jb++) {
        let va = qkv[4u * jb * STRIDE4 + v0];
        let vb = qkv[(4u * jb + 1u) * STRIDE4 + v0];
        let vc = qkv[(4u * jb + 2u) * STRIDE4 + v0];
        let vd = qkv[(4u * jb + 3u) * STRIDE4 + v0];
        for (var i = 0u; i < 4u; i++) {
            let r = p[p0 + i * B + jb];
            acc[i] += r.x * va + r.y * vb + r.z * vc + r.w * vd;
        }
    }
    for (var i = 0u; i < 4u; i++) {
        out[((4u * qb + i) * ROW_HEADS + FIRST_HEAD + h) * V4 + c] = acc[i];
    }
}
