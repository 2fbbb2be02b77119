// The matvec kernels' last step (STORE = "row"): row first_row + slot's totals (with GLU, gelu_tanh(gate) * up;
// with PAIRS, row first_row + slot + ROWS's too) written to y for the step's tokens. Needs the kernel's N_ROWS,
// ROWS, T_MAX, OUTS, GLU, PAIRS, Y_STRIDE, ROW_START and n_tokens. The other store: matvec/store_q8.wgsl.

#include "matvec/partials.wgsl"

@group(0) @binding(3) var<storage, read_write> y: array<f32>;   // [T_MAX, Y_STRIDE]

// Row first_row + slot's sums, from the thread tid's (matvec/partials.wgsl row_total).
fn store_row(first_row: u32, slot: u32, tid: u32, stride: u32) {
    let row = first_row + slot;
    if (row >= N_ROWS) {
        return;
    }
    for (var t = 0u; t < n_tokens(); t++) {
        var v = row_total(t, tid, stride);
        if (GLU == 1u) {
            v = glu(v, row_total(T_MAX + t, tid, stride));
        }
        y[t * Y_STRIDE + ROW_START + row] = v;
        if (PAIRS == 1u && row + ROWS < N_ROWS) {
            y[t * Y_STRIDE + ROW_START + row + ROWS] = row_total(T_MAX + t, tid, stride);
        }
    }
}

// Called by the entry point from uniform control flow after every store_row.
fn finish_rows(first_row: u32, tid: u32) {}
