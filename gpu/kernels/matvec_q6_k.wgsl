// matvec_q6_k: matvec.wgsl for Q6_K weights, a unit of 32 values per thread step: y[t, ROW_START + r] =
// sum_k W[FIRST_ROW + r, k] * x[t, k] for N_ROWS rows of one shard and the step's first
// min(n_tokens, T_MAX) tokens (GLU as in matvec.wgsl: gate rows, then up rows N_ROWS further).
//
// Why a kernel of its own: the generic decoder (quant/q6_k.wgsl) makes 16 values from two unaligned
// 16-byte loads (five words each), a scale byte and d, reading each low-bits byte twice and each
// high-bits byte four times. Here a unit is one half h of a block and 8 consecutive l (see q6_k.wgsl
// for the layout): 8 bytes of ql at 64h + l, 8 at 64h + 32 + l and 8 of qh at 32h + l give the 32
// values 128h + 32a + l (a = 0..3) with four scales; every byte is read once (matvec/q6_k_unit.wgsl).
// Each quarter a is summed as d*sc_a * (sum q x - 32 sum x).
//
// Work split: as matvec_q4_k.wgsl: TPR threads per row, ROWS rows per workgroup, lane l takes units
// l, l + TPR, ... of its row (unit u: block u / 8, half (u / 4) % 2, l = 8 (u % 4)). With PAIRS (long rows and
// output heads: row_pairs_shape in gpu/ops/matmul_plan.py) a thread also takes the row ROWS further on the same loads
// of x, which cost 8 vec4 a unit against the weight's 26 bytes.
#include "matvec/constants.wgsl"
#include "matmul/glu.wgsl"
#include "matvec/q6_k_unit.wgsl"
#include "matvec/${ENTRY}.wgsl"
#include "matvec/x_${X_SOURCE}.wgsl"

@group(0) @binding(1) var<storage, read> q6_weight: array<u32>;

#include "matvec/q6_k_rows.wgsl"

// Called by the entry point before prepare_x; this kernel loads its weights where it uses them (loading them
// a unit ahead, as matvec_q4_k.wgsl does, took the 4B's v 7.3 -> 6.2 us and its head 327 -> 314, but its down
// 18.6 -> 20.5 on an H100; the 4B's decode 281 tok/s without, 280 with).
fn prefetch_row(first_row: u32, slot: u32, lane: u32) {}

// This thread's share of row first_row + slot (matvec/q6_k_rows.wgsl), with its second row: GLU's up row, or
// PAIRS' row ROWS further (past the shard it reads the last row again; store_row drops its sums).
fn row_partial(first_row: u32, slot: u32, lane: u32) -> array<f32, OUTS> {
    let row = first_row + slot;
    if (row >= N_ROWS) {
        return array<f32, OUTS>();
    }
    let row_base = (FIRST_ROW + row) * Q6_ROW_BYTES;
    let up_base = row_base + N_ROWS * Q6_ROW_BYTES;
    let pair_base = (FIRST_ROW + min(row + ROWS, N_ROWS - 1u)) * Q6_ROW_BYTES;
    return q6_row_partial(vec2<u32>(row_base, select(pair_base, up_base, GLU == 1u)), lane);
}

#include "matvec/store_${STORE}.wgsl"
