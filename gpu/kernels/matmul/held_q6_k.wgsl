// Held loads of matmul/whole_rows.wgsl for Q6_K: the four groups whose values share their quant bytes (quarters
// 0..3 of one half's 16-value column, quant/q6_k.wgsl) as one held load: two 16-byte spans of low bits, one of
// high bits, the four scales and d, 19 words for the four groups where each group read alone loads twelve. The
// groups are taken in that order, not along k (each still adds its own 16 values of x).

const HELD_GROUPS: u32 = 4u;

struct Held {
    low_a: vec4<u32>,  // low bits of quarters 0 and 2 (low and high nibbles)
    low_b: vec4<u32>,  // of quarters 1 and 3
    high: vec4<u32>,   // high bits: quarter a in bits 2 a, 2 a + 1 of each byte
    d: vec4<f32>,      // d times the scale of quarter a
}

// The 16-value group (along the row) of group g of held load h.
fn held_group_index(h: u32, g: u32) -> u32 {
    let half = (h % 4u) / 2u;
    return (h / 4u) * 16u + 8u * half + 2u * g + h % 2u;
}

fn held_fetch(row_base: u32, h: u32) -> Held {
    let base = row_base + (h / 4u) * BLOCK_BYTES;
    let half = (h % 4u) / 2u;
    let l0 = 16u * (h % 2u);
    let at = base + 192u + 8u * half;  // the half's eight scales, at an even byte
    let i = at >> 2u;
    let s = (at & 3u) * 8u;
    let w = vec3<u32>(weight[i], weight[i + 1u], weight[i + 2u]);
    let eight = select((w.xy >> vec2<u32>(s)) | (w.yz << vec2<u32>(32u - s)), w.xy, s == 0u);
    let scales = eight >> vec2<u32>(8u * (h % 2u));  // quarter a's scale in byte 2 (a % 2) of word a / 2
    let sc = vec4<i32>(i32(scales.x << 24u), i32(scales.x << 8u), i32(scales.y << 24u), i32(scales.y << 8u)) >>
        vec4<u32>(24u);
    return Held(load_16(base + 64u * half + l0), load_16(base + 64u * half + 32u + l0),
                load_16(base + 128u + 32u * half + l0), load_f16(base + 208u) * vec4<f32>(sc));
}

fn held_group16(held: Held, row_base: u32, gi: u32) -> mat4x4<f32> {
    let quarter = (gi >> 1u) & 3u;
    let low = (select(held.low_a, held.low_b, (quarter & 1u) == 1u) >> vec4<u32>(4u * (quarter >> 1u)))
        & vec4<u32>(0x0F0F0F0Fu);
    let high = ((held.high >> vec4<u32>(2u * quarter)) & vec4<u32>(0x03030303u)) << vec4<u32>(4u);
    return centred16(low | high, held.d[quarter], 32.0);
}
