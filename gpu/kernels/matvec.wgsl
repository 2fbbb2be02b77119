// matvec: y[t, ROW_START + r] = sum_k W[r, k] * x[t, k] for the rows r of one weight shard and the
// step's first min(n_tokens, T_MAX) tokens, T_MAX a few (decode). W is read as GGUF stores it
// (quant/${WEIGHT_TYPE}.wgsl decodes 16 values at a time); x and y are f32 rows.
//
// Work split: a workgroup computes ROWS consecutive rows with TPR threads per row; the thread in
// lane l of a row takes the row's 16-value groups l, l + TPR, ..., so adjacent threads read
// adjacent bytes and consecutive rows continue where the previous ended. Each thread keeps one f32
// sum per token in registers; the TPR sums of a row are added once at the end by the variant's
// entry point, matvec/${ENTRY}.wgsl: reduce_workgroup (workgroup memory), reduce_subgroup
// (subgroup shuffles), or whole_rows (software adapters: TPR = 1, four rows per thread).
#include "common/step.wgsl"
#include "quant/bytes.wgsl"
#include "quant/${WEIGHT_TYPE}.wgsl"
#include "matvec/${ENTRY}.wgsl"

override K: u32 = 256u;        // values per weight row, a multiple of BLOCK_VALUES
override N_ROWS: u32 = 1u;     // rows in this shard
override ROW_START: u32 = 0u;  // y column of the shard's first row
override Y_STRIDE: u32 = 1u;   // values per y row (all rows of the weight)
override T_MAX: u32 = 1u;      // rows of x and y: the program's tokens per step
override TPR: u32 = 32u;       // threads per row, a power of two
override ROWS: u32 = 8u;       // rows per workgroup

const WG: u32 = TPR * ROWS;
const ROW_BYTES: u32 = K / BLOCK_VALUES * BLOCK_BYTES;
const GROUPS_PER_BLOCK: u32 = BLOCK_VALUES / GROUP_VALUES;
const GROUPS_PER_ROW: u32 = K / GROUP_VALUES;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> weight: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;   // [T_MAX, K]
@group(0) @binding(3) var<storage, read_write> y: array<f32>;   // [T_MAX, Y_STRIDE]

// Tokens of this step (x rows past it may hold anything).
fn n_tokens() -> u32 {
    return min(step.n_tokens, T_MAX);
}

// This thread's share of row first_row + slot: the dot products of its groups with each token.
fn row_partial(first_row: u32, slot: u32, lane: u32) -> array<f32, T_MAX> {
    var acc: array<f32, T_MAX>;
    let row = first_row + slot;
    let n = n_tokens();
    if (row < N_ROWS) {
        let row_base = row * ROW_BYTES;
        for (var gi = lane; gi < GROUPS_PER_ROW; gi += TPR) {
            let w = dequant16(row_base + (gi / GROUPS_PER_BLOCK) * BLOCK_BYTES, gi % GROUPS_PER_BLOCK);
            for (var t = 0u; t < T_MAX; t++) {
                if (t < n) {
                    let xi = (t * K + gi * GROUP_VALUES) / 4u;
                    acc[t] += dot(w[0], x[xi]) + dot(w[1], x[xi + 1u]) + dot(w[2], x[xi + 2u])
                        + dot(w[3], x[xi + 3u]);
                }
            }
        }
    }
    return acc;
}

// Write the sum of row first_row + slot for token t.
fn store(first_row: u32, slot: u32, t: u32, total: f32) {
    if (first_row + slot < N_ROWS && t < n_tokens()) {
        y[t * Y_STRIDE + ROW_START + first_row + slot] = total;
    }
}
