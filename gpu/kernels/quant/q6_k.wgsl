// Q6_K (ggml block_q6_K): 256 values in 210 bytes (blocks start at even, not 4-aligned, bytes),
// sixteen sub-blocks of 16 values each with an int8 scale. The block is two halves of 128 values;
// in half h, value 128 h + 32 a + l (quarter a = 0..3, l = 0..31) is
//   low 4 bits:  ql[64 h + 32 (a mod 2) + l], low nibble for a < 2, high nibble for a >= 2
//   high 2 bits: bits 2 a .. 2 a + 1 of qh[32 h + l]
//   bytes 0..127    ql
//   bytes 128..191  qh
//   bytes 192..207  scales: int8 per 16 values
//   bytes 208..209  d: f16 super-block scale
//   value = d * scales[v / 16] * ((low | high << 4) - 32)

const BLOCK_VALUES: u32 = 256u;
const BLOCK_BYTES: u32 = 210u;

fn dequant16(base: u32, g: u32) -> mat4x4<f32> {
    let half = g >> 3u;
    let quarter = (g >> 1u) & 3u;
    let l0 = 16u * (g & 1u);
    let low = (load_16(base + 64u * half + 32u * (quarter & 1u) + l0) >> vec4<u32>(4u * (quarter >> 1u)))
        & vec4<u32>(0x0F0F0F0Fu);
    let high = ((load_16(base + 128u + 32u * half + l0) >> vec4<u32>(2u * quarter)) & vec4<u32>(0x03030303u))
        << vec4<u32>(4u);
    let scale = f32((i32(load_u8(base + 192u + g)) << 24u) >> 24u);
    let d = load_f16(base + 208u) * scale;
    return centred16(low | high, d, 32.0);
}
