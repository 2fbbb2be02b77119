// Held loads of matmul/whole_rows.wgsl for Q5_0: a block's 22 bytes as six words, decoded once for its two
// groups, where each group read alone loads eight (the scale, the high bits and its 16 quant bytes at unaligned
// offsets). lavapipe compiles every load a lane into a loop of scalar loads, so the loads bound the kernel.

const HELD_GROUPS: u32 = 2u;

struct Held {
    d: f32,
    qh: u32,         // bit i: the high bit of value i
    qs: vec4<u32>,   // value i < 16 in the low nibble of byte i, 16 + i in the high nibble
}

fn held_group_index(h: u32, g: u32) -> u32 {
    return h * HELD_GROUPS + g;
}

fn held_fetch(row_base: u32, h: u32) -> Held {
    let base = row_base + h * BLOCK_BYTES;  // even: blocks are 22 bytes
    let i = base >> 2u;
    let w = array<u32, 6>(weight[i], weight[i + 1u], weight[i + 2u], weight[i + 3u], weight[i + 4u], weight[i + 5u]);
    if ((base & 2u) == 0u) {  // d in w0's low half, qh across w0 and w1, qs from w1's high half on
        return Held(unpack2x16float(w[0] & 0xFFFFu).x, (w[0] >> 16u) | (w[1] << 16u),
                    vec4<u32>((w[1] >> 16u) | (w[2] << 16u), (w[2] >> 16u) | (w[3] << 16u),
                              (w[3] >> 16u) | (w[4] << 16u), (w[4] >> 16u) | (w[5] << 16u)));
    }
    return Held(unpack2x16float(w[0] >> 16u).x, w[1], vec4<u32>(w[2], w[3], w[4], w[5]));
}

fn held_group16(held: Held, row_base: u32, gi: u32) -> mat4x4<f32> {
    let g = gi % 2u;
    let low = (held.qs >> vec4<u32>(4u * g)) & vec4<u32>(0x0F0F0F0Fu);
    return centred16(low | high_bits16(held.qh >> (16u * g)), held.d, 16.0);
}
