// Q4_K (ggml block_q4_K): 256 values in 144 bytes (blocks are 4-byte aligned), eight sub-blocks
// of 32 values each with a 6-bit scale and min (see quant/k_scales.wgsl).
//   bytes 0..1     d: f16 super-block scale of the sub-block scales
//   bytes 2..3     dmin: f16 super-block scale of the sub-block mins
//   bytes 4..15    scales: 6-bit scale and min of sub-blocks 0..7
//   bytes 16..143  qs: 4-bit values in four chunks of 32 bytes; chunk j holds values 64 j + i in
//                  the low nibble of byte i (sub-block 2 j) and 64 j + 32 + i in the high nibble
//                  (sub-block 2 j + 1)
//   value = d * scale[s] * q - dmin * min[s]

const BLOCK_VALUES: u32 = 256u;
const BLOCK_BYTES: u32 = 144u;

#include "quant/k_scales.wgsl"

// Values [16 g, 16 g + 16) of a block from its first 16 bytes (head) and the 16 quant bytes holding them (qs:
// block bytes 16 + 32 (g / 4) + 16 (g % 2)); kernels that load a block's words themselves call this.
fn q4_k_group16(head: vec4<u32>, qs: vec4<u32>, g: u32) -> mat4x4<f32> {
    let dmin = unpack2x16float(head.x);
    let upper = (g >> 1u) & 1u;  // high nibbles: the second sub-block of the chunk
    let sm = scale_min_k4_words(head, 2u * (g >> 2u) + upper);
    let q = (qs >> vec4<u32>(4u * upper)) & vec4<u32>(0x0F0F0F0Fu);
    return affine16(q, dmin.x * sm.x, -dmin.y * sm.y);
}

// The byte offset in a block of the 16 quant bytes of group g.
fn q4_k_qs_byte(g: u32) -> u32 {
    return 16u + 32u * (g >> 2u) + 16u * (g & 1u);
}

fn dequant16(base: u32, g: u32) -> mat4x4<f32> {
    return q4_k_group16(load_16_aligned(base), load_16_aligned(base + q4_k_qs_byte(g)), g);
}
