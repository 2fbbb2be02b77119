// attention: causal multi-head attention of the step's queries over a layer's KV cache.
//   out[t, h, :] = sum_j softmax_j(SCALE * q[t, h] . k[j, g]) v[j, g],  g = h / (HEADS / KV_HEADS)
// for keys j in [lo, p] where p = step.pos + t and, on sliding-window layers,
// lo = max(0, p + 1 - WINDOW) (a key is visible while p - j < WINDOW, as HF and llama.cpp do).
// Keys are visited in chunks of 64 with an online softmax (running max and sum), so any
// context length fits in fixed workgroup memory.
// Work split: one workgroup of 64 invocations per (token, head); in a chunk, invocation j
// scores key j, then each invocation accumulates D / 64 output dims over the chunk's keys.
#include "common/step.wgsl"

override D: u32 = 256u;         // head dimension (a multiple of 64, at most 512)
override HEADS: u32 = 4u;       // query heads
override KV_HEADS: u32 = 1u;    // key/value heads (grouped-query attention)
override WINDOW: u32 = 0u;      // sliding window in tokens; 0 = global attention
override SCALE: f32 = 0.0625;   // score scale, 1/sqrt(D) for Gemma 3
override KV_F16: bool = true;   // cache words hold two f16 values

const WG: u32 = 64u;
const PER_THREAD: u32 = D / WG;
const KV_WIDTH: u32 = KV_HEADS * D;   // cache values per token

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> q: array<f32>;          // [T_MAX, HEADS, D]
@group(0) @binding(2) var<storage, read> k_cache: array<u32>;    // [n_ctx, KV_HEADS, D] words
@group(0) @binding(3) var<storage, read> v_cache: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;  // [T_MAX, HEADS, D]

var<workgroup> q_row: array<f32, D>;
var<workgroup> weights: array<f32, WG>;
var<workgroup> reduce: array<f32, WG>;

fn cache_value(cache_index: u32, is_key: bool) -> f32 {
    if (KV_F16) {
        var word: u32;
        if (is_key) { word = k_cache[cache_index >> 1u]; } else { word = v_cache[cache_index >> 1u]; }
        return unpack2x16float(word)[cache_index & 1u];
    }
    if (is_key) { return bitcast<f32>(k_cache[cache_index]); }
    return bitcast<f32>(v_cache[cache_index]);
}

fn key_dot(key: u32, kv_base: u32) -> f32 {
    let row = key * KV_WIDTH + kv_base;
    var sum = 0.0;
    if (KV_F16) {
        for (var i = 0u; i < D; i += 2u) {
            let kv = unpack2x16float(k_cache[(row + i) >> 1u]);
            sum += q_row[i] * kv.x + q_row[i + 1u] * kv.y;
        }
    } else {
        for (var i = 0u; i < D; i++) {
            sum += q_row[i] * bitcast<f32>(k_cache[row + i]);
        }
    }
    return sum;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = wid.x + wid.y * nwg.x;       // uniform: (token, head)
    if (row >= step.n_tokens * HEADS) {
        return;
    }
    let t = row / HEADS;
    let head = row % HEADS;
    let kv_base = (head / (HEADS / KV_HEADS)) * D;
    let p = step.pos + t;
    var lo = 0u;
    if (WINDOW > 0u && p + 1u > WINDOW) {
        lo = p + 1u - WINDOW;
    }
    for (var i = lid; i < D; i += WG) {
        q_row[i] = q[row * D + i];
    }
    workgroupBarrier();

    var running_max = -3.4028235e38;
    var running_sum = 0.0;
    var acc: array<f32, PER_THREAD>;
    for (var r = 0u; r < PER_THREAD; r++) { acc[r] = 0.0; }

    for (var chunk = lo; chunk <= p; chunk += WG) {
        let key = chunk + lid;
        var score = -3.4028235e38;
        if (key <= p) {
            score = key_dot(key, kv_base) * SCALE;
        }
        reduce[lid] = score;
        workgroupBarrier();
        for (var stride = WG / 2u; stride > 0u; stride >>= 1u) {
            if (lid < stride) { reduce[lid] = max(reduce[lid], reduce[lid + stride]); }
            workgroupBarrier();
        }
        let new_max = max(running_max, reduce[0]);
        let correction = exp(running_max - new_max);
        var weight = 0.0;
        if (key <= p) { weight = exp(score - new_max); }
        weights[lid] = weight;
        workgroupBarrier();
        var chunk_sum = 0.0;
        let n_keys = min(WG, p + 1u - chunk);
        for (var j = 0u; j < n_keys; j++) {
            chunk_sum += weights[j];
        }
        running_sum = running_sum * correction + chunk_sum;
        running_max = new_max;
        for (var r = 0u; r < PER_THREAD; r++) {
            let dim = lid + r * WG;
            var a = acc[r] * correction;
            for (var j = 0u; j < n_keys; j++) {
                a += weights[j] * cache_value((chunk + j) * KV_WIDTH + kv_base + dim, false);
            }
            acc[r] = a;
        }
        workgroupBarrier();   // weights and reduce are rewritten by the next chunk
    }
    for (var r = 0u; r < PER_THREAD; r++) {
        out[row * D + lid + r * WG] = acc[r] / running_sum;
    }
}
