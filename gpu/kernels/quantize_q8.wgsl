// quantize_q8: the f32 rows of a matmul's input as 8-bit integers per 32 values (common/q8_block.wgsl),
// the input of matmul/tiles_i8.wgsl:
//   xq[t, 8 b .. 8 b + 7] = the 32 q of block b packed four to a word (value 4 w + j in byte j),
//   xs[t, b] = (d, sum_i x_i)  (the exact sum, for the weight formats with a minimum)
// for the step's first min(n_tokens, T_MAX) rows. Work split: one invocation per 32-value block.
#include "common/step.wgsl"
#include "common/q8_block.wgsl"

override K: u32 = 32u;      // values per row, a multiple of 32
override T_MAX: u32 = 1u;   // rows

const BLOCKS: u32 = K / 32u;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;          // [T_MAX, K]
@group(0) @binding(2) var<storage, read_write> xq: array<vec4<u32>>;   // [T_MAX, K / 16]: 16 int8 a vec4
@group(0) @binding(3) var<storage, read_write> xs: array<vec2<f32>>;   // [T_MAX, K / 32]: (d, sum)

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * 64u + lid;   // block i % BLOCKS of row i / BLOCKS
    if (i / BLOCKS >= min(step.n_tokens, T_MAX)) {
        return;
    }
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 8u; j++) {
        v[j] = x[8u * i + j];
    }
    let block = q8_block(v);
    xq[2u * i] = block.lo;
    xq[2u * i + 1u] = block.hi;
    xs[i] = block.scale;
}
