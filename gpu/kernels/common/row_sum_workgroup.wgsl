// Entry point and row sum for kernels that give each row one workgroup of WG invocations
// (the norms), portable variant: row_sum is common/workgroup_sum_workgroup.wgsl's tree in workgroup
// memory (log2(WG) + 1 barriers a sum).
// The including kernel defines `const WG: u32` (a power of two) and `fn row_main(row: u32, lid: u32)`,
// which may call row_sum(v) any number of times, from control flow uniform over the workgroup.
// row_sum(v) returns the sum of v over the workgroup's invocations, the same value in each.
#include "common/workgroup_sum_workgroup.wgsl"

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    workgroup_sum_setup(lid);
    row_main(wid.x + wid.y * nwg.x, lid);
}

fn row_sum(v: f32) -> f32 {
    return workgroup_sum(v);
}
