// norm_rope: per-head RMS norm then rotary position embedding, in place on q or k.
//   x[t, h, :] = rope(x[t, h, :] / rms * w, position rows[t].x)   (the row table, common/rows.wgsl)
// RoPE is NeoX-style (HF's rotate_half): dims i and i + D/2 rotate together by angle
// position * inv_freq[i]. The angles come from a host-computed table of (cos, sin) per
// position and pair, so the GPU's sin/cos accuracy at large arguments never matters.
// Work split: one workgroup of 64 invocations per (token, head) row; the sum of squares is
// common/row_sum_workgroup.wgsl's tree.
#include "common/step.wgsl"
#include "common/row_sum_workgroup.wgsl"

override D: u32 = 256u;      // head dimension
override HEADS: u32 = 1u;    // heads per token
override EPS: f32 = 1e-6;

const WG: u32 = 64u;
const HALF: u32 = D / 2u;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;      // [T_MAX, HEADS, D]
@group(0) @binding(2) var<storage, read> w: array<f32>;            // [D] norm weight
@group(0) @binding(3) var<storage, read> rope: array<vec2<f32>>;   // [n_ctx, D/2] (cos, sin)
@group(0) @binding(4) var<storage, read> rows: array<vec4<u32>>;   // [T_MAX] (position, slot, -, -)

fn row_main(row: u32, lid: u32) {
    if (row >= step.n_tokens * HEADS) {
        return;
    }
    let base = row * D;
    let position = rows[row / HEADS].x;
    var sum = 0.0;
    for (var i = lid; i < D; i += WG) {
        let v = x[base + i];
        sum += v * v;
    }
    let inv_rms = inverseSqrt(row_sum(sum) / f32(D) + EPS);
    for (var i = lid; i < HALF; i += WG) {
        let a = x[base + i] * inv_rms * w[i];
        let b = x[base + i + HALF] * inv_rms * w[i + HALF];
        let cs = rope[position * HALF + i];
        x[base + i] = a * cs.x - b * cs.y;
        x[base + i + HALF] = b * cs.x + a * cs.y;
    }
}
