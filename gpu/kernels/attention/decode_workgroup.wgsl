// Entry point and sums of attention.wgsl, portable variant: every sum through workgroup memory
// (attention/decode_memory.wgsl); an invocation's role is its local index.

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    attention_main(wid.x + wid.y * nwg.x, lid);
}

fn head_sums(sums: vec2<f32>, tid: u32) -> vec2<f32> {
    return memory_head_sums(sums, tid);
}

fn chunk_scores(d: f32, key_row: u32, n_keys: u32, tid: u32) {
    memory_chunk_scores(d, key_row, n_keys, tid);
}

fn chunk_softmax(n_keys: u32, running_max: f32) -> vec2<f32> {
    return memory_chunk_softmax(n_keys, running_max);
}
