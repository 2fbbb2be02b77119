// attention_key_lanes: attention.wgsl's causal attention for software adapters (lavapipe), each invocation walking
// whole keys.
//   out[t, h, :] = sum_j softmax_j(SCALE * q[t, h] . k[j, g]) v[j, g],  g = h / (HEADS / KV_HEADS)
// over the keys attention.wgsl's header gives (the window, an image's later rows).
//
// Why a kernel of its own: a CPU runs a workgroup's invocations as the lanes of its vector registers, and its
// memory serves a lane streaming its own contiguous run of 16-byte loads several times faster than lanes
// interleaved GPU-style, where every vector load gathers from as many places as there are lanes. attention.wgsl
// shares each key among 8 invocations and each chunk of 32 keys between barriers, and attention_prompt.wgsl
// blocks of queries and keys in workgroup memory, which a GPU hides and a CPU pays for. Here an invocation takes
// HEAD_GROUP heads of one kv head (a row group: a token's heads h0 .. h0 + HEAD_GROUP - 1), so that each key and
// value load serves them all (lavapipe compiles a storage load into a loop of scalar loads, one a lane, and the
// loads bound this kernel). Each row group's keys are cut into SPLITS parts (attention/key_parts.wgsl, at least
// MIN_PART_KEYS keys each), and invocation g of the dispatch takes part g % SPLITS of row group g / SPLITS: with
// SPLITS = 1 (prompts and large batches: rows enough) a workgroup's LANES invocations are LANES row groups, each
// over all its keys; with more (decode steps of few rows) they are parts of a row group. An invocation walks its
// keys one after another: the key's row of the cache in 16-byte loads dotted with each head's q, then the value
// row in 16-byte loads into each head's accumulator, with an online softmax (running max and sum a head). No
// barrier, no workgroup memory. With SPLITS = 1 it writes the normalised results to out[row, :]; otherwise out
// holds attention.wgsl's partials ([rows, SPLITS, D + 4]: the unnormalised sums, then max and sum), which
// attention_combine.wgsl merges with the same SPLITS and MIN_PART_KEYS. Queries come from q as
// qk_norm_rope_store.wgsl wrote them, keys and values from the cache (software adapters take no raw prologue).
// The rows' queries and accumulators live in arrays of CHUNK vec4s of each head, one pair per 32 dimensions, each
// reached only in a loop of CHUNK / 2 steps over the heads (chunk_op): lavapipe unrolls such loops and keeps the
// arrays in registers, where larger arrays indexed in longer loops went through memory a lane at a time.
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
override HEAD_GROUP: u32 = 1u;   // heads of one kv head an invocation takes: 1 to 4, dividing HEADS / KV_HEADS

const QUADS: u32 = D / 4u;             // vec4s of a q, value or output row
const KV_WIDTH: u32 = KV_HEADS * D;    // cache values per token
const NEG_BIG: f32 = -3.4028235e38;
const CHUNK: u32 = 8u;                 // vec4s of a head's state a private array holds
const CHUNKS: u32 = (QUADS + CHUNK - 1u) / CHUNK;
const GROUP_CHUNK: u32 = CHUNK * 4u;   // a private array's vec4s: a chunk of each head of the group
const_assert D % 16u == 0u;
const_assert CHUNKS <= 16u;
const_assert HEAD_GROUP >= 1u && HEAD_GROUP <= 4u;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;          // [T_MAX, HEADS, D]
@group(0) @binding(2) var<storage, read> k_cache: array<vec4<u32>>;    // [pool rows, KV_HEADS, D]: f16 pairs or f32
@group(0) @binding(3) var<storage, read> v_cache: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read_write> out: array<vec4<f32>>;  // [T_MAX, HEADS, D], or partials
@group(0) @binding(5) var<storage, read> rows: array<vec4<u32>>;       // [T_MAX] (position, slot, -, later keys)
@group(0) @binding(6) var<storage, read> page_table: array<u32>;       // [slots, MAX_PAGES]

