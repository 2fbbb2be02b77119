// F32 weights: plain little-endian floats. GGML's block is one value; the kernels read blocks of
// 16 values (64 bytes, 4-byte aligned), so rows must hold a multiple of 16 values.
//   bytes 4 i .. 4 i + 3   value i (f32)

const BLOCK_VALUES: u32 = 16u;
const BLOCK_BYTES: u32 = 64u;

fn dequant16(base: u32, g: u32) -> mat4x4<f32> {
    let i = base >> 2u;
    return mat4x4<f32>(
        bitcast<vec4<f32>>(vec4<u32>(weight[i], weight[i + 1u], weight[i + 2u], weight[i + 3u])),
        bitcast<vec4<f32>>(vec4<u32>(weight[i + 4u], weight[i + 5u], weight[i + 6u], weight[i + 7u])),
        bitcast<vec4<f32>>(vec4<u32>(weight[i + 8u], weight[i + 9u], weight[i + 10u], weight[i + 11u])),
        bitcast<vec4<f32>>(vec4<u32>(weight[i + 12u], weight[i + 13u], weight[i + 14u], weight[i + 15u])),
    );
}
