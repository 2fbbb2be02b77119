// Entry point and row sum for kernels that give each row one workgroup of WG invocations
// (the norms), portable variant: a tree in workgroup memory, log2(WG) + 1 barriers per sum.
// The including kernel defines `const WG: u32` (a power of two) and `fn row_main(row: u32, lid: u32)`,
// which may call row_sum(v) any number of times, from control flow uniform over the workgroup.
// row_sum(v) returns the sum of v over the workgroup's invocations, the same value in each.

var<workgroup> row_partial: array<f32, WG>;
var<private> row_lid: u32;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    row_lid = lid;
    row_main(wid.x + wid.y * nwg.x, lid);
}

fn row_sum(v: f32) -> f32 {
    row_partial[row_lid] = v;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride >>= 1u) {
        if (row_lid < stride) {
            row_partial[row_lid] += row_partial[row_lid + stride];
        }
        workgroupBarrier();
    }
    let total = row_partial[0];
    workgroupBarrier();  // every invocation has read the total before a next call rewrites row_partial
    return total;
}
