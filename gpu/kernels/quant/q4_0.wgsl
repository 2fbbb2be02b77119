// Q4_0 (ggml block_q4_0): 32 values in 18 bytes.
//   bytes 0..1    d: f16 scale
//   bytes 2..17   qs: 16 bytes of 4-bit values; value i < 16 is the low nibble of qs[i],
//                 value 16 + i the high nibble; value = d * (q - 8)

const BLOCK_VALUES: u32 = 32u;
const BLOCK_BYTES: u32 = 18u;

fn dequant16(base: u32, g: u32) -> mat4x4<f32> {
    let d = load_f16(base);
    // group g of 16 values is the low (g = 0) or high (g = 1) nibbles of all 16 bytes
    let q = (load_16(base + 2u) >> vec4<u32>(4u * g)) & vec4<u32>(0x0F0F0F0Fu);
    return centred16(q, d, 8.0);
}
