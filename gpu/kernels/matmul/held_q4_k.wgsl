// Held loads of matmul/whole_rows.wgsl for Q4_K: a block's 16-byte head (the scales) is loaded once for its 16
// groups, each group then loading only its 16 quant bytes (8 words a group read alone, 4 so).

const HELD_GROUPS: u32 = BLOCK_VALUES / GROUP_VALUES;

struct Held {
    head: vec4<u32>,
}

fn held_group_index(h: u32, g: u32) -> u32 {
    return h * HELD_GROUPS + g;
}

fn held_fetch(row_base: u32, h: u32) -> Held {
    return Held(load_16_aligned(row_base + h * BLOCK_BYTES));
}

fn held_group16(held: Held, row_base: u32, gi: u32) -> mat4x4<f32> {
    let g = gi % HELD_GROUPS;
    let qs = load_16_aligned(row_base + (gi / HELD_GROUPS) * BLOCK_BYTES + q4_k_qs_byte(g));
    return q4_k_group16(held.head, qs, g);
}
