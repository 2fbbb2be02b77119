// Q5_K (ggml block_q5_K): 256 values in 176 bytes (blocks are 4-byte aligned), eight sub-blocks
// of 32 values each with a 6-bit scale and min (see quant/k_scales.wgsl).
//   bytes 0..1     d: f16 super-block scale of the sub-block scales
//   bytes 2..3     dmin: f16 super-block scale of the sub-block mins
//   bytes 4..15    scales: 6-bit scale and min of sub-blocks 0..7
//   bytes 16..47   qh: fifth bits; value v's is bit v / 32 of qh[v mod 32]
//   bytes 48..175  qs: low 4 bits, laid out as Q4_K's qs (chunk j: values 64 j + i low nibble,
//                  64 j + 32 + i high nibble of byte 32 j + i)
//   value = d * scale[s] * (low | high << 4) - dmin * min[s]

const BLOCK_VALUES: u32 = 256u;
const BLOCK_BYTES: u32 = 176u;

#include "quant/k_scales.wgsl"

fn dequant16(base: u32, g: u32) -> mat4x4<f32> {
    let head = load_16_aligned(base);  // d, dmin and the scale bytes
    let dmin = unpack2x16float(head.x);
    let chunk = g >> 2u;
    let upper = (g >> 1u) & 1u;
    let sm = scale_min_k4_words(head, 2u * chunk + upper);
    let low = (load_16_aligned(base + 48u + 32u * chunk + 16u * (g & 1u)) >> vec4<u32>(4u * upper))
        & vec4<u32>(0x0F0F0F0Fu);
    let high = ((load_16_aligned(base + 16u + 16u * (g & 1u)) >> vec4<u32>(g >> 1u)) & vec4<u32>(0x01010101u))
        << vec4<u32>(4u);
    return affine16(low | high, dmin.x * sm.x, -dmin.y * sm.y);
}
