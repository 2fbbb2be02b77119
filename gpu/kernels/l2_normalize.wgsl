// l2_normalize: x[r] = x[r] / max(||x[r]||_2, EPS) in place for rows r < ROWS, as PyTorch's
// F.normalize (sentence-transformers' Normalize module); an all-zero row stays zero.
// Work split: one workgroup of 64 invocations per row; each sums the squares of a strided slice
// (common/row_sum_${REDUCE}.wgsl), then scales the values it read itself.
#include "common/step.wgsl"
#include "common/row_sum_${REDUCE}.wgsl"

override D: u32 = 384u;       // values per row
override ROWS: u32 = 1u;      // rows of x
override EPS: f32 = 1e-12;    // smallest norm divided by

const WG: u32 = 64u;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;  // [ROWS, D]

fn row_main(row: u32, lid: u32) {
    if (row >= ROWS || step.n_tokens == 0u) {  // uniform; the step struct must be read to stay bound
        return;
    }
    let base = row * D;
    var squares = 0.0;
    for (var i = lid; i < D; i += WG) {
        let v = x[base + i];
        squares += v * v;
    }
    let scale = 1.0 / max(sqrt(row_sum(squares)), EPS);
    for (var i = lid; i < D; i += WG) {
        x[base + i] *= scale;
    }
}
