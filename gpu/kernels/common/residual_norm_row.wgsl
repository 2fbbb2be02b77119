// The row of residual_norm.wgsl, residual_scale_norm.wgsl and residual_norm_q8.wgsl, which their headers describe:
// one token row's residual add of the normed block output, x[t] = (x[t] + y[t] / rms(y[t]) * w_post) *
// block_scale(), then the next pre-norm h = x[t] / rms(x[t]) * w_next. Without POST_NORM (networks whose blocks
// end in a plain residual add: Llama, Qwen, Mistral, Phi, Gemma 1) x[t] = (x[t] + y[t]) * block_scale(), and
// w_post is not read.
// Work split: invocation i of the row's workgroup holds its quads (4 values) i and, where QUADS = 2, i + WG in
// registers from the first load to the last store, so y and x are read once and x written once, every load
// issued before the first sum (the earlier three strided walks over the row, re-reading y and x, took a 4B row
// three memory round trips). Invocations past the row's D / 4 quads only join the sums.
// The block output y may be the k-split parts of its matmul (gpu/ops/matmul.py SplitSums: SPLIT > 1 parts of
// PART_ROWS rows each), added here in kernels/matmul_reduce.wgsl's order instead of by a dispatch of its own.
// The including kernel declares D (a multiple of 4), EPS, GATHER, WG and QUADS (1 or 2, WG * QUADS >= D / 4),
// the bindings step, y, w_post, x and w_next (vec4 arrays) and out_rows, includes common/row_sum_${REDUCE}.wgsl,
// and defines `fn block_scale() -> f32` (1.0 in residual_norm) and `fn store_h(row: u32, q: u32, v: vec4<f32>)`,
// which keeps quad q of output row `row` of h.

override SPLIT: u32 = 1u;       // parts of y (1: y itself)
override POST_NORM: bool = true; // y normalised and scaled by w_post before it is added
override PART_ROWS: u32 = 0u;   // rows of each part (SPLIT > 1)

const ROW_QUADS: u32 = D / 4u;

// Quad q of token row t of the block output: y's, or the sum of its parts in order s = 0, 1, ...
fn y_quad(t: u32, q: u32) -> vec4<f32> {
    var sum = y[t * ROW_QUADS + q];
    for (var s = 1u; s < SPLIT; s++) {
        sum += y[(s * PART_ROWS + t) * ROW_QUADS + q];
    }
    return sum;
}

fn residual_norm_row(row: u32, lid: u32) {
    var in_row = row;   // uniform across the workgroup
    if (GATHER) {
        if (row >= step.n_out) { return; }
        in_row = out_rows[row];
    } else if (row >= step.n_tokens) {
        return;
    }
    let base = in_row * ROW_QUADS;
    let q0 = lid;
    let q1 = lid + WG;
    let ok0 = q0 < ROW_QUADS;
    let ok1 = QUADS > 1u && q1 < ROW_QUADS;
    var y0 = vec4<f32>();
    var x0 = vec4<f32>();
    var wp0 = vec4<f32>();
    var wn0 = vec4<f32>();
    var y1 = vec4<f32>();
    var x1 = vec4<f32>();
    var wp1 = vec4<f32>();
    var wn1 = vec4<f32>();
    if (ok0) {
        y0 = y_quad(in_row, q0);
        x0 = x[base + q0];
        if (POST_NORM) { wp0 = w_post[q0]; }
        wn0 = w_next[q0];
    }
    if (ok1) {
        y1 = y_quad(in_row, q1);
        x1 = x[base + q1];
        if (POST_NORM) { wp1 = w_post[q1]; }
        wn1 = w_next[q1];
    }
    let s = block_scale();
    var r0 = (x0 + y0) * s;
    var r1 = (x1 + y1) * s;
    if (POST_NORM) {
        let inv_y = inverseSqrt(row_sum(dot(y0, y0) + dot(y1, y1)) / f32(D) + EPS);
        r0 = (x0 + y0 * inv_y * wp0) * s;
        r1 = (x1 + y1 * inv_y * wp1) * s;
    }
    if (ok0) {
        x[base + q0] = r0;
    }
    if (ok1) {
        x[base + q1] = r1;
    }
    let inv_x = inverseSqrt(row_sum(dot(r0, r0) + dot(r1, r1)) / f32(D) + EPS);
    if (ok0) {
        store_h(row, q0, r0 * inv_x * wn0);
    }
    if (ok1) {
        store_h(row, q1, r1 * inv_x * wn1);
    }
}
