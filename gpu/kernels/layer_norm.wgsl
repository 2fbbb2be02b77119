// layer_norm: per token row, v = x[t] (+ bias) (+ residual[t]), then
//   LayerNorm (RMS = false): out[t] = (v - mean(v)) / sqrt(var(v) + EPS) * gamma + beta  (BERT)
//   RMSNorm   (RMS = true):  out[t] = v / sqrt(mean(v^2) + EPS) * gamma                  (Gemma)
// var is the biased variance (divided by D) computed in a second pass around the mean, as
// PyTorch's LayerNorm does. ACCUMULATE adds the result into out instead of writing it (Gemma's
// post-norms feed the residual stream: x += norm(y) * w).
// Bindings that a variant does not read are still bound (pass any tensor): bias unless HAS_BIAS,
// residual unless HAS_RESIDUAL, beta when RMS. The statically dead reads keep them in the layout.
// Work split: one workgroup of 64 invocations per row; each takes a strided slice of the row; the
// sums go through common/row_sum_${REDUCE}.wgsl (REDUCE: "subgroup" or "workgroup").
#include "common/step.wgsl"
#include "common/row_sum_${REDUCE}.wgsl"

override D: u32 = 384u;             // values per row
override EPS: f32 = 1e-12;          // added to the variance (mean square when RMS)
override RMS: bool = false;         // RMSNorm: no mean, no beta
override HAS_BIAS: bool = false;    // add bias[i] before normalising (the previous linear's bias)
override HAS_RESIDUAL: bool = false; // add residual[t, i] before normalising
override ACCUMULATE: bool = false;  // out += result

const WG: u32 = 64u;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> x: array<f32>;         // [T_MAX, D]
@group(0) @binding(2) var<storage, read> bias: array<f32>;      // [D]
@group(0) @binding(3) var<storage, read> residual: array<f32>;  // [T_MAX, D]
@group(0) @binding(4) var<storage, read> gamma: array<f32>;     // [D]
@group(0) @binding(5) var<storage, read> beta: array<f32>;      // [D]
@group(0) @binding(6) var<storage, read_write> out: array<f32>; // [T_MAX, D]

fn value(base: u32, i: u32) -> f32 {
    var v = x[base + i];
    if (HAS_BIAS) { v += bias[i]; }
    if (HAS_RESIDUAL) { v += residual[base + i]; }
    return v;
}

fn row_main(row: u32, lid: u32) {
    if (row >= step.n_tokens) {  // uniform across the workgroup
        return;
    }
    let base = row * D;
    var mean = 0.0;
    if (!RMS) {
        var sum = 0.0;
        for (var i = lid; i < D; i += WG) { sum += value(base, i); }
        mean = row_sum(sum) / f32(D);
    }
    var squares = 0.0;
    for (var i = lid; i < D; i += WG) {
        let c = value(base, i) - mean;
        squares += c * c;
    }
    let inv = inverseSqrt(row_sum(squares) / f32(D) + EPS);
    for (var i = lid; i < D; i += WG) {
        var r = (value(base, i) - mean) * inv * gamma[i];
        if (!RMS) { r += beta[i]; }
        if (ACCUMULATE) {
            out[base + i] += r;
        } else {
            out[base + i] = r;
        }
    }
}
