// matvec_q4_k_q6_k: one matvec over two matrices of the same input, a Q4_K one's N_ROWS_A rows then a Q6_K
// one's N_ROWS - N_ROWS_A: y[t, ROW_START + r] = sum_k A[r, k] x[t, k] for r < N_ROWS_A, else
// B[r - N_ROWS_A, k] x[t, k], for the step's first min(n_tokens, T_MAX) tokens (no GLU, no PAIRS).
//
// Why: llama.cpp's Q4_K_M files give Gemma 3 4B a Q4_K q and k beside a Q6_K v in half the layers, and a decode
// step is a chain of small dependent dispatches; as two they cost 21.9 us on an H200 against 12.6 for one Q4_K
// q|k|v of the same rows (both on a normalised input, which each workgroup makes for itself). Each workgroup
// takes rows of one matrix (N_ROWS_A is a multiple of the workgroup's ROWS) through the row work of
// matvec_q4_k.wgsl (matvec/q4_k_rows.wgsl) or matvec_q6_k.wgsl (matvec/q6_k_rows.wgsl); entry points and inputs
// as theirs.
#include "matvec/constants.wgsl"
#include "matmul/glu.wgsl"
#include "matvec/q4_k_unit_scales.wgsl"
#include "matvec/q6_k_unit.wgsl"
#include "matvec/${ENTRY}.wgsl"
#include "matvec/x_${X_SOURCE}.wgsl"

override N_ROWS_A: u32 = 0u;   // rows of the Q4_K matrix: y columns [0, N_ROWS_A); the Q6_K's follow
override Q6_BINDING: u32 = 8u; // the Q6_K matrix's binding: after the input's (4 for a plain input, 8 normalised)

@group(0) @binding(1) var<storage, read> q4_weight: array<vec4<u32>>;  // the Q4_K matrix (rows from FIRST_ROW)
@group(0) @binding(Q6_BINDING) var<storage, read> q6_weight: array<u32>;  // the Q6_K matrix, one shard

#include "matvec/q4_k_rows.wgsl"
#include "matvec/q6_k_rows.wgsl"

// Called by the entry point before prepare_x: a Q4_K row's first unit (the Q6_K rows load where they use).
fn prefetch_row(first_row: u32, slot: u32, lane: u32) {
    if (first_row + slot < N_ROWS_A) {
        q4_prefetch(vec2<u32>((FIRST_ROW + first_row + slot) * Q4_ROW_WORDS4, 0u), lane);
    }
}

// This thread's share of row first_row + slot, of whichever matrix holds it (uniform across the workgroup).
fn row_partial(first_row: u32, slot: u32, lane: u32) -> array<f32, OUTS> {
    let row = first_row + slot;
    if (row >= N_ROWS) {
        return array<f32, OUTS>();
    }
    if (first_row < N_ROWS_A) {
        return q4_row_partial(vec2<u32>((FIRST_ROW + row) * Q4_ROW_WORDS4, 0u), lane);
    }
    return q6_row_partial(vec2<u32>((row - N_ROWS_A) * Q6_ROW_BYTES, 0u), lane);
}

#include "matvec/store_${STORE}.wgsl"