// The rows' queries and their part's sums of exp(score - running max) v, unnormalised: vec4s c CHUNK .. c CHUNK +
// CHUNK - 1 of head hh of the group at hh CHUNK + i in q<c> and a<c>.
var<private> q0: array<vec4<f32>, GROUP_CHUNK>;
var<private> q1: array<vec4<f32>, GROUP_CHUNK>;
var<private> q2: array<vec4<f32>, GROUP_CHUNK>;
var<private> q3: array<vec4<f32>, GROUP_CHUNK>;
var<private> q4: array<vec4<f32>, GROUP_CHUNK>;
var<private> q5: array<vec4<f32>, GROUP_CHUNK>;
var<private> q6: array<vec4<f32>, GROUP_CHUNK>;
var<private> q7: array<vec4<f32>, GROUP_CHUNK>;
var<private> q8: array<vec4<f32>, GROUP_CHUNK>;
var<private> q9: array<vec4<f32>, GROUP_CHUNK>;
var<private> q10: array<vec4<f32>, GROUP_CHUNK>;
var<private> q11: array<vec4<f32>, GROUP_CHUNK>;
var<private> q12: array<vec4<f32>, GROUP_CHUNK>;
var<private> q13: array<vec4<f32>, GROUP_CHUNK>;
var<private> q14: array<vec4<f32>, GROUP_CHUNK>;
var<private> q15: array<vec4<f32>, GROUP_CHUNK>;
var<private> a0: array<vec4<f32>, GROUP_CHUNK>;
var<private> a1: array<vec4<f32>, GROUP_CHUNK>;
var<private> a2: array<vec4<f32>, GROUP_CHUNK>;
var<private> a3: array<vec4<f32>, GROUP_CHUNK>;
var<private> a4: array<vec4<f32>, GROUP_CHUNK>;
var<private> a5: array<vec4<f32>, GROUP_CHUNK>;
var<private> a6: array<vec4<f32>, GROUP_CHUNK>;
var<private> a7: array<vec4<f32>, GROUP_CHUNK>;
var<private> a8: array<vec4<f32>, GROUP_CHUNK>;
var<private> a9: array<vec4<f32>, GROUP_CHUNK>;
var<private> a10: array<vec4<f32>, GROUP_CHUNK>;
var<private> a11: array<vec4<f32>, GROUP_CHUNK>;
var<private> a12: array<vec4<f32>, GROUP_CHUNK>;
var<private> a13: array<vec4<f32>, GROUP_CHUNK>;
var<private> a14: array<vec4<f32>, GROUP_CHUNK>;
var<private> a15: array<vec4<f32>, GROUP_CHUNK>;

// chunk_op's operations
const OP_LOAD: u32 = 0u;     // queries <- q[at + hh QUADS ..], accumulators <- 0
const OP_DOT: u32 = 1u;      // returns the queries' dots with the key row whose first value index is `at`
const OP_VALUE: u32 = 2u;    // accumulator hh += x[hh] * the value row whose first value index is `at`
const OP_RESCALE: u32 = 3u;  // accumulator hh *= x[hh]
const OP_STORE: u32 = 4u;    // out[at + hh stride ..] <- accumulator hh / x[hh]

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

// Operation op on chunk c of the rows' state (qc, ac: its arrays; c and op literals, so that each loop unrolls
// into code of its own); a key or value pair is loaded once for the group's heads. x[hh] and the result's
// component hh are head hh's; stride: vec4s from one head's output row to the next's.
fn chunk_op(qc: ptr<private, array<vec4<f32>, GROUP_CHUNK>>, ac: ptr<private, array<vec4<f32>, GROUP_CHUNK>>,
            c: u32, op: u32, at: u32, x: vec4<f32>, stride: u32) -> vec4<f32> {
    var sum = vec4<f32>(0.0);
    for (var j = 0u; j < min(CHUNK, QUADS - c * CHUNK) / 2u; j++) {  // vec4 pairs (QUADS is even)
        let quad = c * CHUNK + 2u * j;
        var kv: mat2x4<f32>;
        if (op == OP_DOT) {
            kv = cache_pair(false, at, quad);
        } else if (op == OP_VALUE) {
            kv = cache_pair(true, at, quad);
        }
        for (var hh = 0u; hh < HEAD_GROUP; hh++) {
            let i = hh * CHUNK + 2u * j;
            switch op {
                case OP_LOAD: {
                    (*qc)[i] = q[at + hh * QUADS + quad];
                    (*qc)[i + 1u] = q[at + hh * QUADS + quad + 1u];
                    (*ac)[i] = vec4<f32>(0.0);
                    (*ac)[i + 1u] = vec4<f32>(0.0);
                }
                case OP_DOT: {
                    sum[hh] += dot(kv[0], (*qc)[i]) + dot(kv[1], (*qc)[i + 1u]);
                }
                case OP_VALUE: {
                    (*ac)[i] += x[hh] * kv[0];
                    (*ac)[i + 1u] += x[hh] * kv[1];
                }
                case OP_RESCALE: {
                    (*ac)[i] *= x[hh];
                    (*ac)[i + 1u] *= x[hh];
                }
                default: {  // OP_STORE
                    out[at + hh * stride + quad] = (*ac)[i] / x[hh];
                    out[at + hh * stride + quad + 1u] = (*ac)[i + 1u] / x[hh];
                }
            }
        }
    }
    return sum;
}

