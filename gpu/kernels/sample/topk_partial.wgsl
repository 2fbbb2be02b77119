// topk_partial: pass 1 of top_candidates. Each workgroup takes CHUNK consecutive logits of one row
// and writes the chunk's K best (value, index) pairs, unordered (larger values first, lower index
// among equal values, NaN counted as -inf), and the chunk's softmax statistics (max, sum of
// exp(value - max) over finite values). topk_combine.wgsl merges a row's chunks. A chunk with
// fewer than K values fills the rest with empty slots (key 0, index 0xFFFFFFFF).
// Work split: ROWS * CHUNKS workgroups of 256 invocations. The statistics take one strided walk
// over the chunk and two workgroup reductions; the K best are found by sample/radix_select.wgsl
// (a few more walks over the chunk, which stays in cache) and written through an atomic slot count.
#include "sample/order_key.wgsl"
#include "sample/reduce_${REDUCE}.wgsl"
#include "sample/radix_select.wgsl"

override V: u32 = 262144u;     // values per logits row (vocabulary)
override ROWS: u32 = 1u;       // logits rows
override K: u32 = 64u;         // candidates per chunk, <= 256
override CHUNK: u32 = 4096u;   // values per workgroup
override CHUNKS: u32 = 64u;    // workgroups per row: ceil(V / CHUNK)

const WG: u32 = 256u;
const PART: u32 = 2u * K + 2u;  // words per chunk: K keys, K indices, max key, sum of exps (f32 bits)

@group(0) @binding(0) var<storage, read> logits: array<u32>;             // [ROWS, V] f32 bits
@group(0) @binding(1) var<storage, read_write> partials: array<u32>;     // [ROWS, CHUNKS, PART]

var<private> chunk_base: u32;   // logits word of the chunk's first value
var<private> chunk_first: u32;  // row index of the chunk's first value

fn cand_key(n: u32) -> u32 {
    return order_key(logits[chunk_base + n]);
}

fn cand_tie(n: u32) -> u32 {
    return ~(chunk_first + n);
}

fn group_main(group: u32, lid: u32) {
    if (group >= ROWS * CHUNKS) {
        return;
    }
    let row = group / CHUNKS;
    chunk_first = (group % CHUNKS) * CHUNK;
    chunk_base = row * V + chunk_first;
    let count = min(CHUNK, V - chunk_first);
    let out = group * PART;

    // One walk for the statistics: each invocation keeps the max key of its values and, over its
    // finite ones, a running max m and sum of exp(value - m), rescaled when m grows.
    var local_max = EMPTY_KEY;
    var m = 0.0;
    var sum = 0.0;  // 0 until the first finite value
    for (var n = lid; n < count; n += WG) {
        let bits = logits[chunk_base + n];
        let key = order_key(bits);
        local_max = max(local_max, key);
        if (key_is_finite(key)) {
            let value = bitcast<f32>(bits);
            if (sum == 0.0) {
                m = value;
                sum = 1.0;
            } else if (value > m) {
                sum = sum * exp(m - value) + 1.0;
                m = value;
            } else {
                sum += exp(value - m);
            }
        }
    }
    let max_key = max_u32(local_max);
    if (sum > 0.0 && key_is_finite(max_key)) {
        sum *= exp(m - bitcast<f32>(key_bits(max_key)));
    } else {
        sum = 0.0;
    }
    let total = workgroup_sum(sum);
    if (lid == 0u) {
        partials[out + 2u * K] = max_key;
        partials[out + 2u * K + 1u] = bitcast<u32>(total);
        atomicStore(&sel_count, 0u);
    }

    let threshold = select_threshold(count, K, lid);
    workgroupBarrier();  // the slot count is reset before anyone takes a slot
    for (var n = lid; n < count; n += WG) {
        if (is_selected(n, threshold)) {
            let slot = atomicAdd(&sel_count, 1u);
            if (slot < K) {
                partials[out + slot] = cand_key(n);
                partials[out + K + slot] = chunk_first + n;
            }
        }
    }
    workgroupBarrier();
    for (var slot = min(atomicLoad(&sel_count), K) + lid; slot < K; slot += WG) {
        partials[out + slot] = EMPTY_KEY;
        partials[out + K + slot] = 0xFFFFFFFFu;
    }
}
