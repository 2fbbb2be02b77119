// Entry point and part statistics of attention_combine.wgsl, subgroup variant (the adapter's "subgroup"
// feature): each subgroup forms M and L itself, a lane taking every size-th part (one part a lane for up
// to 32 parts on NVIDIA), by subgroupMax and subgroupAdd: no walk of the parts one read after another.
// Where the workgroup is not made of full subgroups it walks them (attention_combine.wgsl's
// memory_part_stats).

var<private> full: bool;   // uniform: the workgroup is made of full subgroups
var<private> sg_lanes: u32;
var<private> sg_lane_index: u32;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32, @builtin(subgroup_invocation_id) sg_lane: u32,
        @builtin(subgroup_size) sg_size: u32, @builtin(num_subgroups) n_sg: u32) {
    full = n_sg * sg_size == WG;
    sg_lanes = sg_size;
    sg_lane_index = sg_lane;
    combine_main(wid.x + wid.y * nwg.x, lid);
}

fn part_stats(parts: u32) -> vec2<f32> {
    if (!full) {
        return memory_part_stats(parts);
    }
    var lane_max = NEG_BIG;
    for (var s = sg_lane_index; s < parts; s += sg_lanes) { lane_max = max(lane_max, part_max[s]); }
    let m = subgroupMax(lane_max);
    var lane_sum = 0.0;
    for (var s = sg_lane_index; s < parts; s += sg_lanes) { lane_sum += part_sum[s] * exp(part_max[s] - m); }
    return vec2<f32>(m, subgroupAdd(lane_sum));
}
