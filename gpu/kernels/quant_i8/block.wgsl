// The int8 view of a weight's 32-value blocks for matmul_i8.wgsl. Each quant_i8/<type>.wgsl (with
// quant/bytes.wgsl's byte access) exposes
//     const BLOCK_VALUES, BLOCK_BYTES   as quant/<type>.wgsl
//     const HALF_SCALES: bool           true where values 0..15 and 16..31 have their own scales (Q6_K)
//     const HAS_MIN: bool               true where values carry an additive minimum (Q4_K)
//     fn block_head_i8(row: u32, b: u32) -> vec4<u32>
//         the words of block b's super-block that block_i8 reads for each of its 32-value blocks (Q4_K: d,
//         dmin and the scale bytes), for a caller to load once a super-block and hold; zeros where a type
//         reads none that way
//     fn block_i8(row: u32, b: u32, head: vec4<u32>) -> I8Block
//         values [32 b, 32 b + 32) of the row whose first byte is `row`, such that value i is
//         d_lo q_i + m (i < 16) or d_hi q_i + m (i >= 16), with q_i a signed byte as dot4I8Packed
//         reads it; the values are ggml's exactly (q times the sub-block scale, minus the minimum).
//         head: block_head_i8(row, b).

struct I8Block {
    lo: vec4<u32>,  // q of values 0..15, four to a word (value 4 w + j in byte j of word w)
    hi: vec4<u32>,  // q of values 16..31
    scales: vec3<f32>,  // (d_lo, d_hi, m)
}

// Bytes q in [0, 128) as the signed bytes q - zero (no borrow between bytes: q + 128 - zero stays in
// [0, 256) and the top bit flip maps it to q - zero in two's complement).
fn centred_i8(q: vec4<u32>, zero: u32) -> vec4<u32> {
    return ((q | vec4<u32>(0x80808080u)) - vec4<u32>(zero * 0x01010101u)) ^ vec4<u32>(0x80808080u);
}
