// Weight groups of the matmul kernels for every weight type: the decoder's dequant16, on the u32 words of the
// weight binding (quant/bytes.wgsl). The tiles' group_fetch dequantises as it fetches (the loads differ by type),
// so they hold the values.

// The values of the 16-value group gi of the row at byte row_base.
fn group16(row_base: u32, gi: u32) -> mat4x4<f32> {
    return dequant16(row_base + (gi / GROUPS_PER_BLOCK) * BLOCK_BYTES, gi % GROUPS_PER_BLOCK);
}

alias GroupLoad = mat4x4<f32>;

// held and new_block serve the Q4_K file (matmul/group16_q4_k_vec4.wgsl), which keeps a block's head between groups.
fn group_fetch(row_base: u32, gi: u32, held: GroupLoad, new_block: bool) -> GroupLoad {
    return group16(row_base, gi);
}

fn group_values(l: GroupLoad, gi: u32) -> mat4x4<f32> {
    return l;
}
