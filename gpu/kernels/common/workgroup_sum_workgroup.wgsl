// workgroup_sum(v): the sum of v over the workgroup's WG invocations, the same value in each; portable
// variant: a tree in workgroup memory, log2(WG) + 1 barriers a sum. The including kernel defines
// `const WG: u32` (a power of two); its entry point calls workgroup_sum_setup with its
// local_invocation_index before any sum, and sums are taken from control flow uniform over the workgroup.

var<workgroup> sum_slots: array<f32, WG>;
var<private> sum_lid: u32;

fn workgroup_sum_setup(lid: u32) {
    sum_lid = lid;
}

fn workgroup_sum(v: f32) -> f32 {
    sum_slots[sum_lid] = v;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride >>= 1u) {
        if (sum_lid < stride) {
            sum_slots[sum_lid] += sum_slots[sum_lid + stride];
        }
        workgroupBarrier();
    }
    let total = sum_slots[0];
    workgroupBarrier();  // every invocation has read the total before a next call rewrites the slots
    return total;
}
