// Q4_K blocks as int8 (quant_i8/block.wgsl; the layout is quant/q4_k.wgsl's): block b of a row is
// sub-block b % 8 of super-block b / 8, value = d scale q - dmin min with q in [0, 16).
#include "quant/q4_k.wgsl"
#include "quant_i8/block.wgsl"

const HALF_SCALES: bool = false;
const HAS_MIN: bool = true;

// d, dmin and the scale bytes: the super-block's first 16 bytes, the same for its 8 blocks.
fn block_head_i8(row: u32, b: u32) -> vec4<u32> {
    return load_16_aligned(row + (b >> 3u) * BLOCK_BYTES);
}

fn block_i8(row: u32, b: u32, head: vec4<u32>) -> I8Block {
    let base = row + (b >> 3u) * BLOCK_BYTES;
    let sub = b & 7u;
    let dmin = unpack2x16float(head.x);
    let sm = scale_min_k4_words(head, sub);
    let shift = vec4<u32>(4u * (sub & 1u));
    let qs = base + 16u + 32u * (sub >> 1u);
    let lo = (load_16_aligned(qs) >> shift) & vec4<u32>(0x0F0F0F0Fu);
    let hi = (load_16_aligned(qs + 16u) >> shift) & vec4<u32>(0x0F0F0F0Fu);
    let d = dmin.x * sm.x;
    return I8Block(lo, hi, vec3<f32>(d, d, -dmin.y * sm.y));
}
