// Invocations that sum a head row's squares, each every NORM_LANES-th value from its own index, before
// their sums are added (common/row_sum_workgroup.wgsl's or row_sum_subgroup.wgsl's order):
// qk_norm_rope_store's workgroup size, which decode attention's prologue follows to get the same sums
// (head_sums of attention/decode_workgroup.wgsl and decode_subgroup.wgsl).
const NORM_LANES: u32 = 64u;
