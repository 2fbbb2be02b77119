// Held loads of matmul/whole_rows.wgsl for the weight types whose groups share no loads: each 16-value group is
// read by itself (matmul/group16_words.wgsl), nothing is held between groups. whole_rows.wgsl walks such groups in
// a loop of its own (HELD_GROUPS 1); the functions here complete the interface.
//
// The interface every matmul/held_<type>.wgsl gives whole_rows.wgsl:
//     const HELD_GROUPS: u32                 16-value groups that one held load serves
//     struct Held                            what a row's held load keeps in registers
//     fn held_group_index(h, g) -> u32       the 16-value group (along the row) that is group g of held load h
//     fn held_fetch(row_base, h) -> Held     the loads that held load h's groups of the row at byte row_base share
//     fn held_group16(held, row_base, gi) -> mat4x4<f32>   the values of group gi (one of those), loading the rest

const HELD_GROUPS: u32 = 1u;

struct Held {
    unused: u32,
}

fn held_group_index(h: u32, g: u32) -> u32 {
    return h * HELD_GROUPS + g;
}

fn held_fetch(row_base: u32, h: u32) -> Held {
    return Held(0u);
}

fn held_group16(held: Held, row_base: u32, gi: u32) -> mat4x4<f32> {
    return group16(row_base, gi);
}
