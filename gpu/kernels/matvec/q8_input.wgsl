// The int8 matvecs' input (matvec_q4_k_i8.wgsl, matvec_q6_k_i8.wgsl): the step's x quantised per 32 values
// (common/q8_block.wgsl's rule) into workgroup memory by each workgroup's prologue, T_MAX * K * 5 / 4 bytes.
// Each workgroup quantises for itself (reading x from L2) rather than a quantize_q8 dispatch doing it once:
// inside a pass such a dispatch costs 5.5 us on an H200, the prologue 1.3-1.4 us for rows of 2048-2560
// values (but about 10 for 10240: see matmul_plan.py's int8_matvec_pays).
//
// Where the entry point numbers its invocations so that tid ^ 1, ^ 2, ^ 4 are lanes of the same subgroup
// (lanes_of_8: full subgroups of at least 8, matvec/reduce_subgroup.wgsl), each invocation reads one vec4 of
// x at a time, neighbours reading neighbours, and 8 lanes make a block's maximum and sum by subgroup
// shuffles. Otherwise each invocation quantises whole blocks (q8_block). Either way q and d are the same
// (d from the block's maximum; q = round(x / d)); the sums differ in the order of their additions only.
// The including x source (matvec/x_q8_direct.wgsl, x_q8_normed.wgsl) defines f32_vec(i), vec4 i of the
// [T_MAX, K] f32 input.
#include "common/q8_block.wgsl"

const X_QUADS: u32 = T_MAX * K / 4u;
const QUANTISE_ROUNDS: u32 = (X_QUADS + WG - 1u) / WG;

var<workgroup> xq8: array<u32, X_QUADS>;                 // [T_MAX, K / 4]: 4 int8 a word
var<workgroup> xd8: array<vec2<f32>, T_MAX * K / 32u>;   // [T_MAX, K / 32]: (d, exact sum)

// Quantises x (all T_MAX rows: rows past the step's tokens hold stale values that no unit reads) and ends
// with a barrier. From control flow uniform over the workgroup.
fn quantise_input(tid: u32, lanes_of_8: bool) {
    if (lanes_of_8) {
        for (var r = 0u; r < QUANTISE_ROUNDS; r++) {  // a constant trip count: the loads can all be in flight
            let i = r * WG + tid;
            let v = f32_vec(min(i, X_QUADS - 1u));
            var stats = quad_stats(v);
            for (var mask = 1u; mask < 8u; mask <<= 1u) {
                stats = vec2<f32>(max(stats.x, subgroupShuffleXor(stats.x, mask)),
                                  stats.y + subgroupShuffleXor(stats.y, mask));
            }
            let scale = q8_quad_scale(stats.x, stats.y);
            if (i < X_QUADS) {
                xq8[i] = q8_quad_word(v, scale.x);
                if (i % 8u == 0u) {
                    xd8[i / 8u] = scale;
                }
            }
        }
    } else {
        for (var b = tid; b < X_QUADS / 8u; b += WG) {
            var v: array<vec4<f32>, 8>;
            for (var j = 0u; j < 8u; j++) {
                v[j] = f32_vec(8u * b + j);
            }
            let block = q8_block(v);
            for (var j = 0u; j < 4u; j++) {
                xq8[8u * b + j] = block.lo[j];
                xq8[8u * b + 4u + j] = block.hi[j];
            }
            xd8[b] = block.scale;
        }
    }
    workgroupBarrier();
}

// 16 int8 values of x from value 16 i of the [T_MAX, K] input.
fn x_q8(i: u32) -> vec4<u32> {
    return vec4<u32>(xq8[4u * i], xq8[4u * i + 1u], xq8[4u * i + 2u], xq8[4u * i + 3u]);
}

// (d, exact sum) of x's 32-value blocks b and b + 1 (b even) of the [T_MAX, K] input.
fn x_q8_scales2(b: u32) -> vec4<f32> {
    return vec4<f32>(xd8[b], xd8[b + 1u]);
}
