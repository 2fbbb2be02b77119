// attention_local_relative: local self-attention with a learnt relative-position key (Transformer-XL style) and a
// logit softcap, Gemma 4's audio conformer (transformers' chunked Gemma4AudioAttention reduces to this):
//   z_ij = CAP tanh((K_SCALE (q'_i . k_j) + q'_i . r_{i-j}) / CAP),   q'_i = q_i * q_scale (per dimension)
//   out_i = sum_j softmax_j(z_ij) v_j   over the keys j = i - W + 1 ... i that exist (j >= 0)
// per head, for the step's first n_tokens rows. r: [W, H * HD], row m the relative key of distance m.
// The tanh argument is clamped to +-10 (tanh is 1 in f32 beyond ~9), so tanh never sees a huge value.
// Work split: one invocation per (token, head), 64 per workgroup, over a 2-D grid of workgroups; an invocation
// keeps its W logits in registers and walks the head's dimensions for each key.
#include "common/step.wgsl"

override H: u32 = 8u;           // heads
override HD: u32 = 128u;        // dimensions per head
override W: u32 = 12u;          // keys a token sees (itself and W - 1 before it), at most MAX_W
override K_SCALE: f32 = 1.0;
override CAP: f32 = 50.0;

const MAX_W: u32 = 32u;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> q: array<f32>;             // [T_MAX, H * HD]
@group(0) @binding(2) var<storage, read> k: array<f32>;             // [T_MAX, H * HD]
@group(0) @binding(3) var<storage, read> v: array<f32>;             // [T_MAX, H * HD]
@group(0) @binding(4) var<storage, read> r: array<f32>;             // [W, H * HD] relative keys by distance
@group(0) @binding(5) var<storage, read> q_scale: array<f32>;       // [HD]
@group(0) @binding(6) var<storage, read_write> out: array<f32>;     // [T_MAX, H * HD]

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let index = (wid.x + wid.y * nwg.x) * 64u + lid;
    if (index >= step.n_tokens * H) {
        return;
    }
    let i = index / H;
    let h = index % H;
    let width = H * HD;
    let qb = i * width + h * HD;
    let keys = min(W, i + 1u);  // distances 0 ... keys - 1
    var z: array<f32, MAX_W>;
    var top = -3.0e38;
    for (var m = 0u; m < keys; m++) {
        let kb = (i - m) * width + h * HD;
        let rb = m * width + h * HD;
        var qk = 0.0;
        var qr = 0.0;
        for (var d = 0u; d < HD; d++) {
            let qd = q[qb + d] * q_scale[d];
            qk += qd * k[kb + d];
            qr += qd * r[rb + d];
        }
        let logit = CAP * tanh(clamp((K_SCALE * qk + qr) / CAP, -10.0, 10.0));
        z[m] = logit;
        top = max(top, logit);
    }
    var total = 0.0;
    for (var m = 0u; m < keys; m++) {
        z[m] = exp(z[m] - top);
        total += z[m];
    }
    for (var d = 0u; d < HD; d++) {
        var acc = 0.0;
        for (var m = 0u; m < keys; m++) {
            acc += z[m] * v[(i - m) * width + h * HD + d];
        }
        out[qb + d] = acc / total;
    }
}
