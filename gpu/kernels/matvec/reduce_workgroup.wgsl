// matvec entry point, portable variant: each row's TPR partial sums are added by a tree in
// workgroup memory (log2(TPR) barriers).

#include "common/workgroup_sum_workgroup.wgsl"

var<workgroup> partial: array<f32, WG * OUTS>;  // [OUTS, WG]

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let workgroup = wid.x + wid.y * nwg.x;
    let first_row = workgroup * ROW_SPAN;
    if (first_row >= N_ROWS) {
        return;
    }
    workgroup_sum_setup(lid);  // for matvec/x_normed.wgsl's sums
    let slot = lid / TPR;
    let lane = lid % TPR;
    prefetch_row(first_row, slot, lane);
    prepare_x(lid, workgroup, false);  // matvec/x_${X_SOURCE}.wgsl: nothing, or the normalised input
    let acc = row_partial(first_row, slot, lane);
    for (var t = 0u; t < OUTS; t++) {
        partial[t * WG + lid] = acc[t];
    }
    workgroupBarrier();
    for (var stride = TPR / 2u; stride > 0u; stride >>= 1u) {
        if (lane < stride) {
            for (var t = 0u; t < OUTS; t++) {
                partial[t * WG + lid] += partial[t * WG + lid + stride];
            }
        }
        workgroupBarrier();
    }
    if (lane == 0u) {
        var totals: array<f32, OUTS>;
        for (var t = 0u; t < OUTS; t++) {
            totals[t] = partial[t * WG + lid];
        }
        store_row(first_row, slot, totals);
    }
    finish_rows(first_row, lid);  // matvec/store_${STORE}.wgsl: nothing, or the quantised output
}
