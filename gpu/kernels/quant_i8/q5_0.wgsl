// Q5_0 blocks as int8 (quant_i8/block.wgsl; the layout is quant/q5_0.wgsl's): value = d (q - 16),
// q in [0, 32) from the low nibbles and the fifth bits.
#include "quant/q5_0.wgsl"
#include "quant_i8/block.wgsl"

const HALF_SCALES: bool = false;
const HAS_MIN: bool = false;

fn block_head_i8(row: u32, b: u32) -> vec4<u32> {
    return vec4<u32>();  // block_i8 reads its scales itself
}

fn block_i8(row: u32, b: u32, head: vec4<u32>) -> I8Block {
    let base = row + b * BLOCK_BYTES;
    let d = load_f16(base);
    let qh = load_u32(base + 2u);
    let qs = load_16(base + 6u);
    let lo = (qs & vec4<u32>(0x0F0F0F0Fu)) | high_bits16(qh & 0xFFFFu);
    let hi = ((qs >> vec4<u32>(4u)) & vec4<u32>(0x0F0F0F0Fu)) | high_bits16(qh >> 16u);
    return I8Block(centred_i8(lo, 16u), centred_i8(hi, 16u), vec3<f32>(d, d, 0.0));
}
