// Q5_0 (ggml block_q5_0): 32 values in 22 bytes.
//   bytes 0..1    d: f16 scale
//   bytes 2..5    qh: u32, bit i is the fifth (high) bit of value i
//   bytes 6..21   qs: low 4 bits; value i < 16 in the low nibble of qs[i], 16 + i in the high nibble
//   value = d * ((low | high << 4) - 16)

const BLOCK_VALUES: u32 = 32u;
const BLOCK_BYTES: u32 = 22u;

#include "quant/high_bits.wgsl"

fn dequant16(base: u32, g: u32) -> mat4x4<f32> {
    let d = load_f16(base);
    let qh = load_u32(base + 2u) >> (16u * g);
    let low = (load_16(base + 6u) >> vec4<u32>(4u * g)) & vec4<u32>(0x0F0F0F0Fu);
    return centred16(low | high_bits16(qh), d, 16.0);
}
