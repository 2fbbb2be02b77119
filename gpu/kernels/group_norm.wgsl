// group_norm: GroupNorm over the step's first n_tokens rows of time-major activations [T, C] (torch's GroupNorm on
// [1, C, T]): the C channels split into GROUPS groups; each group's values over all rows are normalised by their
// mean and biased variance, then scaled and shifted per channel:
//   out[t, c] = (v[t, c] - mean_g) / sqrt(var_g + EPS) * gamma[c] + beta[c],  v = tanh(x) if TANH else x
// (TANH: Moonshine's stem, tanh(conv1(audio)) then GroupNorm). The variance is a second pass around the mean.
// Work split: one workgroup of 256 invocations per group, each taking a strided slice of the group's values.
#include "common/step.wgsl"

override C: u32 = 64u;        // channels per row
override GROUPS: u32 = 1u;    // groups of C / GROUPS channels
override EPS: f32 = 1e-5;
override TANH: bool = false;  // tanh of x before normalising

const WG: u32 = 256u;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> x: array<f32>;         // [T_MAX, C]
@group(0) @binding(2) var<storage, read> gamma: array<f32>;     // [C]
@group(0) @binding(3) var<storage, read> beta: array<f32>;      // [C]
@group(0) @binding(4) var<storage, read_write> out: array<f32>; // [T_MAX, C]

#include "common/row_sum_workgroup.wgsl"

fn value(t: u32, c: u32) -> f32 {
    let v = x[t * C + c];
    if (TANH) {
        return tanh(clamp(v, -15.0, 15.0));  // tanh(15) is 1 in f32; some tanh's overflow to NaN far out
    }
    return v;
}

fn row_main(group: u32, lid: u32) {
    if (group >= GROUPS) {
        return;
    }
    let width = C / GROUPS;
    let first = group * width;
    let count = step.n_tokens * width;
    var sum = 0.0;
    for (var i = lid; i < count; i += WG) {
        sum += value(i / width, first + i % width);
    }
    let mean = row_sum(sum) / f32(count);
    var sq = 0.0;
    for (var i = lid; i < count; i += WG) {
        let d = value(i / width, first + i % width) - mean;
        sq += d * d;
    }
    let inv = inverseSqrt(row_sum(sq) / f32(count) + EPS);
    for (var i = lid; i < count; i += WG) {
        let t = i / width;
        let c = first + i % width;
        out[t * C + c] = (value(t, c) - mean) * inv * gamma[c] + beta[c];
    }
}
