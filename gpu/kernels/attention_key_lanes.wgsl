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
// A row's query and accumulator live in CHUNK-vec4 arrays, one pair per 64 dimensions, each reached only in a loop
// of CHUNK steps (chunk_op): lavapipe unrolls such loops and keeps the arrays in registers, where one array of the
// whole head dimension, indexed in longer loops, went through memory a lane at a time.
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
const CHUNK: u32 = 16u;                // vec4s of a row's state a private array holds
const CHUNKS: u32 = (QUADS + CHUNK - 1u) / CHUNK;
const_assert D % 16u == 0u;
const_assert CHUNKS <= 8u;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;          // [T_MAX, HEADS, D]
@group(0) @binding(2) var<storage, read> k_cache: array<vec4<u32>>;    // [pool rows, KV_HEADS, D]: f16 pairs or f32
@group(0) @binding(3) var<storage, read> v_cache: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read_write> out: array<vec4<f32>>;  // [T_MAX, HEADS, D], or partials
@group(0) @binding(5) var<storage, read> rows: array<vec4<u32>>;       // [T_MAX] (position, slot, -, later keys)
@group(0) @binding(6) var<storage, read> page_table: array<u32>;       // [slots, MAX_PAGES]

// The row's query and its part's sum of exp(score - running max) v, unnormalised: vec4s c CHUNK .. c CHUNK +
// CHUNK - 1 in q<c> and a<c>.
var<private> q0: array<vec4<f32>, CHUNK>;
var<private> q1: array<vec4<f32>, CHUNK>;
var<private> q2: array<vec4<f32>, CHUNK>;
var<private> q3: array<vec4<f32>, CHUNK>;
var<private> q4: array<vec4<f32>, CHUNK>;
var<private> q5: array<vec4<f32>, CHUNK>;
var<private> q6: array<vec4<f32>, CHUNK>;
var<private> q7: array<vec4<f32>, CHUNK>;
var<private> a0: array<vec4<f32>, CHUNK>;
var<private> a1: array<vec4<f32>, CHUNK>;
var<private> a2: array<vec4<f32>, CHUNK>;
var<private> a3: array<vec4<f32>, CHUNK>;
var<private> a4: array<vec4<f32>, CHUNK>;
var<private> a5: array<vec4<f32>, CHUNK>;
var<private> a6: array<vec4<f32>, CHUNK>;
var<private> a7: array<vec4<f32>, CHUNK>;

// chunk_op's operations
const OP_LOAD: u32 = 0u;     // query <- q[at ..], accumulator <- 0
const OP_DOT: u32 = 1u;      // returns query . the key row whose first value index is `at`
const OP_VALUE: u32 = 2u;    // accumulator += x * the value row whose first value index is `at`
const OP_RESCALE: u32 = 3u;  // accumulator *= x
const OP_STORE: u32 = 4u;    // out[at ..] <- accumulator / x

// Word i of the value cache (values) or the key cache.
fn cache_word(values: bool, i: u32) -> vec4<u32> {
    if (values) {
        return v_cache[i];
    }
    return k_cache[i];
}

// Vec4s quad and quad + 1 (quad even) of the key or value (values) cache row whose first value index is `first`.
fn cache_pair(values: bool, first: u32, quad: u32) -> mat2x4<f32> {
    if (KV_F16) {  // a 16-byte word holds eight f16 values
        let w = cache_word(values, first / 8u + quad / 2u);
        return mat2x4<f32>(vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)),
                           vec4<f32>(unpack2x16float(w.z), unpack2x16float(w.w)));
    }
    let at = first / 4u + quad;
    return mat2x4<f32>(bitcast<vec4<f32>>(cache_word(values, at)), bitcast<vec4<f32>>(cache_word(values, at + 1u)));
}

// Operation op on chunk c of the row's state (qc, ac: its arrays; c and op literals, so that each loop unrolls
// into code of its own).
fn chunk_op(qc: ptr<private, array<vec4<f32>, CHUNK>>, ac: ptr<private, array<vec4<f32>, CHUNK>>, c: u32, op: u32,
            at: u32, x: f32) -> f32 {
    var sum = 0.0;
    for (var j = 0u; j < min(CHUNK, QUADS - c * CHUNK) / 2u; j++) {  // vec4 pairs (QUADS is even)
        let i = 2u * j;
        let quad = c * CHUNK + i;
        switch op {
            case OP_LOAD: {
                (*qc)[i] = q[at + quad];
                (*qc)[i + 1u] = q[at + quad + 1u];
                (*ac)[i] = vec4<f32>(0.0);
                (*ac)[i + 1u] = vec4<f32>(0.0);
            }
            case OP_DOT: {
                let k = cache_pair(false, at, quad);
                sum += dot(k[0], (*qc)[i]) + dot(k[1], (*qc)[i + 1u]);
            }
            case OP_VALUE: {
                let v = cache_pair(true, at, quad);
                (*ac)[i] += x * v[0];
                (*ac)[i + 1u] += x * v[1];
            }
            case OP_RESCALE: {
                (*ac)[i] *= x;
                (*ac)[i + 1u] *= x;
            }
            default: {  // OP_STORE
                out[at + quad] = (*ac)[i] / x;
                out[at + quad + 1u] = (*ac)[i + 1u] / x;
            }
        }
    }
    return sum;
}

// Operation op over the row's whole state; returns the sum of the chunks' results (OP_DOT's dot product).
fn row_op(op: u32, at: u32, x: f32) -> f32 {
    var sum = chunk_op(&q0, &a0, 0u, op, at, x);
    if (CHUNKS > 1u) { sum += chunk_op(&q1, &a1, 1u, op, at, x); }
    if (CHUNKS > 2u) { sum += chunk_op(&q2, &a2, 2u, op, at, x); }
    if (CHUNKS > 3u) { sum += chunk_op(&q3, &a3, 3u, op, at, x); }
    if (CHUNKS > 4u) { sum += chunk_op(&q4, &a4, 4u, op, at, x); }
    if (CHUNKS > 5u) { sum += chunk_op(&q5, &a5, 5u, op, at, x); }
    if (CHUNKS > 6u) { sum += chunk_op(&q6, &a6, 6u, op, at, x); }
    if (CHUNKS > 7u) { sum += chunk_op(&q7, &a7, 7u, op, at, x); }
    return sum;
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

    row_op(OP_LOAD, row * QUADS, 0.0);
    var running_max = NEG_BIG;
    var running_sum = 0.0;
    for (var key = start; key < end; key++) {
        let first = pool_row(r.y, key) * KV_WIDTH + first_value;
        let score = score_of(row_op(OP_DOT, first, 0.0));
        if (score > running_max) {  // rescaled only where the max moves: early keys, rarely later
            let correction = exp(running_max - score);
            row_op(OP_RESCALE, 0u, correction);
            running_sum *= correction;
            running_max = score;
        }
        let weight = exp(score - running_max);
        row_op(OP_VALUE, first, weight);
        running_sum += weight;
    }

    if (SPLITS == 1u) {
        row_op(OP_STORE, row * QUADS, running_sum);
        return;
    }
    let at = g * (QUADS + 1u);
    row_op(OP_STORE, at, 1.0);
    out[at + QUADS] = vec4<f32>(running_max, running_sum, 0.0, 0.0);  // an empty part: max -max f32, sum 0
}