// Operation op over the rows' whole state; returns the sum of the chunks' results (OP_DOT's dot products).
fn row_op(op: u32, at: u32, x: vec4<f32>, stride: u32) -> vec4<f32> {
    var sum = chunk_op(&q0, &a0, 0u, op, at, x, stride);
    if (CHUNKS > 1u) { sum += chunk_op(&q1, &a1, 1u, op, at, x, stride); }
    if (CHUNKS > 2u) { sum += chunk_op(&q2, &a2, 2u, op, at, x, stride); }
    if (CHUNKS > 3u) { sum += chunk_op(&q3, &a3, 3u, op, at, x, stride); }
    if (CHUNKS > 4u) { sum += chunk_op(&q4, &a4, 4u, op, at, x, stride); }
    if (CHUNKS > 5u) { sum += chunk_op(&q5, &a5, 5u, op, at, x, stride); }
    if (CHUNKS > 6u) { sum += chunk_op(&q6, &a6, 6u, op, at, x, stride); }
    if (CHUNKS > 7u) { sum += chunk_op(&q7, &a7, 7u, op, at, x, stride); }
    if (CHUNKS > 8u) { sum += chunk_op(&q8, &a8, 8u, op, at, x, stride); }
    if (CHUNKS > 9u) { sum += chunk_op(&q9, &a9, 9u, op, at, x, stride); }
    if (CHUNKS > 10u) { sum += chunk_op(&q10, &a10, 10u, op, at, x, stride); }
    if (CHUNKS > 11u) { sum += chunk_op(&q11, &a11, 11u, op, at, x, stride); }
    if (CHUNKS > 12u) { sum += chunk_op(&q12, &a12, 12u, op, at, x, stride); }
    if (CHUNKS > 13u) { sum += chunk_op(&q13, &a13, 13u, op, at, x, stride); }
    if (CHUNKS > 14u) { sum += chunk_op(&q14, &a14, 14u, op, at, x, stride); }
    if (CHUNKS > 15u) { sum += chunk_op(&q15, &a15, 15u, op, at, x, stride); }
    return sum;
}

@compute @workgroup_size(LANES)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lane: u32) {
    let g = (wid.x + wid.y * nwg.x) * LANES + lane;
    let group_row = g / SPLITS;                     // (token, head group)
    if (group_row >= step.n_tokens * (HEADS / HEAD_GROUP)) {
        return;
    }
    let part = g % SPLITS;
    let row = group_row * HEAD_GROUP;               // the (token, head) row of the group's first head
    let t = row / HEADS;
    let first_value = ((row % HEADS) / (HEADS / KV_HEADS)) * D;  // the kv head's first value in a cache row
    let r = rows[t];
    let hi = r.x + select(0u, r.w, LATER_KEYS);  // the last key the token sees
    let cut = key_parts(r.x, hi);
    let start = cut.lo + part * cut.per_part;
    let end = min(start + cut.per_part, hi + 1u);  // empty when start >= end

    row_op(OP_LOAD, row * QUADS, vec4<f32>(0.0), 0u);
    var running_max = vec4<f32>(NEG_BIG);
    var running_sum = vec4<f32>(0.0);
    for (var key = start; key < end; key++) {
        let first = pool_row(r.y, key) * KV_WIDTH + first_value;
        let dots = row_op(OP_DOT, first, vec4<f32>(0.0), 0u);
        let score = vec4<f32>(score_of(dots.x), score_of(dots.y), score_of(dots.z), score_of(dots.w));
        if (any(score > running_max)) {  // rescaled only where a max moves: early keys, rarely later
            let new_max = max(running_max, score);
            let correction = exp(running_max - new_max);
            row_op(OP_RESCALE, 0u, correction, 0u);
            running_sum *= correction;
            running_max = new_max;
        }
        let weight = exp(score - running_max);
        row_op(OP_VALUE, first, weight, 0u);
        running_sum += weight;
    }

    if (SPLITS == 1u) {
        row_op(OP_STORE, row * QUADS, running_sum, QUADS);
        return;
    }
    let stride = SPLITS * (QUADS + 1u);  // partials: [row, part, D + 4]
    let at = (row * SPLITS + part) * (QUADS + 1u);
    row_op(OP_STORE, at, vec4<f32>(1.0), stride);
    for (var hh = 0u; hh < HEAD_GROUP; hh++) {  // an empty part: max -max f32, sum 0
        out[at + hh * stride + QUADS] = vec4<f32>(running_max[hh], running_sum[hh], 0.0, 0.0);
    }
}
