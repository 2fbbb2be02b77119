// Weight groups of the matmul tiles for Q4_K weights: a group's two 16-byte spans (the block's head, its quant
// bytes; both 16-byte aligned, as blocks of 144 bytes and rows of whole blocks are) as one vec4<u32> load each.
// Through quant/bytes.wgsl's u32 words they are eight 4-byte loads, and each of a tile's dequantising threads
// reads a row of its own, so every warp-wide load touches 32 cache lines: 4x the L1 transactions of these two.
// The tiles fetch a chunk ahead and hold the loads in registers meanwhile: held as these 8 words, not the 16
// values they decode to (dequantised when stored, after the chunk's multiply-adds).
//
// The weight binding again, as vec4<u32>: WGSL lets two declarations share a binding where an entry point uses
// only one of them (this kernel never reads matmul.wgsl's u32 `weight`).
@group(0) @binding(1) var<storage, read> weight_vec4: array<vec4<u32>>;

struct GroupLoad {
    head: vec4<u32>,
    qs: vec4<u32>,
}

// The loads of the 16-value group gi of the row at byte row_base: its quant bytes, and its block's head where
// new_block says the one held (from the row's previous group) is another block's. A block's 16 groups are 16
// chunks of a 16-value tile, so the head is loaded once a block rather than once a group.
fn group_fetch(row_base: u32, gi: u32, held: GroupLoad, new_block: bool) -> GroupLoad {
    let block = (row_base + (gi / GROUPS_PER_BLOCK) * BLOCK_BYTES) / 16u;
    var head = held.head;
    if (new_block) {
        head = weight_vec4[block];
    }
    return GroupLoad(head, weight_vec4[block + q4_k_qs_byte(gi % GROUPS_PER_BLOCK) / 16u]);
}

// The 16 values of group gi from its loads.
fn group_values(l: GroupLoad, gi: u32) -> mat4x4<f32> {
    return q4_k_group16(l.head, l.qs, gi % GROUPS_PER_BLOCK);
}
