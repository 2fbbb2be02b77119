// quantize_q8: the f32 rows of a matmul's input as 8-bit integers per 32 values, the input of
// matmul_i8.wgsl (llama.cpp quantises activations alike, its Q8_1, for its integer-dot kernels):
//   d = max |x_i| / 127,  q_i = round(x_i / d) in [-127, 127]  (q = 0 where d = 0),
//   xq[t, 8 b .. 8 b + 7] = the 32 q of block b packed four to a word (value 4 w + j in byte j),
//   xs[t, b] = (d, sum_i x_i)  (the exact sum, for the weight formats with a minimum)
// for the step's first min(n_tokens, T_MAX) rows. Work split: one invocation per 32-value block.
#include "common/step.wgsl"

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
    var amax = 0.0;
    var sum = 0.0;
    for (var j = 0u; j < 8u; j++) {
        v[j] = x[8u * i + j];
        let a = abs(v[j]);
        amax = max(amax, max(max(a.x, a.y), max(a.z, a.w)));
        sum += (v[j].x + v[j].y) + (v[j].z + v[j].w);
    }
    let d = amax / 127.0;
    let inv = select(0.0, 1.0 / d, d > 0.0);
    var words: array<u32, 8>;
    for (var j = 0u; j < 8u; j++) {
        words[j] = pack4xI8(vec4<i32>(round(v[j] * inv)));
    }
    xq[2u * i] = vec4<u32>(words[0], words[1], words[2], words[3]);
    xq[2u * i + 1u] = vec4<u32>(words[4], words[5], words[6], words[7]);
    xs[i] = vec2<f32>(d, sum);
}
