// Entry point and workgroup reductions of the sampling kernels, subgroup variant (needs the
// adapter's "subgroup" feature): a subgroup operation, one slot per subgroup in workgroup memory,
// 2 barriers per call. Correct whether or not subgroups are full and however invocations are
// numbered within them: each subgroup's first active lane writes at its subgroup id, and the scan
// order (scan_pos) is counted at entry from the subgroups' sizes rather than assumed.
// The including kernel defines `const WG: u32` and `fn group_main(group: u32, lid: u32)`;
// group_main may call the functions below and workgroup_sum (the float sum, from
// common/workgroup_sum_subgroup.wgsl) any number of times, from control flow uniform over the
// workgroup. Each returns the same value in every invocation, except inclusive_scan.

#include "common/workgroup_sum_subgroup.wgsl"

var<workgroup> red_pairs: array<vec2<u32>, WG>;  // [num_subgroups]
var<workgroup> red_u32: array<u32, WG>;          // [num_subgroups]
var<private> red_subgroup: u32;   // this invocation's subgroup id
var<private> red_subgroups: u32;  // subgroups in the workgroup
var<private> red_elected: bool;   // first active lane of its subgroup
var<private> red_lane: u32;       // subgroup_invocation_id
var<private> scan_pos: u32;       // this invocation's place in the order of inclusive_scan

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32, @builtin(subgroup_id) sg_id: u32,
        @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(num_subgroups) n_sg: u32) {
    red_subgroup = sg_id;
    red_subgroups = n_sg;
    red_lane = sg_lane;
    red_elected = subgroupBroadcastFirst(sg_lane) == sg_lane;  // WGSL has no subgroupElect
    // scan order: subgroup by subgroup, lanes in order within each
    let lanes = subgroupAdd(1u);
    if (red_elected) {
        red_u32[sg_id] = lanes;
    }
    workgroupBarrier();
    var before = 0u;
    for (var s = 0u; s < sg_id; s++) {
        before += red_u32[s];
    }
    scan_pos = before + subgroupExclusiveAdd(1u);
    workgroupBarrier();
    workgroup_sum_setup(sg_id, sg_lane, n_sg);
    group_main(wid.x + wid.y * nwg.x, lid);
}

// The best (key, index) pair of the workgroup (better_pair: larger key, then lower index).
fn best_pair(key: u32, index: u32) -> vec2<u32> {
    let top = subgroupMax(key);
    let first = subgroupMin(select(0xFFFFFFFFu, index, key == top));
    if (red_elected) {
        red_pairs[red_subgroup] = vec2<u32>(top, first);
    }
    workgroupBarrier();
    var best = red_pairs[0];
    for (var s = 1u; s < red_subgroups; s++) {
        best = better_pair(best, red_pairs[s]);
    }
    workgroupBarrier();  // every invocation has read the slots before a next call rewrites them
    return best;
}

fn max_u32(v: u32) -> u32 {
    let m = subgroupMax(v);
    if (red_elected) {
        red_u32[red_subgroup] = m;
    }
    workgroupBarrier();
    var total = 0u;
    for (var s = 0u; s < red_subgroups; s++) {
        total = max(total, red_u32[s]);
    }
    workgroupBarrier();
    return total;
}

// Sum of v over the invocations whose scan_pos is <= this one's.
fn inclusive_scan(v: u32) -> u32 {
    let within = subgroupInclusiveAdd(v);
    let total = subgroupAdd(v);
    if (red_elected) {
        red_u32[red_subgroup] = total;
    }
    workgroupBarrier();
    var before = 0u;
    for (var s = 0u; s < red_subgroup; s++) {
        before += red_u32[s];
    }
    workgroupBarrier();
    return before + within;
}
