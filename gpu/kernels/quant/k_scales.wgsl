// Scales of Q4_K and Q5_K blocks (ggml get_scale_min_k4): eight sub-blocks of 32 values, each with
// a 6-bit scale and a 6-bit min packed in the 12 bytes at block bytes 4..15:
//   bytes 0..3    scale of sub-blocks 0..3 in bits 0..5; bits 6..7: high bits of scale 4..7
//   bytes 4..7    min of sub-blocks 0..3 in bits 0..5; bits 6..7: high bits of min 4..7
//   bytes 8..11   low 4 bits of scale 4..7 (bits 0..3) and of min 4..7 (bits 4..7)
// Pure (no bindings): the block decoders (quant/q4_k.wgsl, q5_k.wgsl, quant_i8/q4_k.wgsl) and the Q4_K matvecs'
// unit scales (matvec/q4_k_unit_scales.wgsl) share it.

// (scale, min) of sub-block s from the block's first 16 bytes (head.x: d and dmin, head.yzw: the scale bytes).
fn scale_min_k4_words(head: vec4<u32>, s: u32) -> vec2<f32> {
    let shift = 8u * (s & 3u);
    let lo = (head.y >> shift) & 0xFFu;   // byte j of the scale bytes, j = s mod 4
    let mid = (head.z >> shift) & 0xFFu;  // byte j + 4
    let hi = (head.w >> shift) & 0xFFu;   // byte j + 8
    let first = vec2<u32>(lo & 63u, mid & 63u);
    let second = vec2<u32>((hi & 0xFu) | ((lo >> 6u) << 4u), (hi >> 4u) | ((mid >> 6u) << 4u));
    return vec2<f32>(select(second, first, s < 4u));
}
