// F16 weights: IEEE half floats. GGML's block is one value; the kernels read blocks of 16 values
// (32 bytes, 4-byte aligned), so rows must hold a multiple of 16 values.
//   bytes 2 i .. 2 i + 1   value i (f16); a word holds values 2 j (low half) and 2 j + 1

const BLOCK_VALUES: u32 = 16u;
const BLOCK_BYTES: u32 = 32u;

fn f16x4(a: u32, b: u32) -> vec4<f32> {
    return vec4<f32>(unpack2x16float(a), unpack2x16float(b));
}

fn dequant16(base: u32, g: u32) -> mat4x4<f32> {
    let i = base >> 2u;
    return mat4x4<f32>(f16x4(weight[i], weight[i + 1u]), f16x4(weight[i + 2u], weight[i + 3u]),
                       f16x4(weight[i + 4u], weight[i + 5u]), f16x4(weight[i + 6u], weight[i + 7u]));
}
