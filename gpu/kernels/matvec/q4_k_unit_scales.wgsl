// The Q4_K matvecs' (matvec_q4_k.wgsl, matvec_q4_k_i8.wgsl) scales of one 16-byte unit of quant bytes, from
// its block's 16-byte header (quant/q4_k.wgsl has the layout). Pure: no bindings.

// Scale and min of sub-blocks 2j and 2j + 1 from the header words h (h.x = d | dmin << 16,
// h.yzw = the scale bytes), already multiplied by d and dmin: (d sc_lo, dmin m_lo, d sc_hi, dmin m_hi).
fn unit_scales(h: vec4<u32>, j: u32) -> vec4<f32> {
    let dm = unpack2x16float(h.x);
    var sc: vec2<u32>;
    var mn: vec2<u32>;
    if (j < 2u) {  // sub-blocks 0..3: low six bits of bytes s (scale) and s + 4 (min)
        let shift = 16u * j;
        let s = (h.y >> shift) & 0xFFFFu;
        let m = (h.z >> shift) & 0xFFFFu;
        sc = vec2<u32>(s & 63u, (s >> 8u) & 63u);
        mn = vec2<u32>(m & 63u, (m >> 8u) & 63u);
    } else {       // sub-blocks 4..7: four bits from bytes 8..11, two from the top of bytes 0..7
        let shift = 16u * (j - 2u);
        let lo = (h.w >> shift) & 0xFFFFu;
        let s = (h.y >> shift) & 0xFFFFu;
        let m = (h.z >> shift) & 0xFFFFu;
        sc = vec2<u32>((lo & 0xFu) | (((s >> 6u) & 3u) << 4u), ((lo >> 8u) & 0xFu) | (((s >> 14u) & 3u) << 4u));
        mn = vec2<u32>(((lo >> 4u) & 0xFu) | (((m >> 6u) & 3u) << 4u),
                       ((lo >> 12u) & 0xFu) | (((m >> 14u) & 3u) << 4u));
    }
    return vec4<f32>(dm.x * f32(sc.x), dm.y * f32(mn.x), dm.x * f32(sc.y), dm.y * f32(mn.y));
}
