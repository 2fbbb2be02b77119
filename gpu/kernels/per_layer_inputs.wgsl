// per_layer_inputs: per-layer inputs (PLE, Gemma 4) from their two halves, per token and layer:
//   pli[t, l, :] = (proj[t, l, :] * PROJ_SCALE / rms(proj[t, l, :] * PROJ_SCALE) * w + tok[t, l, :]) * COMBINE
// proj = x_embedded W_per_layer_model_proj (the context half), tok = the per-layer token embedding already
// scaled by sqrt(P) (the identity half), rms over the P values of one layer's slice; in place on tok.
// Work split: one workgroup of 64 invocations per (token, layer) row; sums through common/row_sum_workgroup.
#include "common/step.wgsl"
#include "common/row_sum_workgroup.wgsl"

override P: u32 = 256u;              // per-layer input width
override LAYERS: u32 = 35u;          // layers (slices per token row)
override EPS: f32 = 1e-6;
override PROJ_SCALE: f32 = 0.0255;   // 1/sqrt(model width), applied before the norm as HF does
override COMBINE: f32 = 0.70710677;  // 2^-0.5

const WG: u32 = 64u;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> proj: array<f32>;         // [T_MAX, LAYERS * P]
@group(0) @binding(2) var<storage, read> w: array<f32>;            // [P] per_layer_proj_norm weight
@group(0) @binding(3) var<storage, read_write> tok: array<f32>;    // [T_MAX, LAYERS * P] in: identity, out: pli

fn row_main(row: u32, lid: u32) {
    if (row >= step.n_tokens * LAYERS) {
        return;
    }
    let base = row * P;
    var sum = 0.0;
    for (var i = lid; i < P; i += WG) {
        let v = proj[base + i] * PROJ_SCALE;
        sum += v * v;
    }
    let inv_rms = inverseSqrt(row_sum(sum) / f32(P) + EPS);
    for (var i = lid; i < P; i += WG) {
        tok[base + i] = (proj[base + i] * PROJ_SCALE * inv_rms * w[i] + tok[base + i]) * COMBINE;
    }
}
