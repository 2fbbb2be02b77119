// residual_norm: Gemma's post-norm residual add and the next pre-norm in one pass per token row:
//   x[t] += y[t] / rms(y[t]) * w_post        (rms(v) = sqrt(mean(v^2) + EPS))
//   h[t]  = x[t] / rms(x[t]) * w_next
// what rms_norm.wgsl with ACCUMULATE followed by rms_norm.wgsl compute, its sums of squares in another order.
// GATHER: only the rows that reach the output head (before it): h[r] comes from token row
// out_rows[r] for r < step.n_out (the last token of each sequence in the step); those x rows are
// updated and the others left stale, so use it only where x is not read again. Without GATHER,
// out_rows is bound but not read.
// Work split: one workgroup per row, each invocation holding one or two quads of it in registers
// (common/residual_norm_row.wgsl); the two sums of squares go through common/row_sum_${REDUCE}.wgsl
// (REDUCE: "subgroup" or "workgroup").
#include "common/step.wgsl"
#include "common/row_sum_${REDUCE}.wgsl"

override D: u32 = 640u;          // values per row (model width)
override EPS: f32 = 1e-6;        // added to the mean squares
override GATHER: bool = false;

override WG: u32 = 160u;         // invocations per row (a power of two for the workgroup reduction)
override QUADS: u32 = 1u;        // quads of the row per invocation: 1, or 2 where D / 4 > WG

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> y: array<vec4<f32>>;       // [T_MAX, D] block output, or its SPLIT parts
@group(0) @binding(2) var<storage, read> w_post: array<vec4<f32>>;  // [D] its post-norm weight
@group(0) @binding(3) var<storage, read_write> x: array<vec4<f32>>; // [T_MAX, D] residual stream
@group(0) @binding(4) var<storage, read> w_next: array<vec4<f32>>;  // [D] the next pre-norm weight
@group(0) @binding(5) var<storage, read_write> h: array<vec4<f32>>; // [T_MAX, D], or [R_MAX, D] when GATHER
@group(0) @binding(6) var<storage, read> out_rows: array<u32>;      // [R_MAX] token rows of the output head

// Gemma 3's blocks have no output scale.
fn block_scale() -> f32 {
    return 1.0;
}

// The row's work, written once for this kernel and residual_scale_norm.wgsl.
#include "common/residual_norm_row.wgsl"

fn store_h(row: u32, q: u32, v: vec4<f32>) {
    h[row * ROW_QUADS + q] = v;
}

fn row_main(row: u32, lid: u32) {
    residual_norm_row(row, lid);
}
