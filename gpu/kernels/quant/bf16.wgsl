// BF16 weights: bfloat16, the top half of an f32. GGML's block is one value; the kernels read
// blocks of 16 values (32 bytes, 4-byte aligned), so rows must hold a multiple of 16 values.
//   bytes 2 i .. 2 i + 1   value i (bf16); a word holds values 2 j (low half) and 2 j + 1

const BLOCK_VALUES: u32 = 16u;
const BLOCK_BYTES: u32 = 32u;

fn bf16x4(a: u32, b: u32) -> vec4<f32> {
    return bitcast<vec4<f32>>(vec4<u32>(a << 16u, a & 0xFFFF0000u, b << 16u, b & 0xFFFF0000u));
}

fn dequant16(base: u32, g: u32) -> mat4x4<f32> {
    let i = base >> 2u;
    return mat4x4<f32>(bf16x4(weight[i], weight[i + 1u]), bf16x4(weight[i + 2u], weight[i + 3u]),
                       bf16x4(weight[i + 4u], weight[i + 5u]), bf16x4(weight[i + 6u], weight[i + 7u]));
}
