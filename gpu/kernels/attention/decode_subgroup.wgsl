// Entry point and sums of attention.wgsl, subgroup variant (the adapter's "subgroup" feature). Where the
// workgroup is made of full subgroups of at least LANES invocations (always on NVIDIA), an invocation's
// role is its place in its subgroup (subgroup id * size + lane), so that a key's LANES invocations are
// lanes of one subgroup, and:
//   - a key's partial dots are added by xor shuffles, and its score written by its first lane: one barrier
//     a chunk where workgroup memory took two;
//   - every subgroup forms the chunk's max and sum of exponentials itself (each lane a key, or every
//     size-th key, then subgroupMax / subgroupAdd), with no barrier and no invocation walking all the
//     keys one read after another (as attention/decode_memory.wgsl's does);
//   - the q and k norms' sums of squares are subgroupAdd's, one slot a subgroup: the order of
//     qk_norm_rope_store's subgroup variant (common/workgroup_sum_subgroup.wgsl), so both give the same bits.
// Elsewhere (subgroups not full, or smaller than LANES) it takes attention/decode_memory.wgsl's sums.
#include "common/norm_lanes.wgsl"

var<workgroup> norm_slots: array<vec2<f32>, NORM_LANES>;  // (q, k) sums of each subgroup of the norm's lanes
var<private> fast: bool;   // uniform: subgroups full and of at least LANES lanes
var<private> sg_index: u32;
var<private> sg_lanes: u32;
var<private> sg_lane_index: u32;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32, @builtin(subgroup_id) sg_id: u32,
        @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(subgroup_size) sg_size: u32,
        @builtin(num_subgroups) n_sg: u32) {
    fast = n_sg * sg_size == WG && sg_size >= LANES;
    sg_index = sg_id;
    sg_lanes = sg_size;
    sg_lane_index = sg_lane;
    attention_main(wid.x + wid.y * nwg.x, select(lid, sg_id * sg_size + sg_lane, fast));
}

fn head_sums(sums: vec2<f32>, tid: u32) -> vec2<f32> {
    if (!fast) {
        return memory_head_sums(sums, tid);
    }
    let total = vec2<f32>(subgroupAdd(sums.x), subgroupAdd(sums.y));
    let slots = max(1u, NORM_LANES / sg_lanes);  // the subgroups holding roles 0 .. NORM_LANES - 1
    if (sg_index < slots && sg_lane_index == 0u) {
        norm_slots[sg_index] = total;
    }
    workgroupBarrier();
    var sum = vec2<f32>(0.0);
    for (var i = 0u; i < slots; i++) {
        sum += norm_slots[i];
    }
    return sum;
}

fn chunk_scores(d: f32, key_row: u32, n_keys: u32, tid: u32) {
    if (!fast) {
        memory_chunk_scores(d, key_row, n_keys, tid);
        return;
    }
    var sum = d;
    for (var mask = 1u; mask < LANES; mask <<= 1u) {
        sum += subgroupShuffleXor(sum, mask);
    }
    let key = tid / LANES;
    if (tid % LANES == 0u) {
        scores[key] = select(NEG_BIG, score_of(sum), key < n_keys);
        key_rows[key] = key_row;
    }
    workgroupBarrier();
}

fn chunk_softmax(n_keys: u32, running_max: f32) -> vec2<f32> {
    if (!fast) {
        return memory_chunk_softmax(n_keys, running_max);
    }
    var lane_max = NEG_BIG;
    for (var j = sg_lane_index; j < KEYS; j += sg_lanes) { lane_max = max(lane_max, scores[j]); }
    let new_max = max(running_max, subgroupMax(lane_max));
    var lane_sum = 0.0;
    for (var j = sg_lane_index; j < KEYS; j += sg_lanes) { lane_sum += exp(scores[j] - new_max); }
    return vec2<f32>(new_max, subgroupAdd(lane_sum));
}
