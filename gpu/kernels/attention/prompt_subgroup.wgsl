// Entry point and row sums of attention_prompt.wgsl, subgroup variant (the adapter's "subgroup" feature,
// and subgroups of at least TPR invocations: the host checks the adapter's smallest subgroup size).
// A thread's role `me` is its place in its subgroup (subgroup id * size + lane), not its local index, so
// the TPR threads of a query row are always lanes of one subgroup, aligned to TPR, whatever order the
// driver fills subgroups in. row_sum4 adds the four partial scores over those lanes with xor shuffles
// (log2 TPR steps, TPR up to 32, no workgroup memory, no barrier). It is called from workgroup-uniform control flow.

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(subgroup_id) sg_id: u32, @builtin(subgroup_size) sg_size: u32,
        @builtin(subgroup_invocation_id) sg_lane: u32) {
    prompt_main(wid.x + wid.y * nwg.x, sg_id * sg_size + sg_lane);
}

fn row_sum4(v: vec4<f32>) -> vec4<f32> {
    var s = v;
    if (TPR > 1u) { s += subgroupShuffleXor(s, 1u); }
    if (TPR > 2u) { s += subgroupShuffleXor(s, 2u); }
    if (TPR > 4u) { s += subgroupShuffleXor(s, 4u); }
    if (TPR > 8u) { s += subgroupShuffleXor(s, 8u); }
    if (TPR > 16u) { s += subgroupShuffleXor(s, 16u); }   // D = 512 with PAIRS: a row is a whole 32-lane subgroup
    return s;
}
