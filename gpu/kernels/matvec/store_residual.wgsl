// The matvec kernels' last step where the product is a block's output added to the residual stream (STORE =
// "residual"), with the next norm's input made on the way:
//   r[t, row] = residual[t, row] + sum        (in place: each row is read and written by its own thread)
//   normed[t, row] = r[t, row] * w_next[row]  (read by the next matvecs as matvec/x_prenormed.wgsl)
//   square_sums[t, g] = the sum of r[t, row]^2 over workgroup g's rows
// so that no residual_norm dispatch comes between this matvec and the next. No GLU; with PAIRS, row
// first_row + slot + ROWS's too. The rows are all of the residual's: ROW_START 0, Y_STRIDE N_ROWS (the host
// checks). Needs the kernel's N_ROWS, ROWS, ROW_SPAN, T_MAX, PAIRS, Y_STRIDE and n_tokens.

#include "matvec/partials.wgsl"

@group(0) @binding(3) var<storage, read_write> residual: array<f32>;     // [T_MAX, N_ROWS]
@group(0) @binding(4) var<storage, read> w_next: array<f32>;             // [N_ROWS]
@group(0) @binding(5) var<storage, read_write> normed: array<f32>;       // [T_MAX, N_ROWS]
@group(0) @binding(6) var<storage, read_write> square_sums: array<f32>;  // [T_MAX, GROUPS]

const GROUPS: u32 = (N_ROWS + ROW_SPAN - 1u) / ROW_SPAN;  // workgroups with rows: x_prenormed's PARTS

var<workgroup> row_squares: array<f32, T_MAX * ROW_SPAN>;  // [token, row of the workgroup]

// r^2 of row `row` and token t after adding v to it (0 for a row past N_ROWS).
fn add_to_residual(t: u32, row: u32, v: f32) -> f32 {
    if (row >= N_ROWS) {
        return 0.0;
    }
    let at = t * Y_STRIDE + row;
    let r = residual[at] + v;
    residual[at] = r;
    normed[at] = r * w_next[row];
    return r * r;
}

// Row first_row + slot's sums, from the thread tid's (matvec/partials.wgsl row_total).
fn store_row(first_row: u32, slot: u32, tid: u32, stride: u32) {
    let row = first_row + slot;
    for (var t = 0u; t < n_tokens(); t++) {
        row_squares[t * ROW_SPAN + slot] = add_to_residual(t, row, row_total(t, tid, stride));
        if (PAIRS == 1u) {
            row_squares[t * ROW_SPAN + ROWS + slot] = add_to_residual(t, row + ROWS, row_total(T_MAX + t, tid, stride));
        }
    }
}

// Called by the entry point from uniform control flow after every store_row: the workgroup's sums of squares.
fn finish_rows(first_row: u32, tid: u32) {
    workgroupBarrier();
    if (tid < n_tokens()) {
        var s = 0.0;
        for (var i = 0u; i < ROW_SPAN; i++) {
            s += row_squares[tid * ROW_SPAN + i];
        }
        square_sums[tid * GROUPS + first_row / ROW_SPAN] = s;
    }
}
