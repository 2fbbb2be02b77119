// workgroup_sum(v): the sum of v over the workgroup's WG invocations, the same value in each; subgroup
// variant (needs the adapter's "subgroup" feature): subgroupAdd within each subgroup, one slot per
// subgroup in workgroup memory, 2 barriers a sum. Correct whether or not the subgroups are full: each
// subgroup's first active lane writes its sum at its subgroup id. The including kernel defines
// `const WG: u32`; its entry point calls workgroup_sum_setup with its subgroup builtins before any sum,
// and sums are taken from control flow uniform over the workgroup.

var<workgroup> sum_slots: array<f32, WG>;  // [num_subgroups] subgroup sums
var<private> sum_subgroup: u32;            // this invocation's subgroup id
var<private> sum_elected: bool;            // first active lane of its subgroup
var<private> sum_subgroups: u32;           // subgroups in the workgroup

fn workgroup_sum_setup(sg_id: u32, sg_lane: u32, n_sg: u32) {
    sum_subgroup = sg_id;
    sum_subgroups = n_sg;
    sum_elected = subgroupBroadcastFirst(sg_lane) == sg_lane;  // WGSL has no subgroupElect
}

fn workgroup_sum(v: f32) -> f32 {
    let s = subgroupAdd(v);
    if (sum_elected) {
        sum_slots[sum_subgroup] = s;
    }
    workgroupBarrier();
    var total = 0.0;
    for (var i = 0u; i < sum_subgroups; i++) {
        total += sum_slots[i];
    }
    workgroupBarrier();  // every invocation has read the slots before a next call rewrites them
    return total;
}
