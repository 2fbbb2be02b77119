// The row of residual_norm.wgsl, residual_scale_norm.wgsl and residual_norm_q8.wgsl, which their headers describe:
// one token row's residual add of the normed block output, x[t] = (x[t] + y[t] / rms(y[t]) * w_post) *
// block_scale(), then the next pre-norm h = x[t] / rms(x[t]) * w_next. The including kernel declares D, EPS, GATHER
// and WG, the bindings step, y, w_post, x, w_next and out_rows, includes common/row_sum_${REDUCE}.wgsl, and defines
// `fn block_scale() -> f32` (1.0 in residual_norm: multiplying by it is exact, so its sums stay rms_norm.wgsl's
// operations) and `fn store_h(i: u32, v: f32)`, which keeps value i of the [rows, D] output h.

fn residual_norm_row(row: u32, lid: u32) {
    var in_row = row;   // uniform across the workgroup
    if (GATHER) {
        if (row >= step.n_out) { return; }
        in_row = out_rows[row];
    } else if (row >= step.n_tokens) {
        return;
    }
    let base = in_row * D;
    var sum_y = 0.0;
    for (var i = lid; i < D; i += WG) {
        let v = y[base + i];
        sum_y += v * v;
    }
    let inv_y = inverseSqrt(row_sum(sum_y) / f32(D) + EPS);
    let s = block_scale();
    var sum_x = 0.0;
    for (var i = lid; i < D; i += WG) {
        let r = (x[base + i] + y[base + i] * inv_y * w_post[i]) * s;
        x[base + i] = r;
        sum_x += r * r;
    }
    let inv_x = inverseSqrt(row_sum(sum_x) / f32(D) + EPS);
    let dst = row * D;
    for (var i = lid; i < D; i += WG) {
        store_h(dst + i, x[base + i] * inv_x * w_next[i]);
    }
}
