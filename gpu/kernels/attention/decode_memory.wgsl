// Decode attention's sums through workgroup memory (attention.wgsl; attention/decode_workgroup.wgsl uses
// them, attention/decode_subgroup.wgsl where its subgroups do not fit): the q and k norms' sums of
// squares, a chunk's scores and its softmax statistics. Each is called from workgroup-uniform control flow.
#include "common/norm_lanes.wgsl"

var<workgroup> norm_tree: array<vec2<f32>, NORM_LANES>;  // (q, k) sums of squares, then their tree
var<workgroup> dots: array<f32, WG>;                     // the score phase's partial dots, LANES a key

// The (q, k) sums of squares of invocations 0 .. NORM_LANES - 1 by a tree in workgroup memory: the order
// of qk_norm_rope_store's workgroup variant (common/row_sum_workgroup.wgsl), so that both give the same bits.
fn memory_head_sums(sums: vec2<f32>, tid: u32) -> vec2<f32> {
    if (tid < NORM_LANES) {
        norm_tree[tid] = sums;
    }
    workgroupBarrier();
    for (var stride = NORM_LANES / 2u; stride > 0u; stride >>= 1u) {
        if (tid < stride) {
            norm_tree[tid] += norm_tree[tid + stride];
        }
        workgroupBarrier();
    }
    return norm_tree[0];
}

// scores[key] = score_of(the sum of the key's LANES partial dots), NEG_BIG past n_keys; key_rows[key] its
// cache row. Ends with a barrier: every invocation may read both.
fn memory_chunk_scores(d: f32, key_row: u32, n_keys: u32, tid: u32) {
    let key = tid / LANES;
    if (key < n_keys && tid % LANES == 0u) {
        key_rows[key] = key_row;
    }
    dots[tid] = d;
    workgroupBarrier();
    if (tid < KEYS) {
        var score = NEG_BIG;
        if (tid < n_keys) {
            var dot = 0.0;
            for (var l = 0u; l < LANES; l++) { dot += dots[tid * LANES + l]; }
            score = score_of(dot);
        }
        scores[tid] = score;
    }
    workgroupBarrier();
}

// (new max, sum of exp(score - new max)) over the chunk's n_keys scores, every invocation walking them.
fn memory_chunk_softmax(n_keys: u32, running_max: f32) -> vec2<f32> {
    var chunk_max = NEG_BIG;
    for (var j = 0u; j < n_keys; j++) { chunk_max = max(chunk_max, scores[j]); }
    let new_max = max(running_max, chunk_max);
    var chunk_sum = 0.0;
    for (var j = 0u; j < n_keys; j++) { chunk_sum += exp(scores[j] - new_max); }
    return vec2<f32>(new_max, chunk_sum);
}
