// matvec entry point, portable variant: each row's TPR partial sums are added by a tree in
// workgroup memory (log2(TPR) barriers).

#include "common/workgroup_sum_workgroup.wgsl"
#include "matvec/partials.wgsl"

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let workgroup = wid.x + wid.y * nwg.x;
    let first_row = workgroup * ROW_SPAN;
    if (first_row >= N_ROWS) {
        return;
    }
    workgroup_sum_setup(lid);  // for matvec/x_normed.wgsl's sums
    let place = thread_slot(lid);
    let slot = place.x;
    let lane = place.y;
    prefetch_row(first_row, slot, lane);
    prepare_x(lid, workgroup, false);  // matvec/x_${X_SOURCE}.wgsl: nothing, or the normalised input
    keep_partials(row_partial(first_row, slot, lane), lid);
    workgroupBarrier();
    for (var stride = TPR / 2u; stride > 0u; stride >>= 1u) {
        if (lane < stride) {
            for (var t = 0u; t < OUTS; t++) {
                partial[t * WG + lid] += partial[t * WG + lid + stride * INTERLEAVE];  // lane + stride
            }
        }
        workgroupBarrier();
    }
    if (lane == 0u) {
        store_row(first_row, slot, lid, TPR);  // the tree's totals, at the row's first thread
    }
    finish_rows(first_row, lid);  // matvec/store_${STORE}.wgsl: nothing, or the quantised output
}
