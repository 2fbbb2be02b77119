// matvec: y[t, ROW_START + r] = sum_k W[FIRST_ROW + r, k] * x[t, k] for N_ROWS rows of one weight
// shard and the step's first min(n_tokens, T_MAX) tokens, T_MAX a few (decode). W is read as GGUF
// stores it (quant/${WEIGHT_TYPE}.wgsl decodes 16 values at a time); x and y are f32 rows.
//
// GLU = 1 (the fused gate-up linear): the shard holds 2 N_ROWS rows, gate rows then up rows, and
// y[t, ROW_START + r] = gelu_tanh(g) * u with g, u the sums of gate row r and up row N_ROWS + r.
// The threads of row r compute both, reading x once for the two, and combine them after the sums.
//
// Work split: a workgroup computes ROWS consecutive rows with TPR threads per row; the thread in
// lane l of a row takes the row's 16-value groups l, l + TPR, ..., so adjacent threads read
// adjacent bytes and consecutive rows continue where the previous ended (steps of several tokens
// interleave the rows instead, INTERLEAVE threads of one lane index reading the same x: see
// matvec/constants.wgsl thread_slot). Each thread keeps one f32
// sum per token (two with GLU) in registers; the TPR sums of a row are added once at the end by the
// variant's entry point, matvec/${ENTRY}.wgsl: reduce_workgroup (workgroup memory), reduce_subgroup
// (subgroup shuffles), or whole_rows (software adapters: TPR = 1, four rows per thread).
#include "matvec/constants.wgsl"
#include "quant/bytes.wgsl"
#include "quant/${WEIGHT_TYPE}.wgsl"
#include "matmul/glu.wgsl"
#include "matvec/${ENTRY}.wgsl"
#include "matvec/x_${X_SOURCE}.wgsl"

const ROW_BYTES: u32 = K / BLOCK_VALUES * BLOCK_BYTES;
const UP_BYTES: u32 = N_ROWS * ROW_BYTES * GLU;  // from a gate row to its up row
const GROUPS_PER_BLOCK: u32 = BLOCK_VALUES / GROUP_VALUES;
const GROUPS_PER_ROW: u32 = K / GROUP_VALUES;

@group(0) @binding(1) var<storage, read> weight: array<u32>;

// The values of the 16-value group gi of the row at byte row_base.
fn group16(row_base: u32, gi: u32) -> mat4x4<f32> {
    return dequant16(row_base + (gi / GROUPS_PER_BLOCK) * BLOCK_BYTES, gi % GROUPS_PER_BLOCK);
}

// sum of the 16 products of a dequantised group with four vec4 of x
fn dot16(w: mat4x4<f32>, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>) -> f32 {
    return dot(w[0], x0) + dot(w[1], x1) + dot(w[2], x2) + dot(w[3], x3);
}

// Called by the entry point before prepare_x; this kernel loads its weights where it uses them.
fn prefetch_row(first_row: u32, slot: u32, lane: u32) {}

// acc + the products of group gi's values w (u: its up row's, GLU) with token t (a literal: see
// matvec/constants.wgsl) where computes_token.
fn group_token(acc: array<f32, OUTS>, t: u32, n: u32, gi: u32, w: mat4x4<f32>, u: mat4x4<f32>) -> array<f32, OUTS> {
    var sums = acc;
    if (computes_token(t, n)) {
        let xi = (t * K + gi * GROUP_VALUES) / 4u;
        let x0 = x_vec(xi);
        let x1 = x_vec(xi + 1u);
        let x2 = x_vec(xi + 2u);
        let x3 = x_vec(xi + 3u);
        sums[t] += dot16(w, x0, x1, x2, x3);
        if (GLU == 1u) {
            sums[min(T_MAX + t, OUTS - 1u)] += dot16(u, x0, x1, x2, x3);
        }
    }
    return sums;
}

// This thread's share of row first_row + slot: the dot products of its groups with each token
// ([t]; with GLU, the up row's at [T_MAX + t]).
fn row_partial(first_row: u32, slot: u32, lane: u32) -> array<f32, OUTS> {
    var acc: array<f32, OUTS>;
    let row = first_row + slot;
    let n = n_tokens();
    if (row < N_ROWS) {
        let row_base = (FIRST_ROW + row) * ROW_BYTES;
        for (var gi = lane; gi < GROUPS_PER_ROW; gi += TPR) {
            let w = group16(row_base, gi);
            var u = mat4x4<f32>();
            if (GLU == 1u) {
                u = group16(row_base + UP_BYTES, gi);
            }
            acc = group_token(acc, 0u, n, gi, w, u);
            acc = group_token(acc, 1u, n, gi, w, u);
            acc = group_token(acc, 2u, n, gi, w, u);
            acc = group_token(acc, 3u, n, gi, w, u);
            acc = group_token(acc, 4u, n, gi, w, u);
            acc = group_token(acc, 5u, n, gi, w, u);
            acc = group_token(acc, 6u, n, gi, w, u);
            acc = group_token(acc, 7u, n, gi, w, u);
        }
    }
    return acc;
}

#include "matvec/store_${STORE}.wgsl"
