// Where a kernel reads q, k and v: columns of projection outputs. Row t of q starts at t * Q_STRIDE + Q_OFFSET
// (likewise k, v), so a fused q|k|v projection (one matrix product for all three) is bound three times, and
// separate projections each at offset 0; gpu/ops/transformer.py's _qkv_columns sets these.

override Q_STRIDE: u32 = 1024u;  // values per row of the q source
override Q_OFFSET: u32 = 0u;     // q's first column in it
override K_STRIDE: u32 = 256u;
override K_OFFSET: u32 = 0u;
override V_STRIDE: u32 = 256u;
override V_OFFSET: u32 = 0u;
