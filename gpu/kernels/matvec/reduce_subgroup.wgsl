// matvec entry point, subgroup variant (needs the adapter's "subgroup" feature): threads are
// numbered subgroup by subgroup, so a row's TPR lanes are lanes of one subgroup (consecutive, or
// every INTERLEAVE-th: matvec/constants.wgsl thread_slot) and a butterfly of subgroupShuffleXor
// adds them without workgroup memory. Where a row spans several subgroups (TPR INTERLEAVE > subgroup
// size) their sums meet in workgroup memory after one barrier. Vulkan does not promise full
// subgroups; if they are not full the numbering falls back to local_invocation_index and every
// lane's sum goes through workgroup memory (still correct).

#include "common/workgroup_sum_subgroup.wgsl"
#include "matvec/partials.wgsl"

fn shuffle_add(acc: array<f32, OUTS>, t: u32, mask: u32) -> array<f32, OUTS> {
    var sums = acc;
    if (t < OUTS) {
        sums[t] += subgroupShuffleXor(sums[t], mask);
    }
    return sums;
}

// Each sum plus lane ^ mask's (literal indices: matvec/constants.wgsl).
fn shuffle_add_all(acc: array<f32, OUTS>, mask: u32) -> array<f32, OUTS> {
    var sums = acc;
    sums = shuffle_add(sums, 0u, mask);
    sums = shuffle_add(sums, 1u, mask);
    sums = shuffle_add(sums, 2u, mask);
    sums = shuffle_add(sums, 3u, mask);
    sums = shuffle_add(sums, 4u, mask);
    sums = shuffle_add(sums, 5u, mask);
    sums = shuffle_add(sums, 6u, mask);
    sums = shuffle_add(sums, 7u, mask);
    sums = shuffle_add(sums, 8u, mask);
    sums = shuffle_add(sums, 9u, mask);
    sums = shuffle_add(sums, 10u, mask);
    sums = shuffle_add(sums, 11u, mask);
    sums = shuffle_add(sums, 12u, mask);
    sums = shuffle_add(sums, 13u, mask);
    sums = shuffle_add(sums, 14u, mask);
    sums = shuffle_add(sums, 15u, mask);
    return sums;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32, @builtin(subgroup_id) sg_id: u32,
        @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(subgroup_size) sg_size: u32,
        @builtin(num_subgroups) n_sg: u32) {
    let workgroup = wid.x + wid.y * nwg.x;
    let first_row = workgroup * ROW_SPAN;
    if (first_row >= N_ROWS) {
        return;
    }
    workgroup_sum_setup(sg_id, sg_lane, n_sg);  // for matvec/x_normed.wgsl's sums
    let full = n_sg * sg_size == WG;  // uniform
    let tid = select(lid, sg_id * sg_size + sg_lane, full);
    let place = thread_slot(tid);
    let slot = place.x;
    let lane = place.y;
    prefetch_row(first_row, slot, lane);
    // matvec/x_${X_SOURCE}.wgsl: nothing, the normalised input, or the quantised one (by groups of 8 lanes)
    prepare_x(tid, workgroup, full && sg_size >= 8u);
    // lanes of a row within one subgroup (INTERLEAVE threads apart)
    let segment = select(1u, min(TPR, max(sg_size / INTERLEAVE, 1u)), full);
    var acc = row_partial(first_row, slot, lane);
    for (var mask = segment / 2u; mask > 0u; mask >>= 1u) {
        acc = shuffle_add_all(acc, mask * INTERLEAVE);
    }
    if (lane % segment == 0u) {
        keep_partials(acc, tid);
    }
    workgroupBarrier();
    if (lane == 0u) {
        store_row(first_row, slot, tid, segment);  // the row's segment sums, added
    }
    finish_rows(first_row, tid);  // matvec/store_${STORE}.wgsl: nothing, or the quantised output
}
