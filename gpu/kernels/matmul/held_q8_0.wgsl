// Held loads of matmul/whole_rows.wgsl for Q8_0: a block's 34 bytes as nine words, for its two groups, where each
// group read alone loads six (the scale and its 16 quant bytes at unaligned offsets).

const HELD_GROUPS: u32 = 2u;

struct Held {
    d: f32,
    lo: vec4<u32>,  // quant bytes 0..15: group 0
    hi: vec4<u32>,  // 16..31: group 1
}

fn held_group_index(h: u32, g: u32) -> u32 {
    return h * HELD_GROUPS + g;
}

fn held_fetch(row_base: u32, h: u32) -> Held {
    let base = row_base + h * BLOCK_BYTES;  // even: blocks are 34 bytes
    let i = base >> 2u;
    let w = array<u32, 9>(weight[i], weight[i + 1u], weight[i + 2u], weight[i + 3u], weight[i + 4u],
                          weight[i + 5u], weight[i + 6u], weight[i + 7u], weight[i + 8u]);
    if ((base & 2u) == 0u) {  // d in w0's low half, the quant bytes from its high half on
        return Held(unpack2x16float(w[0] & 0xFFFFu).x,
                    vec4<u32>((w[0] >> 16u) | (w[1] << 16u), (w[1] >> 16u) | (w[2] << 16u),
                              (w[2] >> 16u) | (w[3] << 16u), (w[3] >> 16u) | (w[4] << 16u)),
                    vec4<u32>((w[4] >> 16u) | (w[5] << 16u), (w[5] >> 16u) | (w[6] << 16u),
                              (w[6] >> 16u) | (w[7] << 16u), (w[7] >> 16u) | (w[8] << 16u)));
    }
    return Held(unpack2x16float(w[0] >> 16u).x, vec4<u32>(w[1], w[2], w[3], w[4]),
                vec4<u32>(w[5], w[6], w[7], w[8]));
}

fn held_group16(held: Held, row_base: u32, gi: u32) -> mat4x4<f32> {
    let q = select(held.lo, held.hi, gi % 2u == 1u);
    let d = held.d;
    return mat4x4<f32>(i8x4_to_f32(q.x) * d, i8x4_to_f32(q.y) * d, i8x4_to_f32(q.z) * d, i8x4_to_f32(q.w) * d);
}
