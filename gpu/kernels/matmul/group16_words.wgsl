// group16 of the matmul kernel for every weight type: the decoder's dequant16, on the u32 words of the weight
// binding (quant/bytes.wgsl).

// The values of the 16-value group gi of the row at byte row_base.
fn group16(row_base: u32, gi: u32) -> mat4x4<f32> {
    return dequant16(row_base + (gi / GROUPS_PER_BLOCK) * BLOCK_BYTES, gi % GROUPS_PER_BLOCK);
}
