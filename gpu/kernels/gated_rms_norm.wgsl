// gated_rms_norm: y = x / sqrt(mean(x^2) + EPS) * w * silu(z) over rows of D values, HEADS rows per token
// (Gated DeltaNet's output norm, transformers' Qwen3_5RMSNormGated: normalise first, then gate).
// Layouts: x [T_MAX, HEADS * D], z [T_MAX, Z_STRIDE] (head h of a token at Z_OFFSET + h * D), w [D], y like x.
// Work split: one workgroup of 64 invocations per (token, head); each sums a strided slice of the row, then a
// tree reduction in workgroup memory (common/row_sum_workgroup.wgsl).
#include "common/step.wgsl"
#include "common/row_sum_workgroup.wgsl"

override D: u32 = 128u;          // values per normalised row
override HEADS: u32 = 16u;       // normalised rows per token
override EPS: f32 = 1e-6;        // added to the mean square
override Z_STRIDE: u32 = 2048u;  // values per z row
override Z_OFFSET: u32 = 0u;     // column of the gate's head 0 in a z row

const WG: u32 = 64u;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> x: array<f32>;          // [T_MAX, HEADS * D]
@group(0) @binding(2) var<storage, read> z: array<f32>;          // [T_MAX, Z_STRIDE]
@group(0) @binding(3) var<storage, read> w: array<f32>;          // [D]
@group(0) @binding(4) var<storage, read_write> out: array<f32>;  // [T_MAX, HEADS * D]

fn row_main(row: u32, lid: u32) {
    if (row >= step.n_tokens * HEADS) {  // uniform across the workgroup
        return;
    }
    let src = row * D;
    let zb = (row / HEADS) * Z_STRIDE + Z_OFFSET + (row % HEADS) * D;
    var sum = 0.0;
    for (var i = lid; i < D; i += WG) {
        let v = x[src + i];
        sum += v * v;
    }
    let inv_rms = inverseSqrt(row_sum(sum) / f32(D) + EPS);
    for (var i = lid; i < D; i += WG) {
        let g = z[zb + i];
        out[src + i] = x[src + i] * inv_rms * w[i] * (g / (1.0 + exp(-g)));
    }
}
