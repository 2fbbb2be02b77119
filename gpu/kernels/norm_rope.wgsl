// norm_rope: per-head RMS norm then rotary position embedding, in place on q or k.
//   x[t, h, :] = rope(x[t, h, :] / rms * w, position step.pos + t)
// RoPE is NeoX-style (HF's rotate_half): dims i and i + D/2 rotate together by angle
// position * inv_freq[i]. The angles come from a host-computed table of (cos, sin) per
// position and pair, so the GPU's sin/cos accuracy at large arguments never matters.
// Work split: one workgroup of 64 invocations per (token, head) row.
#include "common/step.wgsl"

override D: u32 = 256u;      // head dimension
override HEADS: u32 = 1u;    // heads per token
override EPS: f32 = 1e-6;

const WG: u32 = 64u;
const HALF: u32 = D / 2u;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;      // [T_MAX, HEADS, D]
@group(0) @binding(2) var<storage, read> w: array<f32>;            // [D] norm weight
@group(0) @binding(3) var<storage, read> rope: array<vec2<f32>>;   // [n_ctx, D/2] (cos, sin)

var<workgroup> partial: array<f32, WG>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= step.n_tokens * HEADS) {
        return;
    }
    let base = row * D;
    let position = step.pos + row / HEADS;
    var sum = 0.0;
    for (var i = lid; i < D; i += WG) {
        let v = x[base + i];
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
    for (var i = lid; i < HALF; i += WG) {
        let a = x[base + i] * inv_rms * w[i];
        let b = x[base + i + HALF] * inv_rms * w[i + HALF];
        let cs = rope[position * HALF + i];
        x[base + i] = a * cs.x - b * cs.y;
        x[base + i + HALF] = b * cs.x + a * cs.y;
    }
}
