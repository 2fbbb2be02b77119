// Entry point and part statistics of attention_combine.wgsl, portable variant: every invocation walks
// the parts' maxima and sums in workgroup memory; its role is its local index.

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    combine_main(wid.x + wid.y * nwg.x, lid);
}

fn part_stats(parts: u32) -> vec2<f32> {
    return memory_part_stats(parts);
}
