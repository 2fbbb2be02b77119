// Q6_K blocks as int8 (quant_i8/block.wgsl; the layout is quant/q6_k.wgsl's): block b of a row is
// values 32 (b % 8) .. + 31 of super-block b / 8, that is quarter a = b % 4 of half h = (b % 8) / 4,
// whose two 16-value sub-blocks have their own int8 scales; value = d scale (q - 32), q in [0, 64).
#include "quant/q6_k.wgsl"
#include "quant_i8/block.wgsl"

const HALF_SCALES: bool = true;
const HAS_MIN: bool = false;

fn block_head_i8(row: u32, b: u32) -> vec4<u32> {
    return vec4<u32>();  // block_i8 reads its scales itself
}

fn block_i8(row: u32, b: u32, head: vec4<u32>) -> I8Block {
    let base = row + (b >> 3u) * BLOCK_BYTES;
    let half = (b >> 2u) & 1u;
    let quarter = b & 3u;
    let ql = base + 64u * half + 32u * (quarter & 1u);
    let qh = base + 128u + 32u * half;
    let low_shift = vec4<u32>(4u * (quarter >> 1u));
    let high_shift = vec4<u32>(2u * quarter);
    let lo = ((load_16(ql) >> low_shift) & vec4<u32>(0x0F0F0F0Fu))
        | (((load_16(qh) >> high_shift) & vec4<u32>(0x03030303u)) << vec4<u32>(4u));
    let hi = ((load_16(ql + 16u) >> low_shift) & vec4<u32>(0x0F0F0F0Fu))
        | (((load_16(qh + 16u) >> high_shift) & vec4<u32>(0x03030303u)) << vec4<u32>(4u));
    let g = 8u * half + 2u * quarter;  // the 16-value sub-block of values 0..15
    let d = load_f16(base + 208u);
    let s_lo = f32((i32(load_u8(base + 192u + g)) << 24u) >> 24u);
    let s_hi = f32((i32(load_u8(base + 193u + g)) << 24u) >> 24u);
    return I8Block(centred_i8(lo, 32u), centred_i8(hi, 32u), vec3<f32>(d * s_lo, d * s_hi, 0.0));
}
