// Q4_1 (ggml block_q4_1): 32 values in 20 bytes (blocks are 4-byte aligned).
//   bytes 0..1    d: f16 scale
//   bytes 2..3    m: f16 minimum
//   bytes 4..19   qs: 16 bytes of 4-bit values; value i < 16 is the low nibble of qs[i],
//                 value 16 + i the high nibble; value = d * q + m

const BLOCK_VALUES: u32 = 32u;
const BLOCK_BYTES: u32 = 20u;

fn dequant16(base: u32, g: u32) -> mat4x4<f32> {
    let dm = unpack2x16float(weight[base >> 2u]);
    let q = (load_16_aligned(base + 4u) >> vec4<u32>(4u * g)) & vec4<u32>(0x0F0F0F0Fu);
    return affine16(q, dm.x, dm.y);
}
