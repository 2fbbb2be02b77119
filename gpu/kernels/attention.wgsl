// attention: causal multi-head attention of the step's queries over a layer's KV cache.
//   out[t, h, :] = sum_j softmax_j(SCALE * q[t, h] . k[j, g]) v[j, g],  g = h / (HEADS / KV_HEADS)
// for keys j in [lo, hi] of the token's sequence, where p = rows[t].x is the token's position, hi = p +
// rows[t].w (an image's rows also see its later rows, common/rows.wgsl) and,
// on sliding-window layers, lo = max(0, p + 1 - WINDOW) (a key is visible while p - j < WINDOW, as
// HF and llama.cpp do). Key j sits in the pool row its sequence's pages give (common/rows.wgsl),
// so one step may hold queries of many sequences (batched decode).
//
// Work split: a workgroup of 256 invocations takes one (token, head) row and one of up to SPLITS
// equal parts of its key range, each of at least MIN_PART_KEYS keys (flash-decoding: a decode step
// has few rows, so the keys are what gives the GPU parallel work; attention/key_parts.wgsl). It
// walks its keys in chunks of 32 with an online softmax (running max and sum): for scores, 8
// invocations share a key, each dotting D/8 dims (adjacent invocations read adjacent words of the key
// row), their sums added and the chunk's max and sum of exponentials formed by attention/decode_${REDUCE}.wgsl
// (subgroup shuffles where the adapter has them, else workgroup memory); for values, invocation i takes
// dims 4 (i % (D/4)) .. + 3 of every V_GROUPS-th key of the chunk, starting at key i / (D/4) (8 keys each
// for D = 256), weighing each by exp(score - max) itself; the V_GROUPS sums of each dim meet in workgroup
// memory once, at the end of the part. Every load of a chunk sits in a loop of constant trip count without
// a branch around it (the hooks select k(p), v(p) after loading the cache), so a thread's loads are in
// flight together: with a branch per load they ran one latency after another, ~10 us a chunk of 32 keys
// on an H100.
// With SPLITS == 1 it writes the normalised result to out[row, :]; otherwise out is a scratch
// of [rows, SPLITS, D + 4] holding (unnormalised acc[D], max, sum, 2 unused) per part, merged by
// attention_combine.wgsl (acc first at a stride of D + 4 keeps each part's acc 16-byte aligned).
//
// Where q and the newest key come from (Q_SOURCE, attention/q_${Q_SOURCE}.wgsl, which declares
// bindings 1-3 and the hooks load_query, key_pair, value4_at):
//   "cache"  q as qk_norm_rope_store.wgsl wrote it, every key and value from the cache;
//   "raw"    decode steps: the prologue normalises and rotates q from the q|k|v projection itself and,
//            in the part holding the token's position p, k(p) and v(p) too, which it stores in the cache
//            (so qk_norm_rope_store's dispatch is not needed) and uses from workgroup memory.
#include "common/step.wgsl"
#include "common/rows.wgsl"
#include "attention/decode_${REDUCE}.wgsl"
#include "attention/decode_memory.wgsl"
#include "attention/q_${Q_SOURCE}.wgsl"
#include "attention/key_parts.wgsl"
#include "attention/score.wgsl"

override D: u32 = 256u;         // head dimension (a multiple of 16, at most 512)
override HEADS: u32 = 4u;       // query heads
override KV_HEADS: u32 = 1u;    // key/value heads (grouped-query attention)
override WINDOW: u32 = 0u;      // sliding window in tokens; 0 = global attention
override SCALE: f32 = 0.0625;   // score scale, 1/sqrt(D) for Gemma 3
override SOFTCAP: f32 = 0.0;    // scores capped to SOFTCAP * tanh(score / SOFTCAP) (Gemma 2); 0 = none
override LATER_KEYS: bool = true;  // rows[t].w is honoured; false: causal (Gemma 4's full layers under images)
override KV_F16: bool = true;   // cache words hold two f16 values
override SPLITS: u32 = 1u;      // parts of each row's key range, one workgroup each
override PAGE_TOKENS: u32 = 128u;  // positions per KV page
override MAX_PAGES: u32 = 64u;     // page-table entries per sequence
override MIN_PART_KEYS: u32 = 16u;  // fewest keys a part of a split row takes (gpu/ops/transformer.py)

const WG: u32 = 256u;
const KEYS: u32 = 32u;                  // keys per chunk
const LANES: u32 = WG / KEYS;           // invocations per key in the score phase
const LANE_DIMS: u32 = D / LANES;       // dims each of them dots (even)
const QUADS: u32 = D / 4u;               // vec4s of a value row
const V_GROUPS: u32 = min(WG / QUADS, KEYS);  // invocations sharing a dim quad in the value phase
const V_KEYS: u32 = (KEYS + V_GROUPS - 1u) / V_GROUPS;  // keys each of them takes per chunk (the last may
                                                         // run past the chunk where V_GROUPS does not divide it)
const KV_WIDTH: u32 = KV_HEADS * D;     // cache values per token
const NEG_BIG: f32 = -3.4028235e38;

@group(0) @binding(0) var<uniform> step: Step;
// bindings 1 (q), 2 (k_cache) and 3 (v_cache): attention/q_${Q_SOURCE}.wgsl
@group(0) @binding(4) var<storage, read_write> out: array<f32>;  // [T_MAX, HEADS, D] or partials
@group(0) @binding(5) var<storage, read> rows: array<vec4<u32>>; // [T_MAX] (position, slot, -, later keys)
@group(0) @binding(6) var<storage, read> page_table: array<u32>; // [slots, MAX_PAGES]

