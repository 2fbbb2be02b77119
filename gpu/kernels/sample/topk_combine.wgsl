// topk_combine: pass 2 of top_candidates. Per row: the K best of the row's CHUNKS * K candidates
// written by topk_partial.wgsl, sorted (larger values first, lower index among equal values), as
// ids and f32 values, and the row's softmax statistics: max M = max_c m_c and
// sum_i exp(logit_i - M) = sum_c s_c exp(m_c - M) over the chunks' (m_c, s_c).
// Work split: one workgroup of 256 invocations per row: the statistics by reductions over the
// chunks, the K best by sample/radix_select.wgsl over the candidates (read from memory each round)
// into workgroup memory, then a bitonic sort of those K there (log2(K)(log2(K) + 1)/2 barriers).
#include "sample/order_key.wgsl"
#include "sample/reduce_${REDUCE}.wgsl"
#include "sample/radix_select.wgsl"

override ROWS: u32 = 1u;       // logits rows
override K: u32 = 64u;         // candidates kept, a power of two <= 256
override CHUNKS: u32 = 64u;    // partials per row

const WG: u32 = 256u;
const PART: u32 = 2u * K + 2u;  // words per chunk: K keys, K indices, max key, sum of exps (f32 bits)

@group(0) @binding(0) var<storage, read> partials: array<u32>;          // [ROWS, CHUNKS, PART]
@group(0) @binding(1) var<storage, read_write> out_ids: array<u32>;     // [ROWS, K]
@group(0) @binding(2) var<storage, read_write> out_values: array<u32>;  // [ROWS, K] f32 bits
@group(0) @binding(3) var<storage, read_write> out_stats: array<u32>;   // [ROWS, 2] f32 bits: max, sum

var<workgroup> sort_keys: array<u32, K>;
var<workgroup> sort_ties: array<u32, K>;
var<private> row_base: u32;  // partials word of the row's first chunk

fn cand_key(n: u32) -> u32 {
    return partials[row_base + (n / K) * PART + n % K];
}

fn cand_tie(n: u32) -> u32 {
    return ~partials[row_base + (n / K) * PART + K + n % K];
}

// True where composite a = (key, tie) comes after b in the output order (a is smaller).
fn after(a_key: u32, a_tie: u32, b_key: u32, b_tie: u32) -> bool {
    return a_key < b_key || (a_key == b_key && a_tie < b_tie);
}

fn group_main(row: u32, lid: u32) {
    if (row >= ROWS) {
        return;
    }
    row_base = row * CHUNKS * PART;

    var local_max = EMPTY_KEY;
    for (var c = lid; c < CHUNKS; c += WG) {
        local_max = max(local_max, partials[row_base + c * PART + 2u * K]);
    }
    let max_key = max_u32(local_max);
    var sum = 0.0;
    if (key_is_finite(max_key)) {
        let m = bitcast<f32>(key_bits(max_key));
        for (var c = lid; c < CHUNKS; c += WG) {
            let chunk_max = partials[row_base + c * PART + 2u * K];
            if (key_is_finite(chunk_max)) {
                let chunk_sum = bitcast<f32>(partials[row_base + c * PART + 2u * K + 1u]);
                sum += chunk_sum * exp(bitcast<f32>(key_bits(chunk_max)) - m);
            }
        }
    }
    let total = workgroup_sum(sum);
    if (lid == 0u) {
        out_stats[2u * row] = key_bits(max_key);
        out_stats[2u * row + 1u] = bitcast<u32>(total);
        atomicStore(&sel_count, 0u);
    }
    if (lid < K) {
        sort_keys[lid] = EMPTY_KEY;
        sort_ties[lid] = 0u;
    }

    let count = CHUNKS * K;
    let threshold = select_threshold(count, K, lid);
    workgroupBarrier();  // the slot count and the sort slots are reset before anyone takes a slot
    for (var n = lid; n < count; n += WG) {
        if (is_selected(n, threshold)) {
            let slot = atomicAdd(&sel_count, 1u);
            if (slot < K) {
                sort_keys[slot] = cand_key(n);
                sort_ties[slot] = cand_tie(n);
            }
        }
    }
    workgroupBarrier();

    // Bitonic sort into descending order: blocks of `size` alternate direction until the last.
    for (var size = 2u; size <= K; size <<= 1u) {
        for (var stride = size / 2u; stride > 0u; stride >>= 1u) {
            if (lid < K / 2u) {
                let i = 2u * lid - (lid & (stride - 1u));
                let j = i + stride;
                let descending = (i & size) == 0u;
                if (after(sort_keys[i], sort_ties[i], sort_keys[j], sort_ties[j]) == descending) {
                    let key = sort_keys[i];
                    let tie = sort_ties[i];
                    sort_keys[i] = sort_keys[j];
                    sort_ties[i] = sort_ties[j];
                    sort_keys[j] = key;
                    sort_ties[j] = tie;
                }
            }
            workgroupBarrier();
        }
    }
    for (var i = lid; i < K; i += WG) {
        out_ids[row * K + i] = ~sort_ties[i];
        out_values[row * K + i] = key_bits(sort_keys[i]);
    }
}
