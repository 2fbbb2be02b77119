// avg_pool2d: each image's grid of SIDE x SIDE rows averaged over K x K blocks (torch's AvgPool2d with
// kernel = stride = K over a [D, SIDE, SIDE] map), Gemma 3's pooling of patch rows into soft tokens:
//   out[n * OUT * OUT + i * OUT + j, d] = sum_{a, b < K} x[n * SIDE * SIDE + (i K + a) SIDE + (j K + b), d] / (K K)
// with OUT = SIDE / K, for the step's n_tokens / (SIDE * SIDE) images (n_tokens: input rows).
// The K * K values are added in row-major order of the block, then divided once, as torch does.
// Work split: one invocation per output value, 256 per workgroup, over a 2-D grid of workgroups.
#include "common/step.wgsl"

override D: u32 = 1152u;     // values per row
override SIDE: u32 = 64u;    // rows per side of an image's grid (patches per side)
override K: u32 = 4u;        // block side: SIDE is a multiple of K

const OUT: u32 = SIDE / K;   // output rows per side

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> x: array<f32>;            // [images * SIDE * SIDE, D] grid rows, row-major
@group(0) @binding(2) var<storage, read_write> out: array<f32>;    // [images * OUT * OUT, D]

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let index = (wid.x + wid.y * nwg.x) * 256u + lid;
    let images = step.n_tokens / (SIDE * SIDE);
    if (index >= images * OUT * OUT * D) {
        return;
    }
    let d = index % D;
    let row = index / D;
    let image = row / (OUT * OUT);
    let cell = row % (OUT * OUT);
    let first = image * SIDE * SIDE + (cell / OUT) * K * SIDE + (cell % OUT) * K;
    var sum = 0.0;
    for (var a = 0u; a < K; a++) {
        for (var b = 0u; b < K; b++) {
            sum += x[(first + a * SIDE + b) * D + d];
        }
    }
    out[index] = sum / f32(K * K);
}
