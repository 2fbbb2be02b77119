// encoder_qk_norm_rope: Gemma's QK-norm and RoPE on the query and key heads of a packed batch,
// in place: for each token t and head of q (HEADS) and of k (KV_HEADS), x = x / rms(x) * w
// (rms(x) = sqrt(mean(x^2) + EPS), w the q or k norm weight with Gemma's +1 already in it), then
// the rotate-half RoPE at the token's position in its sequence, positions[t]:
//   x'[i] = x[i] cos(a_i) - x[i + D/2] sin(a_i),  x'[i + D/2] = x[i + D/2] cos(a_i) + x[i] sin(a_i)
// with cos(a_i), sin(a_i) read from rope[positions[t]] = [cos a_0 .. cos a_{D/2-1}, sin a_0 ..].
// Work split: one workgroup of 64 invocations per (token, head); each normalises and rotates the
// pairs (i, i + D/2) of a strided slice, after one row sum (common/row_sum_${REDUCE}.wgsl).
#include "common/step.wgsl"
#include "common/row_sum_${REDUCE}.wgsl"

override D: u32 = 256u;        // head dimension (even)
override HEADS: u32 = 3u;      // query heads per token row of q
override KV_HEADS: u32 = 1u;   // key heads per token row of k
override EPS: f32 = 1e-6;

const WG: u32 = 64u;
const HALF: u32 = D / 2u;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read_write> q: array<f32>;      // [T_MAX, HEADS * D]
@group(0) @binding(2) var<storage, read_write> k: array<f32>;      // [T_MAX, KV_HEADS * D]
@group(0) @binding(3) var<storage, read> q_weight: array<f32>;     // [D]
@group(0) @binding(4) var<storage, read> k_weight: array<f32>;     // [D]
@group(0) @binding(5) var<storage, read> positions: array<u32>;    // [T_MAX] position in the sequence
@group(0) @binding(6) var<storage, read> rope: array<f32>;         // [max positions, D] cos | sin

fn row_main(row: u32, lid: u32) {
    let t = row / (HEADS + KV_HEADS);  // uniform across the workgroup
    let head = row % (HEADS + KV_HEADS);
    if (t >= step.n_tokens) {
        return;
    }
    let angles = positions[t] * D;
    if (head < HEADS) {
        let base = (t * HEADS + head) * D;
        var squares = 0.0;
        for (var i = lid; i < D; i += WG) { squares += q[base + i] * q[base + i]; }
        let inv = inverseSqrt(row_sum(squares) / f32(D) + EPS);
        for (var i = lid; i < HALF; i += WG) {
            let a = q[base + i] * inv * q_weight[i];
            let b = q[base + i + HALF] * inv * q_weight[i + HALF];
            let c = rope[angles + i];
            let s = rope[angles + HALF + i];
            q[base + i] = a * c - b * s;
            q[base + i + HALF] = b * c + a * s;
        }
    } else {
        let base = (t * KV_HEADS + head - HEADS) * D;
        var squares = 0.0;
        for (var i = lid; i < D; i += WG) { squares += k[base + i] * k[base + i]; }
        let inv = inverseSqrt(row_sum(squares) / f32(D) + EPS);
        for (var i = lid; i < HALF; i += WG) {
            let a = k[base + i] * inv * k_weight[i];
            let b = k[base + i + HALF] * inv * k_weight[i + HALF];
            let c = rope[angles + i];
            let s = rope[angles + HALF + i];
            k[base + i] = a * c - b * s;
            k[base + i + HALF] = b * c + a * s;
        }
    }
}
