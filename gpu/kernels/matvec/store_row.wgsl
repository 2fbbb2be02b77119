// The matvec kernels' last step (STORE = "row"): row first_row + slot's totals (with GLU, gelu_tanh(gate) * up;
// with PAIRS, row first_row + slot + ROWS's too) written to y for the step's tokens. Needs the kernel's N_ROWS,
// ROWS, T_MAX, OUTS, GLU, PAIRS, Y_STRIDE, ROW_START and n_tokens. The other store: matvec/store_q8.wgsl.

@group(0) @binding(3) var<storage, read_write> y: array<f32>;   // [T_MAX, Y_STRIDE]

fn store_row(first_row: u32, slot: u32, totals: array<f32, OUTS>) {
    let row = first_row + slot;
    if (row >= N_ROWS) {
        return;
    }
    for (var t = 0u; t < n_tokens(); t++) {
        var v = totals[t];
        if (GLU == 1u) {
            v = gelu_glu(v, totals[min(T_MAX + t, OUTS - 1u)]);
        }
        y[t * Y_STRIDE + ROW_START + row] = v;
        if (PAIRS == 1u && row + ROWS < N_ROWS) {
            y[t * Y_STRIDE + ROW_START + row + ROWS] = totals[min(T_MAX + t, OUTS - 1u)];
        }
    }
}

// Called by the entry point from uniform control flow after every store_row.
fn finish_rows(first_row: u32, tid: u32) {}
