// matmul: y[t, ROW_START + r] = sum_k W[FIRST_ROW + r, k] * x[t, k] for N_ROWS rows of one weight
// shard and the step's first min(n_tokens, T_MAX) tokens (prefill). W is read as GGUF stores it
// (quant/${WEIGHT_TYPE}.wgsl decodes 16 values at a time); x and y are f32 rows; sums are f32.
//
// GLU = 1 (the fused gate-up linear): the shard holds 2 N_ROWS rows, gate rows then up rows, and
// y[t, ROW_START + r] = gelu_tanh(g) * u with g, u the sums of gate row r and up row N_ROWS + r;
// a workgroup computes matching gate and up rows and combines them before its stores.
//
// Entry points, matmul/${ENTRY}.wgsl: tiles (GPUs: register tiles fed through workgroup memory in
// f32 or f16, k optionally split over workgroups), tiles_i8 (GPUs: the same tiles in 8-bit integers,
// dot4I8Packed, from an input quantised by kernels/quantize_q8.wgsl) and whole_rows (software
// adapters: 16 rows x 8 tokens per thread straight from the buffers). Each header says how it splits
// the work.
#include "common/step.wgsl"
#include "quant/bytes.wgsl"
#include "quant/${WEIGHT_TYPE}.wgsl"
#include "matmul/glu.wgsl"
#include "matmul/${ENTRY}.wgsl"

override K: u32 = 256u;        // values per weight row, a multiple of BLOCK_VALUES
override N_ROWS: u32 = 1u;     // y columns computed: rows of W (with GLU, gate rows)
override FIRST_ROW: u32 = 0u;  // the shard's row where this dispatch starts
override ROW_START: u32 = 0u;  // y column of the dispatch's first row
override Y_STRIDE: u32 = 1u;   // values per y row
override T_MAX: u32 = 64u;     // rows of x and y: the program's tokens per step
override GLU: u32 = 0u;        // 1: gelu_tanh(gate) * up, up row r at N_ROWS + r

const ROW_BYTES: u32 = K / BLOCK_VALUES * BLOCK_BYTES;
const GROUPS_PER_BLOCK: u32 = BLOCK_VALUES / GROUP_VALUES;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> weight: array<u32>;
// binding 2: the input, declared by the entry point (f32 rows, or tiles_i8's int8 rows, its scales at binding 4)
@group(0) @binding(3) var<storage, read_write> y: array<f32>;   // [T_MAX, Y_STRIDE]

// Tokens of this step (x rows past it may hold anything).
fn n_tokens() -> u32 {
    return min(step.n_tokens, T_MAX);
}

// Byte offset of row r of the dispatch (with GLU, r in [N_ROWS, 2 N_ROWS) are the up rows).
fn row_byte(r: u32) -> u32 {
    return (FIRST_ROW + r) * ROW_BYTES;
}

// y[t, r] = v for token t < n and column r < N_ROWS.
fn store(t: u32, r: u32, n: u32, v: f32) {
    if (t < n && r < N_ROWS) {
        y[t * Y_STRIDE + ROW_START + r] = v;
    }
}
