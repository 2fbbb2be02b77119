// conv2d_norm: a K x K convolution with stride S and zero padding P over channels-last rows, no bias, then
// LayerNorm over the output channels (weight only, biased variance around the mean) and ReLU: one block of
// Gemma 4's audio subsampling (torch's Conv2d, LayerNorm(bias=False) on the channels, ReLU):
//   v[t, f, co] = sum_{a, b < K} sum_{ci} w[co, a, b, ci] x[t S + a - P, f S + b - P, ci]   (outside: zero)
//   y[t, f, :] = relu((v - mean(v)) / sqrt(var(v) + EPS) * gamma)
// Input time rows at or past lengths[LENGTH_INDEX] read as zero, like the padding (transformers zeroes the rows its
// feature mask drops before each convolution; a clip's valid rows are written there per run).
// x: [T_in, F_IN, C_IN] rows time-major, T_in = n_tokens * T_IN_PER_TOKEN; y: [T_out, F_OUT, C_OUT] with
// T_out = n_tokens * T_OUT_PER_TOKEN (the step's n_tokens counts the clip's soft tokens, so one program serves
// every length); w: torch's [C_OUT, C_IN, K, K] with the input channels moved last at upload.
// Work split: one workgroup of 64 invocations per output position (t, f), each taking channels co = lid + 64 j;
// the sums for the norm go through workgroup memory. Grid: 2-D over positions.
#include "common/step.wgsl"

override C_IN: u32 = 1u;
override C_OUT: u32 = 128u;               // at most MAX_C
override F_IN: u32 = 128u;                // frequency columns of the input
override F_OUT: u32 = 64u;
override K: u32 = 3u;
override S: u32 = 2u;
override P: u32 = 1u;
override T_IN_PER_TOKEN: u32 = 4u;        // input time rows per soft token
override T_OUT_PER_TOKEN: u32 = 2u;       // output time rows per soft token
override EPS: f32 = 1e-6;
override LENGTH_INDEX: u32 = 0u;          // which entry of lengths counts the valid input time rows

const MAX_C: u32 = 512u;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> x: array<f32>;            // [T_in * F_IN, C_IN]
@group(0) @binding(2) var<storage, read> w: array<f32>;            // [C_OUT, K, K, C_IN]
@group(0) @binding(3) var<storage, read> gamma: array<f32>;        // [C_OUT]
@group(0) @binding(4) var<storage, read> lengths: array<u32>;      // valid input time rows, by LENGTH_INDEX
@group(0) @binding(5) var<storage, read_write> y: array<f32>;      // [T_out * F_OUT, C_OUT]

var<workgroup> values: array<f32, MAX_C>;
var<workgroup> partial: array<f32, 64>;

fn row_sum(lid: u32, v: f32) -> f32 {
    partial[lid] = v;
    workgroupBarrier();
    for (var stride = 32u; stride > 0u; stride >>= 1u) {
        if (lid < stride) {
            partial[lid] += partial[lid + stride];
        }
        workgroupBarrier();
    }
    let total = partial[0];
    workgroupBarrier();
    return total;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let pos = wid.x + wid.y * nwg.x;
    let t_in = min(step.n_tokens * T_IN_PER_TOKEN, lengths[LENGTH_INDEX]);
    // Uniform across the workgroup, so the barriers below are reached by all or none.
    if (pos >= step.n_tokens * T_OUT_PER_TOKEN * F_OUT) {
        return;
    }
    let t = pos / F_OUT;
    let f = pos % F_OUT;
    var sum = 0.0;
    for (var co = lid; co < C_OUT; co += 64u) {
        var acc = 0.0;
        for (var a = 0u; a < K; a++) {
            let ti = i32(t * S + a) - i32(P);
            if (ti < 0 || ti >= i32(t_in)) {
                continue;
            }
            for (var b = 0u; b < K; b++) {
                let fi = i32(f * S + b) - i32(P);
                if (fi < 0 || fi >= i32(F_IN)) {
                    continue;
                }
                let xb = (u32(ti) * F_IN + u32(fi)) * C_IN;
                let wb = ((co * K + a) * K + b) * C_IN;
                for (var ci = 0u; ci < C_IN; ci++) {
                    acc += w[wb + ci] * x[xb + ci];
                }
            }
        }
        values[co] = acc;
        sum += acc;
    }
    let mean = row_sum(lid, sum) / f32(C_OUT);
    var sq = 0.0;
    for (var co = lid; co < C_OUT; co += 64u) {
        let d = values[co] - mean;
        sq += d * d;
    }
    let inv = 1.0 / sqrt(row_sum(lid, sq) / f32(C_OUT) + EPS);
    for (var co = lid; co < C_OUT; co += 64u) {
        y[pos * C_OUT + co] = max((values[co] - mean) * inv * gamma[co], 0.0);
    }
}
