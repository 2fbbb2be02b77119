// The row table and the paged KV cache, shared by the kernels that need a token's place.
//
// rows[t] = (position, slot, token source, later keys) for token row t of a step:
//   position      the token's position in its sequence (RoPE angle, causal limit)
//   slot          the sequence's row in the page table
//   token source  0: the token id is ids[t] (prompts); 1: it is slot_tokens[slot], the token the
//                 GPU sampled for that sequence in the previous step (decode needs no host round trip);
//                 2: the row is an image's soft token, its input embedding row t of the step's images
//   later keys    keys past its position the row also attends to: 0 (causal) but in an image's rows,
//                 which see the whole image (bidirectional; Gemma 3, and Gemma 4's larger kinds on sliding
//                 layers: LATER_KEYS false elsewhere), so the image's rows lie in one step
// A sequence's KV positions live in pages of PAGE_TOKENS positions scattered over one pool per
// layer: page_table[slot * MAX_PAGES + position / PAGE_TOKENS] is the pool page holding a position.
// The including kernel declares `rows: array<vec4<u32>>` and `page_table: array<u32>` bindings
// and the overrides PAGE_TOKENS and MAX_PAGES.

// The pool row (position in the pool) of a sequence position.
fn pool_row(slot: u32, position: u32) -> u32 {
    return page_table[slot * MAX_PAGES + position / PAGE_TOKENS] * PAGE_TOKENS + position % PAGE_TOKENS;
}
