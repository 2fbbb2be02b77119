// The Q4_K matvecs' (matvec_q4_k.wgsl, matvec_q4_k_i8.wgsl) scales of one 16-byte unit of quant bytes, from
// its block's 16-byte header (quant/q4_k.wgsl has the layout). Pure: no bindings.
#include "quant/k_scales.wgsl"

// Scale and min of sub-blocks 2j and 2j + 1 from the header words h (h.x = d | dmin << 16,
// h.yzw = the scale bytes), already multiplied by d and dmin: (d sc_lo, dmin m_lo, d sc_hi, dmin m_hi).
fn unit_scales(h: vec4<u32>, j: u32) -> vec4<f32> {
    let dm = unpack2x16float(h.x);
    let low = scale_min_k4_words(h, 2u * j);
    let high = scale_min_k4_words(h, 2u * j + 1u);
    return vec4<f32>(dm.x * low.x, dm.y * low.y, dm.x * high.x, dm.y * high.y);
}
