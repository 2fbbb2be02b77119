// rms_norm: y = x / sqrt(mean(x^2) + EPS) * w over rows of D values.
// A token's row may hold HEADS independent rows (QK-norm normalises each head of D values).
// Variants: ACCUMULATE adds the result into out (Gemma's post-norms feed the residual
// stream: x += norm(y) * w); LAST_ROW normalises only the step's last token into out row 0
// (the output head needs one row after prefill).
// Work split: one workgroup of 64 invocations per row; each sums a strided slice of the row,
// then a tree reduction in workgroup memory.
#include "common/step.wgsl"

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

var<workgroup> partial: array<f32, WG>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = wid.x + wid.y * nwg.x;  // uniform across the workgroup
    var in_row = row;
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
    partial[lid] = sum;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride >>= 1u) {
        if (lid < stride) {
            partial[lid] += partial[lid + stride];
        }
        workgroupBarrier();
    }
    let inv_rms = inverseSqrt(partial[0] / f32(D) + EPS);
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
