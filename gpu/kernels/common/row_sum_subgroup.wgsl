// Entry point and row sum for kernels that give each row one workgroup of WG invocations
// (the norms), subgroup variant (needs the adapter's "subgroup" feature): subgroupAdd within each
// subgroup, one slot per subgroup in workgroup memory, 2 barriers per sum. Correct whether or
// not the subgroups are full: each subgroup's first active lane writes its sum at its subgroup id.
// The including kernel defines `const WG: u32` and `fn row_main(row: u32, lid: u32)`, which may
// call row_sum(v) any number of times, from control flow uniform over the workgroup.
// row_sum(v) returns the sum of v over the workgroup's invocations, the same value in each.

var<workgroup> row_partial: array<f32, WG>;  // [num_subgroups] subgroup sums
var<private> row_subgroup: u32;              // this invocation's subgroup id
var<private> row_elected: bool;              // first active lane of its subgroup
var<private> row_subgroups: u32;             // subgroups in the workgroup

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32, @builtin(subgroup_id) sg_id: u32,
        @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(num_subgroups) n_sg: u32) {
    row_subgroup = sg_id;
    row_subgroups = n_sg;
    row_elected = subgroupBroadcastFirst(sg_lane) == sg_lane;  // WGSL has no subgroupElect
    row_main(wid.x + wid.y * nwg.x, lid);
}

fn row_sum(v: f32) -> f32 {
    let s = subgroupAdd(v);
    if (row_elected) {
        row_partial[row_subgroup] = s;
    }
    workgroupBarrier();
    var total = 0.0;
    for (var i = 0u; i < row_subgroups; i++) {
        total += row_partial[i];
    }
    workgroupBarrier();  // every invocation has read the slots before a next call rewrites them
    return total;
}
