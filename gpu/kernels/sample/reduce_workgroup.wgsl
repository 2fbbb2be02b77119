// Entry point and workgroup reductions of the sampling kernels, portable variant: trees in
// workgroup memory (log2(WG) + 1 barriers each) and a Hillis-Steele scan (2 log2(WG) barriers).
// The including kernel defines `const WG: u32` (a power of two) and `fn group_main(group: u32,
// lid: u32)`; group_main may call the functions below and workgroup_sum (the float sum, from
// common/workgroup_sum_workgroup.wgsl) any number of times, from control flow uniform over the
// workgroup. Each returns the same value in every invocation, except inclusive_scan, whose order
// is the invocations' scan_pos (here local_invocation_index).

#include "common/workgroup_sum_workgroup.wgsl"

var<workgroup> red_pairs: array<vec2<u32>, WG>;
var<workgroup> red_u32: array<u32, WG>;
var<private> red_lid: u32;
var<private> scan_pos: u32;  // this invocation's place in the order of inclusive_scan

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    red_lid = lid;
    scan_pos = lid;
    workgroup_sum_setup(lid);
    group_main(wid.x + wid.y * nwg.x, lid);
}

// The best (key, index) pair of the workgroup (better_pair: larger key, then lower index).
fn best_pair(key: u32, index: u32) -> vec2<u32> {
    red_pairs[red_lid] = vec2<u32>(key, index);
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride >>= 1u) {
        if (red_lid < stride) {
            red_pairs[red_lid] = better_pair(red_pairs[red_lid], red_pairs[red_lid + stride]);
        }
        workgroupBarrier();
    }
    let best = red_pairs[0];
    workgroupBarrier();  // every invocation has read it before a next call rewrites red_pairs
    return best;
}

fn max_u32(v: u32) -> u32 {
    red_u32[red_lid] = v;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride >>= 1u) {
        if (red_lid < stride) {
            red_u32[red_lid] = max(red_u32[red_lid], red_u32[red_lid + stride]);
        }
        workgroupBarrier();
    }
    let total = red_u32[0];
    workgroupBarrier();
    return total;
}

// Sum of v over the invocations whose scan_pos is <= this one's.
fn inclusive_scan(v: u32) -> u32 {
    red_u32[red_lid] = v;
    workgroupBarrier();
    for (var offset = 1u; offset < WG; offset <<= 1u) {
        var add = 0u;
        if (red_lid >= offset) {
            add = red_u32[red_lid - offset];
        }
        workgroupBarrier();
        red_u32[red_lid] += add;
        workgroupBarrier();
    }
    let total = red_u32[red_lid];
    workgroupBarrier();
    return total;
}