var<workgroup> q_row: array<f32, D>;
var<workgroup> scores: array<f32, KEYS>;    // the chunk's scaled scores; NEG_BIG past its keys
var<workgroup> key_rows: array<u32, KEYS>;  // first cache word index of each key of the chunk
var<workgroup> value_sums: array<vec4<f32>, WG>;  // the value groups' sums, added at the end of the part

// Values dim .. dim + 3 (dim a multiple of 4) of the cache row whose first value index is `row`.
fn cached_value4(row: u32, dim: u32) -> vec4<f32> {
    let index = row + dim;
    if (KV_F16) {
        return vec4<f32>(unpack2x16float(v_cache[index >> 1u]), unpack2x16float(v_cache[(index >> 1u) + 1u]));
    }
    return bitcast<vec4<f32>>(vec4<u32>(v_cache[index], v_cache[index + 1u], v_cache[index + 2u], v_cache[index + 3u]));
}

// Dims i, i + 1 (i even) of the cached key row whose first value index is `row`.
fn cached_key_pair(row: u32, i: u32) -> vec2<f32> {
    if (KV_F16) {
        return unpack2x16float(k_cache[(row + i) >> 1u]);
    }
    return vec2<f32>(bitcast<f32>(k_cache[row + i]), bitcast<f32>(k_cache[row + i + 1u]));
}

// Part of q . k over dims [first, first + LANE_DIMS) of key position `key`, whose cache row starts at value `row`.
fn partial_dot(key: u32, row: u32, first: u32) -> f32 {
    var sum = 0.0;
    for (var step = 0u; step < LANE_DIMS; step += 2u) {  // a constant trip count: the loads issue together
        let i = first + step;
        let kv = key_pair(key, row, i);
        if (KV_F16) {
            sum += q_row[i] * kv.x + q_row[i + 1u] * kv.y;
        } else {
            sum += q_row[i] * kv.x;
            sum += q_row[i + 1u] * kv.y;
        }
    }
    return sum;
}

// The work of workgroup `group` ((row, part)); tid: the invocation's role, numbered so that a key's LANES
// invocations are lanes of one subgroup where the decode_${REDUCE} variant uses subgroups.
fn attention_main(group: u32, tid: u32) {
    let row = group / SPLITS;   // uniform
    let part = group % SPLITS;
    if (row >= step.n_tokens * HEADS) {
        return;
    }
    let t = row / HEADS;
    let kv_head = (row % HEADS) / (HEADS / KV_HEADS);
    let kv_base = kv_head * D;
    let p = rows[t].x;
    let slot = rows[t].y;
    let hi = p + select(0u, rows[t].w, LATER_KEYS);
    let cut = key_parts(p, hi);  // attention/key_parts.wgsl
    let start = cut.lo + part * cut.per_part;
    let end = min(start + cut.per_part, hi + 1u);   // keys [start, end); empty when start >= end
    if (start >= end) {  // an empty part only marks itself so (weight 0 in the combine) and leaves
        let base = group * (D + 4u);
        for (var i = tid; i < D + 4u; i += WG) {
            out[base + i] = select(0.0, NEG_BIG, i == D);  // acc 0, m = -max f32, l = 0
        }
        return;
    }

    // the part whose keys include p (exactly one: the parts tile [lo, p]) also has the token's own key
    load_query(row, t, kv_head, p, start <= p && p < end, tid);
    workgroupBarrier();

    var running_max = NEG_BIG;
    var running_sum = 0.0;
    var acc = vec4<f32>(0.0);
    let quad = tid % QUADS;
    let value_group = tid / QUADS;  // >= V_GROUPS: idle in the value phase (D < 32 only)

    let my_key = tid / LANES;
    let my_lane = tid % LANES;
    for (var chunk = start; chunk < end; chunk += KEYS) {
        let n_keys = min(KEYS, end - chunk);
        var d = 0.0;
        var key_row = 0u;
        if (my_key < n_keys) {
            let key = chunk + my_key;
            key_row = pool_row(slot, key) * KV_WIDTH + kv_base;
            d = partial_dot(key, key_row, my_lane * LANE_DIMS);
        }
        chunk_scores(d, key_row, n_keys, tid);           // scores, key_rows; ends with a barrier
        let stats = chunk_softmax(n_keys, running_max);  // (new max, sum of exp(score - new max))
        let correction = exp(running_max - stats.x);
        running_sum = running_sum * correction + stats.y;
        running_max = stats.x;
        if (value_group < V_GROUPS) {
            // no branch around the loads, so that they issue together: a key past the chunk's end reads
            // the chunk's last key (a finite value) and weighs exp(NEG_BIG - max) = 0
            var a = acc * correction;
            for (var i = 0u; i < V_KEYS; i++) {
                let j = value_group + i * V_GROUPS;
                let read = min(j, n_keys - 1u);
                let weight = select(0.0, exp(scores[min(j, KEYS - 1u)] - running_max), j < KEYS);
                a += weight * value4_at(chunk + read, key_rows[read], 4u * quad);
            }
            acc = a;
        }
        workgroupBarrier();   // scores and key_rows are rewritten by the next chunk
    }

    value_sums[tid] = acc;
    workgroupBarrier();
    if (tid >= QUADS) {
        return;
    }
    var total = value_sums[tid];
    for (var g = 1u; g < V_GROUPS; g++) {
        total += value_sums[g * QUADS + tid];
    }

    var base = row * D;
    if (SPLITS == 1u) {
        total /= running_sum;
    } else {
        base = group * (D + 4u);
        if (tid == 0u) {
            out[base + D] = running_max;
            out[base + D + 1u] = running_sum;
        }
    }
    let at = base + 4u * tid;
    out[at] = total.x;
    out[at + 1u] = total.y;
    out[at + 2u] = total.z;
    out[at + 3u] = total.w;
}
