// f16 rounding of an f32 that no compiler can fold away: for values computed beside their packed copy
// (common/head_norm_rope.wgsl's cache_rounded). Tested against numpy's float16 conversion in
// tests/gpu/test_transformer_ops.py::test_f16_rounded.

// x rounded to the nearest f16 (ties to even), as pack2x16float rounds it, in integer steps: NVIDIA's
// compiler takes unpack2x16float(pack2x16float(x)) for x itself, which gave attention's fused prologue
// the unrounded k(p) and v(p) where the cache holds them rounded (on an H100 99% of the outputs of
// test_transformer_ops.py::test_attention_raw_qkv's f16 cases differed, by up to 2.6e-4). Below f16's smallest normal
// (2^-14) values are multiples of 2^-24; past its largest (65504) the cache would hold inf, which no
// normalised k or projected v reaches.
fn f16_rounded(x: f32) -> f32 {
    if (abs(x) < 6.103515625e-05) {
        return round(x * 16777216.0) * 5.9604644775390625e-08;   // round(): ties to even
    }
    let bits = bitcast<u32>(x);
    return bitcast<f32>((bits + 0x0FFFu + ((bits >> 13u) & 1u)) & 0xFFFFE000u);   // 10 mantissa bits kept
}
