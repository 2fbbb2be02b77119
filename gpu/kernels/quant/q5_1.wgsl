// Q5_1 (ggml block_q5_1): 32 values in 24 bytes (blocks are 4-byte aligned).
//   bytes 0..1    d: f16 scale
//   bytes 2..3    m: f16 minimum
//   bytes 4..7    qh: u32, bit i is the fifth (high) bit of value i
//   bytes 8..23   qs: low 4 bits; value i < 16 in the low nibble of qs[i], 16 + i in the high nibble
//   value = d * (low | high << 4) + m

const BLOCK_VALUES: u32 = 32u;
const BLOCK_BYTES: u32 = 24u;

#include "quant/high_bits.wgsl"

fn dequant16(base: u32, g: u32) -> mat4x4<f32> {
    let w = base >> 2u;
    let dm = unpack2x16float(weight[w]);
    let qh = weight[w + 1u] >> (16u * g);
    let low = (load_16_aligned(base + 8u) >> vec4<u32>(4u * g)) & vec4<u32>(0x0F0F0F0Fu);
    return affine16(low | high_bits16(qh), dm.x, dm.y);
}
