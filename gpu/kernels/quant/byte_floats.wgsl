// Bytes to f32 without integer-to-float conversions, for the quant decoders (quant/bytes.wgsl) and
// kernels that load their weights as vec4<u32> (matvec_q4_k_rows.wgsl). Pure functions: no bindings.

// The four bytes of w as f32. 2^23 + b is exact in an f32 whose mantissa holds b, so an OR and
// a subtraction replace an integer-to-float conversion (a quarter-rate instruction on NVIDIA;
// 9% faster Q8_0 matvec on an H100 at K = 4096, exact all the same).
fn u8x4_to_f32(w: u32) -> vec4<f32> {
    let b = (vec4<u32>(w) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xFFu);
    return bitcast<vec4<f32>>(b | vec4<u32>(0x4B000000u)) - vec4<f32>(8388608.0);
}

// The four bytes of w as signed int8, as f32 (biased to unsigned by flipping the sign bits).
fn i8x4_to_f32(w: u32) -> vec4<f32> {
    let b = (vec4<u32>(w ^ 0x80808080u) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xFFu);
    return bitcast<vec4<f32>>(b | vec4<u32>(0x4B000000u)) - vec4<f32>(8388736.0);  // 2^23 + 128
}

