// attention_prefill: causal attention of a prompt chunk, flash-style.
//   out[t, h, :] = sum_j softmax_j(SCALE * q[t, h] . k[j, g]) v[j, g],  g = h / GROUP
// over keys j in [lo, p] of the token's sequence (p = rows[t].x; lo as attention.wgsl, with the
// sliding WINDOW), keys found through the sequence's pages (common/rows.wgsl).
//
// Work split: a workgroup takes BQ consecutive token rows of one sequence (a prefill step holds
// one sequence) and the GROUP = HEADS / KV_HEADS query heads that share kv head g: QR = BQ * GROUP
// query rows. It walks their keys in chunks of KC: each chunk's keys and values are copied from
// the cache into workgroup memory once and used by all QR rows (attention.wgsl reads them once
// per row, so a 512-token prefill re-read every key hundreds of times). Per chunk:
//   1. the chunk's key and value words -> k_tile, v_tile (adjacent invocations, adjacent words);
//   2. scores: LANES invocations per (row, key) pair each dot D / LANES dims, summed in dots;
//   3. online softmax per row (invocation r < QR): running max and sum, the chunk's weights;
//   4. values: invocation i accumulates dims i, i + 256, ... of every row, in registers.
// Masked (row, key) pairs (past the row's position, before its window, or rows past n_tokens)
// weigh 0. Finally out = acc / sum for the step's rows.
#include "common/step.wgsl"
#include "common/rows.wgsl"

override D: u32 = 256u;         // head dimension (a multiple of 16, at most 512)
override HEADS: u32 = 4u;       // query heads
override KV_HEADS: u32 = 1u;    // key/value heads
override WINDOW: u32 = 0u;      // sliding window in tokens; 0 = global attention
override SCALE: f32 = 0.0625;
override KV_F16: bool = true;   // cache words hold two f16 values
override BQ: u32 = 2u;          // token rows per workgroup
override KC: u32 = 8u;          // keys per chunk
override LANES: u32 = 4u;       // invocations per score: QR * KC * LANES <= 256, LANES divides WORDS
override PAGE_TOKENS: u32 = 128u;
override MAX_PAGES: u32 = 64u;

const WG: u32 = 256u;
const GROUP: u32 = HEADS / KV_HEADS;
const QR: u32 = BQ * GROUP;                    // query rows of a workgroup
const PAIRS: u32 = QR * KC;                    // (row, key) scores per chunk
const WORDS: u32 = select(D, D / 2u, KV_F16);  // cache words per key of one head
const LANE_WORDS: u32 = WORDS / LANES;         // words each lane dots
const KV_WORDS: u32 = KV_HEADS * WORDS;        // cache words per position
const PER_THREAD: u32 = (D + WG - 1u) / WG;    // dims per invocation in the value phase
const NEG_BIG: f32 = -3.4028235e38;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> q: array<f32>;          // [T_MAX, HEADS, D]
@group(0) @binding(2) var<storage, read> k_cache: array<u32>;    // [pool rows, KV_HEADS, D] words
@group(0) @binding(3) var<storage, read> v_cache: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;  // [T_MAX, HEADS, D]
@group(0) @binding(5) var<storage, read> rows: array<vec4<u32>>; // [T_MAX] (position, slot, -, -)
@group(0) @binding(6) var<storage, read> page_table: array<u32>; // [slots, MAX_PAGES]

var<workgroup> q_tile: array<f32, QR * D>;
var<workgroup> k_tile: array<u32, KC * WORDS>;
var<workgroup> v_tile: array<u32, KC * WORDS>;
var<workgroup> dots: array<f32, WG>;
var<workgroup> weights: array<f32, PAIRS>;     // scores, then the chunk's softmax weights
var<workgroup> run_max: array<f32, QR>;
var<workgroup> run_sum: array<f32, QR>;
var<workgroup> correction: array<f32, QR>;

// q . k over the lane's words of key j, for query row r.
fn lane_dot(r: u32, j: u32, lane: u32) -> f32 {
    var sum = 0.0;
    let q_base = r * D;
    for (var w = lane * LANE_WORDS; w < (lane + 1u) * LANE_WORDS; w++) {
        let word = k_tile[j * WORDS + w];
        if (KV_F16) {
            let kv = unpack2x16float(word);
            sum += q_tile[q_base + 2u * w] * kv.x + q_tile[q_base + 2u * w + 1u] * kv.y;
        } else {
            sum += q_tile[q_base + w] * bitcast<f32>(word);
        }
    }
    return sum;
}

fn value_at(j: u32, dim: u32) -> f32 {
    if (KV_F16) {
        return unpack2x16float(v_tile[j * WORDS + dim / 2u])[dim & 1u];
    }
    return bitcast<f32>(v_tile[j * WORDS + dim]);
}

