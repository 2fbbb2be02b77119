// residual_scale_norm: the end of a Gemma 4 block and the next pre-norm in one pass per token row:
//   x[t] = (x[t] + y[t] / rms(y[t]) * w_post) * scale[0]     (rms(v) = sqrt(mean(v^2) + EPS))
//   h[t] = x[t] / rms(x[t]) * w_next
// residual_norm.wgsl with the block's output scale (HF's layer_scalar, GGUF layer_output_scale): read from
// a one-value tensor, so every layer shares one pipeline. GATHER: only the rows that reach the output head,
// h[r] from token row out_rows[r] for r < step.n_out (x's other rows are left stale; use it after the last
// block only). Without GATHER, out_rows is bound but not read.
// Work split: one workgroup per row, each invocation holding one or two quads of it in registers
// (common/residual_norm_row.wgsl); sums of squares through common/row_sum_${REDUCE}.wgsl ("subgroup" or
// "workgroup").
#include "common/step.wgsl"
#include "common/row_sum_${REDUCE}.wgsl"

override D: u32 = 1536u;         // values per row (model width)
override EPS: f32 = 1e-6;        // added to the mean squares
override GATHER: bool = false;
override WG: u32 = 384u;         // invocations per row (a power of two for the workgroup reduction)
override QUADS: u32 = 1u;        // quads of the row per invocation: 1, or 2 where D / 4 > WG

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> y: array<vec4<f32>>;       // [T_MAX, D] block output, or its SPLIT parts
@group(0) @binding(2) var<storage, read> w_post: array<vec4<f32>>;  // [D] its post-norm weight
@group(0) @binding(3) var<storage, read_write> x: array<vec4<f32>>; // [T_MAX, D] residual stream
@group(0) @binding(4) var<storage, read> scale: array<f32>;         // [1] the block's output scale
@group(0) @binding(5) var<storage, read> w_next: array<vec4<f32>>;  // [D] the next pre-norm weight
@group(0) @binding(6) var<storage, read_write> h: array<vec4<f32>>; // [T_MAX, D], or [R_MAX, D] when GATHER
@group(0) @binding(7) var<storage, read> out_rows: array<u32>;      // [R_MAX] token rows of the output head

fn block_scale() -> f32 {
    return scale[0];
}

// The row's work, written once for this kernel and residual_norm.wgsl.
#include "common/residual_norm_row.wgsl"

fn store_h(row: u32, q: u32, v: vec4<f32>) {
    h[row * ROW_QUADS + q] = v;
}

fn row_main(row: u32, lid: u32) {
    residual_norm_row(row, lid);
}
