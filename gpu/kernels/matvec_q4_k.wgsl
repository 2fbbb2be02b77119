// matvec_q4_k: matvec.wgsl for Q4_K weights, reading them in 16-byte loads: y[t, ROW_START + r] =
// sum_k W[FIRST_ROW + r, k] * x[t, k] for N_ROWS rows of one shard and the step's first
// min(n_tokens, T_MAX) tokens (GLU as in matvec.wgsl: gate rows, then up rows N_ROWS further).
//
// Why a kernel of its own: a Q4_K block (144 bytes, see quant/q4_k.wgsl) is 16-byte aligned, and
// its 16-byte header (d, dmin, the twelve scale bytes) and each 16 bytes of its quants are one
// vec4<u32> load. The generic kernel decodes 16 values per call and so loads each quant byte twice
// (low and high nibbles serve two sub-blocks) plus five header words per 16 values; here a unit
// of work is one 16-byte quant load: its low nibbles are 16 values of sub-block 2j, its high
// nibbles 16 values of sub-block 2j + 1 (j = the block's 32-byte chunk), 32 products per two loads.
// The affine form is summed as d*sc * sum(q x) - dmin*m * sum(x), so each sub-block's scale is
// applied once per unit, not per value (f32 rounding differs from dequantise-then-dot by a few ulp
// of the row sum; tests compare with a tolerance).
//
// Work split: as matvec.wgsl, TPR threads per row, ROWS rows per workgroup; lane l of a row takes
// units l, l + TPR, ... (unit u: block u / 8, chunk (u % 8) / 2, half u % 2), so the 8 lanes of a
// block read its 128 quant bytes as one contiguous span. With PAIRS (long rows and output heads:
// row_pairs_shape in gpu/ops/matmul_plan.py) a thread also takes the row ROWS further on the same loads of x,
// 32 values of which cost 8 vec4 loads against the weight's one. Steps of several tokens take LANE_WORDS instead:
// a row's lanes along each block's quant words (matvec/q4_k_words.wgsl). Entry points:
// matvec/${ENTRY}.wgsl (reduce_subgroup or reduce_workgroup; software adapters use matvec.wgsl's
// whole_rows).
#include "matvec/constants.wgsl"
#include "matmul/glu.wgsl"
#include "matvec/q4_k_unit_scales.wgsl"
#include "matvec/${ENTRY}.wgsl"
#include "matvec/x_${X_SOURCE}.wgsl"

@group(0) @binding(1) var<storage, read> q4_weight: array<vec4<u32>>;

override LANE_WORDS: u32 = 0u;  // 1: a row's lanes along each block's quant words (matvec/q4_k_words.wgsl)

#include "matvec/q4_k_rows.wgsl"
#include "matvec/q4_k_words.wgsl"

// Word offsets of row first_row + slot and of its second row (GLU's up row, or PAIRS' row ROWS further; a pair
// row past the shard reads the last row again, store_row drops its sums).
fn row_bases(first_row: u32, slot: u32) -> vec2<u32> {
    let row = first_row + slot;
    let second_row = select(min(row + ROWS, N_ROWS - 1u), row + N_ROWS, GLU == 1u);
    return vec2<u32>((FIRST_ROW + row) * Q4_ROW_WORDS4, (FIRST_ROW + second_row) * Q4_ROW_WORDS4);
}

// Called by the entry point before prepare_x: this thread's first unit.
fn prefetch_row(first_row: u32, slot: u32, lane: u32) {
    if (first_row + slot < N_ROWS) {
        if (LANE_WORDS == 1u) {
            q4w_prefetch(row_bases(first_row, slot), lane);
        } else {
            q4_prefetch(row_bases(first_row, slot), lane);
        }
    }
}

// This thread's share of row first_row + slot (matvec/q4_k_rows.wgsl).
fn row_partial(first_row: u32, slot: u32, lane: u32) -> array<f32, OUTS> {
    if (first_row + slot >= N_ROWS) {
        return array<f32, OUTS>();
    }
    if (LANE_WORDS == 1u) {
        return q4w_row_partial(row_bases(first_row, slot), lane);
    }
    return q4_row_partial(row_bases(first_row, slot), lane);
}

#include "matvec/store_${STORE}.wgsl"