// The first key row r may see (its window's start).
fn first_key(p: u32) -> u32 {
    if (WINDOW > 0u && p + 1u > WINDOW) {
        return p + 1u - WINDOW;
    }
    return 0u;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let group = wid.x + wid.y * nwg.x;   // uniform: (token block, kv head)
    let n_blocks = (step.n_tokens + BQ - 1u) / BQ;
    if (group >= n_blocks * KV_HEADS) {
        return;
    }
    let t0 = (group / KV_HEADS) * BQ;
    let g = group % KV_HEADS;
    let n_t = min(BQ, step.n_tokens - t0);
    let slot = rows[t0].y;
    let lo = first_key(rows[t0].x);
    let end = rows[t0 + n_t - 1u].x + 1u;   // keys [lo, end) cover every row of the block

    for (var i = lid; i < QR * D; i += WG) {
        let r = i / D;
        let tl = r / GROUP;
        var value = 0.0;
        if (tl < n_t) {
            value = q[((t0 + tl) * HEADS + g * GROUP + r % GROUP) * D + i % D];
        }
        q_tile[i] = value;
    }
    if (lid < QR) {
        run_max[lid] = NEG_BIG;
        run_sum[lid] = 0.0;
    }
    var acc: array<f32, QR * PER_THREAD>;
    for (var a = 0u; a < QR * PER_THREAD; a++) { acc[a] = 0.0; }

    let pair = lid / LANES;          // the score this invocation helps with
    let lane = lid % LANES;
    let pair_row = pair / KC;
    let pair_key = pair % KC;
    let pair_t = min(pair_row / GROUP, n_t - 1u);
    let pair_p = rows[t0 + pair_t].x;
    let pair_lo = first_key(pair_p);
    let pair_live = pair_row / GROUP < n_t;
    for (var chunk = lo; chunk < end; chunk += KC) {
        let n_keys = min(KC, end - chunk);
        for (var i = lid; i < KC * WORDS; i += WG) {
            let j = i / WORDS;
            var kw = 0u;
            var vw = 0u;
            if (j < n_keys) {
                let at = pool_row(slot, chunk + j) * KV_WORDS + g * WORDS + i % WORDS;
                kw = k_cache[at];
                vw = v_cache[at];
            }
            k_tile[i] = kw;
            v_tile[i] = vw;
        }
        workgroupBarrier();
        if (pair < PAIRS) {
            dots[lid] = lane_dot(pair_row, pair_key, lane);
        }
        workgroupBarrier();
        if (lane == 0u && pair < PAIRS) {
            let key = chunk + pair_key;
            var score = NEG_BIG;
            if (pair_live && pair_key < n_keys && key <= pair_p && key >= pair_lo) {
                var sum = 0.0;
                for (var l = 0u; l < LANES; l++) { sum += dots[lid + l]; }
                score = sum * SCALE;
            }
            weights[pair] = score;
        }
        workgroupBarrier();
        if (lid < QR) {
            var chunk_max = NEG_BIG;
            for (var j = 0u; j < KC; j++) { chunk_max = max(chunk_max, weights[lid * KC + j]); }
            let old_max = run_max[lid];
            let new_max = max(old_max, chunk_max);
            var chunk_sum = 0.0;
            for (var j = 0u; j < KC; j++) {
                let s = weights[lid * KC + j];
                let w = select(0.0, exp(s - new_max), s > NEG_BIG);
                weights[lid * KC + j] = w;
                chunk_sum += w;
            }
            let c = select(1.0, exp(old_max - new_max), old_max > NEG_BIG);
            correction[lid] = c;
            run_sum[lid] = run_sum[lid] * c + chunk_sum;
            run_max[lid] = new_max;
        }
        workgroupBarrier();
        for (var pt = 0u; pt < PER_THREAD; pt++) {
            let dim = lid + pt * WG;
            if (dim < D) {
                for (var r = 0u; r < QR; r++) {
                    var a = acc[r * PER_THREAD + pt] * correction[r];
                    for (var j = 0u; j < n_keys; j++) {
                        a += weights[r * KC + j] * value_at(j, dim);
                    }
                    acc[r * PER_THREAD + pt] = a;
                }
            }
        }
        workgroupBarrier();   // the tiles and weights are rewritten by the next chunk
    }

    for (var pt = 0u; pt < PER_THREAD; pt++) {
        let dim = lid + pt * WG;
        if (dim < D) {
            for (var r = 0u; r < QR; r++) {
                let tl = r / GROUP;
                if (tl < n_t) {
                    let at = ((t0 + tl) * HEADS + g * GROUP + r % GROUP) * D + dim;
                    out[at] = acc[r * PER_THREAD + pt] / run_sum[r];
                }
            }
        }
    }
}
