// rms_norm: y = x / sqrt(mean(x^2) + EPS) * w over rows of D values.
// A token's row may hold HEADS independent rows (QK-norm normalises each head of D values).
// Variants: ACCUMULATE adds the result into out (Gemma's post-norms feed the residual
// stream: x += norm(y) * w); LAST_ROW normalises only the step's last token into out row 0
// (the output head needs one row after prefill).
// Work split: one workgroup of 64 invocations per row; each sums a strided slice of the row,
// then a tree reduction in workgroup memory (common/row_sum_workgroup.wgsl).
#include "common/step.wgsl"
#include "common/row_sum_workgroup.wgsl"

override D: u32 = 640u;          // values per normalised row
override HEADS: u32 = 1u;        // normalised rows per token
override EPS: f32 = 1e-6;        // added to the mean square
override ACCUMULATE: bool = false;
override LAST_ROW: bool = false;

const WG: u32 = 64u;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> x: array<f32>;        // [T_MAX, HEADS * D]
@group(0) @binding(2) var<storage, read> w: array<f32>;        // [D]
@group(0) @binding(3) var<storage, read_write> out: array<f32>; // like x, or [1, HEADS * D] when LAST_ROW

fn row_main(row: u32, lid: u32) {
    var in_row = row;   // uniform across the workgroup
    var out_row = row;
    if (LAST_ROW) {
        if (row >= HEADS) { return; }
        in_row = (step.n_tokens - 1u) * HEADS + row;
    } else if (row >= step.n_tokens * HEADS) {
        return;
    }
    let src = in_row * D;
    var sum = 0.0;
    for (var i = lid; i < D; i += WG) {
        let v = x[src + i];
        sum += v * v;
    }
    let inv_rms = inverseSqrt(row_sum(sum) / f32(D) + EPS);
    let dst = out_row * D;
    for (var i = lid; i < D; i += WG) {
        let v = x[src + i] * inv_rms * w[i];
        if (ACCUMULATE) {
            out[dst + i] += v;
        } else {
            out[dst + i] = v;
        }
    }
}
