// attention_key_lanes: attention.wgsl's causal attention for software adapters (lavapipe), each invocation walking
// whole keys.
//   out[t, h, :] = sum_j softmax_j(SCALE * q[t, h] . k[j, g]) v[j, g],  g = h / (HEADS / KV_HEADS)
// over the keys attention.wgsl's header gives (the window, an image's later rows).
//
// Why a kernel of its own: a CPU runs a workgroup's invocations as the lanes of its vector registers, and its
// memory serves a lane streaming its own contiguous run of 16-byte loads several times faster than lanes
// interleaved GPU-style, where every vector load gathers from as many places as there are lanes. attention.wgsl
// shares each key among 8 invocations and each chunk of 32 keys between barriers, and attention_prompt.wgsl
// blocks of queries and keys in workgroup memory, which a GPU hides and a CPU pays for. Here each (token, head)
// row's keys are cut into SPLITS parts (attention/key_parts.wgsl, at least MIN_PART_KEYS keys each), and
// invocation g of the dispatch takes part g % SPLITS of row g / SPLITS: with SPLITS = 1 (prompts and large
// batches: rows enough) a workgroup's LANES invocations are LANES rows, each over all its keys; with more (decode
// steps of few rows) they are parts of a row. An invocation walks its keys one after another: the key's row of
// the cache in 16-byte loads dotted with q, then the value row in 16-byte loads into its own accumulator, with an
// online softmax (running max and sum). No barrier, no workgroup memory. With SPLITS = 1 it writes the normalised
// result to out[row, :]; otherwise out holds attention.wgsl's partials ([rows, SPLITS, D + 4]: the unnormalised
// sums, then max and sum), which attention_combine.wgsl merges with the same SPLITS and MIN_PART_KEYS. Queries come
// from q as qk_norm_rope_store.wgsl wrote them, keys and values from the cache (software adapters take no raw
// prologue).
#include "common/step.wgsl"
#include "common/rows.wgsl"
#include "attention/key_parts.wgsl"
#include "attention/score.wgsl"

override D: u32 = 256u;          // head dimension (a multiple of 16)
override HEADS: u32 = 4u;        // query heads
override KV_HEADS: u32 = 1u;     // key/value heads (grouped-query attention)
override WINDOW: u32 = 0u;       // sliding window in tokens; 0 = global attention
override SCALE: f32 = 0.0625;    // score scale
override SOFTCAP: f32 = 0.0;     // scores capped to SOFTCAP * tanh(score / SOFTCAP) (Gemma 2); 0 = none
override LATER_KEYS: bool = true;  // rows[t].w is honoured; false: causal
override KV_F16: bool = true;    // cache words hold two f16 values
override LANES: u32 = 8u;        // invocations a workgroup
override SPLITS: u32 = 16u;      // parts of each row's key range, an invocation each
override PAGE_TOKENS: u32 = 128u;
override MAX_PAGES: u32 = 64u;
override MIN_PART_KEYS: u32 = 4u;  // fewest keys a part takes

const QUADS: u32 = D / 4u;             // vec4s of a q, value or output row
const KV_WIDTH: u32 = KV_HEADS * D;    // cache values per token
const NEG_BIG: f32 = -3.4028235e38;
const_assert D % 16u == 0u;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;          // [T_MAX, HEADS, D]
@group(0) @binding(2) var<storage, read> k_cache: array<vec4<u32>>;    // [pool rows, KV_HEADS, D]: f16 pairs or f32
@group(0) @binding(3) var<storage, read> v_cache: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read_write> out: array<vec4<f32>>;  // [T_MAX, HEADS, D], or partials
@group(0) @binding(5) var<storage, read> rows: array<vec4<u32>>;       // [T_MAX] (position, slot, -, later keys)
@group(0) @binding(6) var<storage, read> page_table: array<u32>;       // [slots, MAX_PAGES]

var<private> query: array<vec4<f32>, QUADS>;
var<private> acc: array<vec4<f32>, QUADS>;  // the part's sum of exp(score - running max) v, unnormalised

// The eight f16 values of a 16-byte cache word, as two vec4s.
fn f16_eight(word: vec4<u32>) -> mat2x4<f32> {
    return mat2x4<f32>(vec4<f32>(unpack2x16float(word.x), unpack2x16float(word.y)),
                       vec4<f32>(unpack2x16float(word.z), unpack2x16float(word.w)));
}

// q . k for the cache row whose first value index is `first`.
fn key_dot(first: u32) -> f32 {
    var dot_sum = 0.0;
    if (KV_F16) {
        let at = first / 8u;
        for (var i = 0u; i < D / 8u; i++) {
            let k = f16_eight(k_cache[at + i]);
            dot_sum += dot(k[0], query[2u * i]) + dot(k[1], query[2u * i + 1u]);
        }
    } else {
        let at = first / 4u;
        for (var i = 0u; i < QUADS; i++) {
            dot_sum += dot(bitcast<vec4<f32>>(k_cache[at + i]), query[i]);
        }
    }
    return dot_sum;
}

// acc += weight * v for the cache row whose first value index is `first`.
fn add_value(first: u32, weight: f32) {
    if (KV_F16) {
        let at = first / 8u;
        for (var i = 0u; i < D / 8u; i++) {
            let v = f16_eight(v_cache[at + i]);
            acc[2u * i] += weight * v[0];
            acc[2u * i + 1u] += weight * v[1];
        }
    } else {
        let at = first / 4u;
        for (var i = 0u; i < QUADS; i++) {
            acc[i] += weight * bitcast<vec4<f32>>(v_cache[at + i]);
        }
    }
}

@compute @workgroup_size(LANES)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lane: u32) {
    let g = (wid.x + wid.y * nwg.x) * LANES + lane;
    let row = g / SPLITS;                         // (token, head)
    if (row >= step.n_tokens * HEADS) {
        return;
    }
    let part = g % SPLITS;
    let t = row / HEADS;
    let first_value = ((row % HEADS) / (HEADS / KV_HEADS)) * D;  // the kv head's first value in a cache row
    let r = rows[t];
    let hi = r.x + select(0u, r.w, LATER_KEYS);  // the last key the token sees
    let cut = key_parts(r.x, hi);
    let start = cut.lo + part * cut.per_part;
    let end = min(start + cut.per_part, hi + 1u);  // empty when start >= end

    for (var i = 0u; i < QUADS; i++) {
        query[i] = q[row * QUADS + i];
        acc[i] = vec4<f32>(0.0);
    }
    var running_max = NEG_BIG;
    var running_sum = 0.0;
    for (var key = start; key < end; key++) {
        let first = pool_row(r.y, key) * KV_WIDTH + first_value;
        let score = score_of(key_dot(first));
        if (score > running_max) {  // rescaled only where the max moves: early keys, rarely later
            let correction = exp(running_max - score);
            for (var i = 0u; i < QUADS; i++) {
                acc[i] *= correction;
            }
            running_sum *= correction;
            running_max = score;
        }
        let weight = exp(score - running_max);
        add_value(first, weight);
        running_sum += weight;
    }

    if (SPLITS == 1u) {
        for (var i = 0u; i < QUADS; i++) {
            out[row * QUADS + i] = acc[i] / running_sum;
        }
        return;
    }
    let at = g * (QUADS + 1u);
    for (var i = 0u; i < QUADS; i++) {
        out[at + i] = acc[i];
    }
    out[at + QUADS] = vec4<f32>(running_max, running_sum, 0.0, 0.0);  // an empty part: max -max f32, sum 0
}
