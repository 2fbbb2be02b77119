// A key's score from its dot with the query, for the attention kernels that walk a cache's keys (attention.wgsl,
// attention_key_lanes.wgsl): scaled, and capped where the network caps attention logits. Needs the including
// kernel's SCALE and SOFTCAP.

fn score_of(dot: f32) -> f32 {
    let s = dot * SCALE;
    if (SOFTCAP > 0.0) {
        return SOFTCAP * tanh(s / SOFTCAP);
    }
    return s;
}
