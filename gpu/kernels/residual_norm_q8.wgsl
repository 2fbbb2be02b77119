// residual_norm_q8: residual_norm.wgsl whose output h is quantised per 32 values (common/q8_block.wgsl, as
// kernels/quantize_q8.wgsl does) for an int8 matvec to read (matvec/x_q8_buffer.wgsl): a decode step's
// feed-forward input under int8 activations, where the gate-up's int8 arithmetic on a quantised input saves
// more than this dispatch costs (gpu/ops/matmul.py, quantises_ffn_input). Row t of h is D / 4 words of q
// (four int8 a word), then D / 32 pairs (d, exact sum) as f32 bits.
// Work split: one workgroup per row as residual_norm.wgsl, h kept in workgroup memory, then quantised 8
// invocations a block (common/q8_block.wgsl's two phases).
#include "common/step.wgsl"
#include "common/row_sum_${REDUCE}.wgsl"
#include "common/q8_block.wgsl"

override D: u32 = 640u;          // values per row (model width), a multiple of 64
override EPS: f32 = 1e-6;        // added to the mean squares
override WG: u32 = 160u;         // invocations per row (a power of two for the workgroup reduction)
override QUADS: u32 = 1u;        // quads of the row per invocation: 1, or 2 where D / 4 > WG
const GATHER: bool = false;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> y: array<vec4<f32>>;       // [T_MAX, D] block output, or its SPLIT parts
@group(0) @binding(2) var<storage, read> w_post: array<vec4<f32>>;  // [D] its post-norm weight
@group(0) @binding(3) var<storage, read_write> x: array<vec4<f32>>; // [T_MAX, D] residual stream
@group(0) @binding(4) var<storage, read> w_next: array<vec4<f32>>;  // [D] the next pre-norm weight
@group(0) @binding(5) var<storage, read_write> h: array<u32>;       // [T_MAX, D * 5 / 16]
@group(0) @binding(6) var<storage, read> out_rows: array<u32>;      // not read (GATHER is off)

const H_ROW_WORDS: u32 = D * 5u / 16u;

var<workgroup> h_row: array<vec4<f32>, D / 4u>;
var<workgroup> h_stats: array<vec2<f32>, D / 4u>;  // quad_stats of each quad

fn block_scale() -> f32 {
    return 1.0;
}

fn store_h(row: u32, q: u32, v: vec4<f32>) {
    h_row[q] = v;
}

#include "common/residual_norm_row.wgsl"

fn row_main(row: u32, lid: u32) {
    if (row >= step.n_tokens) {
        return;
    }
    residual_norm_row(row, lid);
    workgroupBarrier();
    for (var i = lid; i < D / 4u; i += WG) {
        h_stats[i] = quad_stats(h_row[i]);
    }
    workgroupBarrier();
    for (var i = lid; i < D / 4u; i += WG) {  // common/q8_block.wgsl's two phases: quad i of block i / 8
        let first = i & ~7u;
        var amax = 0.0;
        var sum = 0.0;
        for (var j = 0u; j < 8u; j++) {
            let s = h_stats[first + j];
            amax = max(amax, s.x);
            sum += s.y;
        }
        let scale = q8_quad_scale(amax, sum);
        h[row * H_ROW_WORDS + i] = q8_quad_word(h_row[i], scale.x);
        if ((i & 7u) == 0u) {
            let scale_at = row * H_ROW_WORDS + D / 4u + i / 4u;  // pair i / 8
            h[scale_at] = bitcast<u32>(scale.x);
            h[scale_at + 1u] = bitcast<u32>(scale.y);
        }
    }
}
