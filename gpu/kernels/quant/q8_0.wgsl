// Q8_0 (ggml block_q8_0): 32 values in 34 bytes, so blocks start at even, not 4-aligned, bytes.
//   bytes 0..1    d: f16 scale
//   bytes 2..33   qs: 32 x int8; value i = d * qs[i]

const BLOCK_VALUES: u32 = 32u;
const BLOCK_BYTES: u32 = 34u;

fn dequant16(base: u32, g: u32) -> mat4x4<f32> {
    let d = load_f16(base);
    let q = load_16(base + 2u + 16u * g);
    return mat4x4<f32>(i8x4_to_f32(q.x) * d, i8x4_to_f32(q.y) * d, i8x4_to_f32(q.z) * d, i8x4_to_f32(q.w) * d);
}
