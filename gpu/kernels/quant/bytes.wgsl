// Byte access into a GGUF weight as stored: blocks are byte-packed as in the file (Q8_0 is 34 bytes,
// Q6_K 210), so a block may start at any even byte. The op kernel that includes a decoder declares
//     @group(0) @binding(N) var<storage, read> weight: array<u32>;
// (little-endian words: byte 0 of a word is its low 8 bits) and the decoders read it through these.
//
// Every decoder (quant/<type>.wgsl) exposes the same interface, so op kernels are generic:
//     const BLOCK_VALUES: u32   values per block (the kernel's block: 16 for the float types)
//     const BLOCK_BYTES: u32    bytes per block
//     fn dequant16(base: u32, g: u32) -> mat4x4<f32>
//         values [16 g, 16 g + 16) of the block whose first byte is `base`; column c holds values
//         16 g + 4 c .. 16 g + 4 c + 3. A group of 16 shares one scale in every K-quant sub-block
//         layout, so scales are decoded once per 16 values.

#include "quant/byte_floats.wgsl"

const GROUP_VALUES: u32 = 16u;  // values dequantised per call of dequant16

// The byte at any offset.
fn load_u8(byte: u32) -> u32 {
    return (weight[byte >> 2u] >> ((byte & 3u) * 8u)) & 0xFFu;
}

// The u16 at an even offset (every f16 field of a GGUF block is at an even offset).
fn load_u16(byte: u32) -> u32 {
    return (weight[byte >> 2u] >> ((byte & 2u) * 8u)) & 0xFFFFu;
}

// The f16 at an even offset, widened.
fn load_f16(byte: u32) -> f32 {
    return unpack2x16float(load_u16(byte)).x;
}

// The u32 at any offset. Branch-free: the second word is read even when aligned (it lies in the
// same cache line; a read past the end of the binding is clamped by robust buffer access).
fn load_u32(byte: u32) -> u32 {
    let i = byte >> 2u;
    let s = (byte & 3u) * 8u;
    let lo = weight[i];
    return select((lo >> s) | (weight[i + 1u] << (32u - s)), lo, s == 0u);
}

// 16 bytes from any offset as four words (.x holds bytes 0..3).
fn load_16(byte: u32) -> vec4<u32> {
    let i = byte >> 2u;
    let s = (byte & 3u) * 8u;
    let lo = vec4<u32>(weight[i], weight[i + 1u], weight[i + 2u], weight[i + 3u]);
    let hi = vec4<u32>(lo.yzw, weight[i + 4u]);
    return select((lo >> vec4<u32>(s)) | (hi << vec4<u32>(32u - s)), lo, s == 0u);
}

// 16 bytes from a 4-byte aligned offset (blocks of Q4_1, Q5_1, Q4_K, Q5_K and the float types).
fn load_16_aligned(byte: u32) -> vec4<u32> {
    let i = byte >> 2u;
    return vec4<u32>(weight[i], weight[i + 1u], weight[i + 2u], weight[i + 3u]);
}

// Four words of 8-bit unsigned values as f32, column c = bytes of word c.
fn u8x16_to_mat(q: vec4<u32>) -> mat4x4<f32> {
    return mat4x4<f32>(u8x4_to_f32(q.x), u8x4_to_f32(q.y), u8x4_to_f32(q.z), u8x4_to_f32(q.w));
}

// d * q + m for 16 unsigned 8-bit q (the formats with a minimum: Q4_1, Q5_1, Q4_K, Q5_K).
fn affine16(q: vec4<u32>, d: f32, m: f32) -> mat4x4<f32> {
    let v = u8x16_to_mat(q);
    return mat4x4<f32>(v[0] * d + m, v[1] * d + m, v[2] * d + m, v[3] * d + m);
}

// d * (q - zero) for 16 unsigned 8-bit q (the symmetric formats: Q4_0, Q5_0, Q6_K); q - zero is
// exact, so the one rounding is that of ggml's reference.
fn centred16(q: vec4<u32>, d: f32, zero: f32) -> mat4x4<f32> {
    let v = u8x16_to_mat(q);
    return mat4x4<f32>((v[0] - zero) * d, (v[1] - zero) * d, (v[2] - zero) * d, (v[3] - zero) * d);
}
