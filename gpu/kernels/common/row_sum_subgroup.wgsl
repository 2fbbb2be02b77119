// Entry point and row sum for kernels that give each row one workgroup of WG invocations
// (the norms), subgroup variant (needs the adapter's "subgroup" feature): row_sum is
// common/workgroup_sum_subgroup.wgsl's sum (subgroupAdd, one slot per subgroup, 2 barriers a sum).
// The including kernel defines `const WG: u32` and `fn row_main(row: u32, lid: u32)`, which may
// call row_sum(v) any number of times, from control flow uniform over the workgroup.
// row_sum(v) returns the sum of v over the workgroup's invocations, the same value in each.
#include "common/workgroup_sum_subgroup.wgsl"

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32, @builtin(subgroup_id) sg_id: u32,
        @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(num_subgroups) n_sg: u32) {
    workgroup_sum_setup(sg_id, sg_lane, n_sg);
    row_main(wid.x + wid.y * nwg.x, lid);
}

fn row_sum(v: f32) -> f32 {
    return workgroup_sum(v);
}
