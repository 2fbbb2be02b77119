// matmul entry point for software adapters (WG = 64): lavapipe runs a workgroup as a loop over 8-lane
// SIMD slices and compiles every load with lane-varying addresses (workgroup memory included) into a
// per-lane loop of scalar loads, so loads per multiply-add bound it, not arithmetic or barriers.
// Here a thread computes 16 rows x THREAD_TOKENS tokens straight from the weight and x buffers, no
// workgroup memory: per 16 values of k it dequantises its 16 rows once (held in registers across tokens)
// and loads 16 values of x per token for 256 multiply-adds; a workgroup covers 128 rows x 8 THREAD_TOKENS
// tokens (with 8 rows a thread, x was loaded twice as often, and x's loads then outnumbered the weight's).
// Where a type's groups share words (a block's scale, bytes holding two groups' bits), a row's shared
// words are loaded once for those groups (matmul/held_${HELD_LOADS}.wgsl): the weight loads then cost Q5_0 6
// words a block rather than 16, Q8_0 9 rather than 12, Q4_K 4 + 4 a group rather than 8, Q6_K 19 for four
// groups rather than 48. THREAD_TOKENS is 8 but for steps of fewer tokens (batched decode of 2 to 4
// sequences), where the tokens past the step would repeat the last.
// A thread's rows are r + 8 j, j < 16, as four quads (j = 4 q .. 4 q + 3); with GLU quads 0 and 1 are gate rows
// and quads 2 and 3 their up rows (64 y columns per workgroup).

#include "matmul/group16_words.wgsl"
#include "matmul/held_${HELD_LOADS}.wgsl"

override WG: u32 = 64u;  // threads per workgroup
override THREAD_TOKENS: u32 = 8u;  // tokens per thread, 1 to 8

@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;   // [T_MAX, K]

const COLS: u32 = 128u / (1u + GLU);  // y columns per workgroup
const TILE_TOKENS: u32 = 8u * THREAD_TOKENS;  // tokens per workgroup
const TOKEN_TILES: u32 = (T_MAX + TILE_TOKENS - 1u) / TILE_TOKENS;

fn dot16(w: mat4x4<f32>, x: mat4x4<f32>) -> f32 {
    return dot(w[0], x[0]) + dot(w[1], x[1]) + dot(w[2], x[2]) + dot(w[3], x[3]);
}

// A quad of rows' (the w, in row order) dot products with 16 values of x.
fn dot_quad(x: mat4x4<f32>, w0: mat4x4<f32>, w1: mat4x4<f32>, w2: mat4x4<f32>, w3: mat4x4<f32>) -> vec4<f32> {
    return vec4<f32>(dot16(w0, x), dot16(w1, x), dot16(w2, x), dot16(w3, x));
}

// x[t, 16 gi .. 16 gi + 15].
fn x16(t: u32, gi: u32) -> mat4x4<f32> {
    let xi = (t * K + gi * GROUP_VALUES) / 4u;
    return mat4x4<f32>(x[xi], x[xi + 1u], x[xi + 2u], x[xi + 3u]);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let tile = wid.x + wid.y * nwg.x;
    let n = n_tokens();
    let r = (tile / TOKEN_TILES) * COLS + lid % 8u;
    let t = (tile % TOKEN_TILES) * TILE_TOKENS + THREAD_TOKENS * (lid / 8u);
    if (r >= N_ROWS || t >= n) {
        return;
    }
    // rows past the shard and tokens past n read the last one; their sums are not stored
    let last = vec4<u32>(N_ROWS - 1u);
    let rows0 = min(vec4<u32>(r) + vec4<u32>(0u, 8u, 16u, 24u), last);
    let rows1 = min(vec4<u32>(r) + vec4<u32>(32u, 40u, 48u, 56u), last);
    let rows2 = select(min(vec4<u32>(r) + vec4<u32>(64u, 72u, 80u, 88u), last), rows0 + vec4<u32>(N_ROWS), GLU == 1u);
    let rows3 = select(min(vec4<u32>(r) + vec4<u32>(96u, 104u, 112u, 120u), last), rows1 + vec4<u32>(N_ROWS),
                       GLU == 1u);
    let b0 = (vec4<u32>(FIRST_ROW) + rows0) * ROW_BYTES;
    let b1 = (vec4<u32>(FIRST_ROW) + rows1) * ROW_BYTES;
    let b2 = (vec4<u32>(FIRST_ROW) + rows2) * ROW_BYTES;
    let b3 = (vec4<u32>(FIRST_ROW) + rows3) * ROW_BYTES;
    var s0: array<vec4<f32>, 8>;  // [token i]: quad 0's sums
    var s1: array<vec4<f32>, 8>;
    var s2: array<vec4<f32>, 8>;
    var s3: array<vec4<f32>, 8>;
    // The loops below differ only in how a group's rows are loaded: the token loop written twice ran faster than
    // through a function taking the sums by pointer, and the types without held loads ran faster in one flat loop.
    if (HELD_GROUPS == 1u) {
        for (var gi = 0u; gi < K / GROUP_VALUES; gi++) {
            let w0 = group16(b0.x, gi);
            let w1 = group16(b0.y, gi);
            let w2 = group16(b0.z, gi);
            let w3 = group16(b0.w, gi);
            let w4 = group16(b1.x, gi);
            let w5 = group16(b1.y, gi);
            let w6 = group16(b1.z, gi);
            let w7 = group16(b1.w, gi);
            let w8 = group16(b2.x, gi);
            let w9 = group16(b2.y, gi);
            let w10 = group16(b2.z, gi);
            let w11 = group16(b2.w, gi);
            let w12 = group16(b3.x, gi);
            let w13 = group16(b3.y, gi);
            let w14 = group16(b3.z, gi);
            let w15 = group16(b3.w, gi);
            for (var i = 0u; i < THREAD_TOKENS; i++) {
                let xs = x16(min(t + i, n - 1u), gi);
                s0[i] += dot_quad(xs, w0, w1, w2, w3);
                s1[i] += dot_quad(xs, w4, w5, w6, w7);
                s2[i] += dot_quad(xs, w8, w9, w10, w11);
                s3[i] += dot_quad(xs, w12, w13, w14, w15);
            }
        }
    } else {
        for (var h = 0u; h < K / (GROUP_VALUES * HELD_GROUPS); h++) {
            let h0 = held_fetch(b0.x, h);
            let h1 = held_fetch(b0.y, h);
            let h2 = held_fetch(b0.z, h);
            let h3 = held_fetch(b0.w, h);
            let h4 = held_fetch(b1.x, h);
            let h5 = held_fetch(b1.y, h);
            let h6 = held_fetch(b1.z, h);
            let h7 = held_fetch(b1.w, h);
            let h8 = held_fetch(b2.x, h);
            let h9 = held_fetch(b2.y, h);
            let h10 = held_fetch(b2.z, h);
            let h11 = held_fetch(b2.w, h);
            let h12 = held_fetch(b3.x, h);
            let h13 = held_fetch(b3.y, h);
            let h14 = held_fetch(b3.z, h);
            let h15 = held_fetch(b3.w, h);
            for (var g = 0u; g < HELD_GROUPS; g++) {
                let gi = held_group_index(h, g);
                let w0 = held_group16(h0, b0.x, gi);
                let w1 = held_group16(h1, b0.y, gi);
                let w2 = held_group16(h2, b0.z, gi);
                let w3 = held_group16(h3, b0.w, gi);
                let w4 = held_group16(h4, b1.x, gi);
                let w5 = held_group16(h5, b1.y, gi);
                let w6 = held_group16(h6, b1.z, gi);
                let w7 = held_group16(h7, b1.w, gi);
                let w8 = held_group16(h8, b2.x, gi);
                let w9 = held_group16(h9, b2.y, gi);
                let w10 = held_group16(h10, b2.z, gi);
                let w11 = held_group16(h11, b2.w, gi);
                let w12 = held_group16(h12, b3.x, gi);
                let w13 = held_group16(h13, b3.y, gi);
                let w14 = held_group16(h14, b3.z, gi);
                let w15 = held_group16(h15, b3.w, gi);
                for (var i = 0u; i < THREAD_TOKENS; i++) {
                    let xs = x16(min(t + i, n - 1u), gi);
                    s0[i] += dot_quad(xs, w0, w1, w2, w3);
                    s1[i] += dot_quad(xs, w4, w5, w6, w7);
                    s2[i] += dot_quad(xs, w8, w9, w10, w11);
                    s3[i] += dot_quad(xs, w12, w13, w14, w15);
                }
            }
        }
    }
    for (var i = 0u; i < THREAD_TOKENS; i++) {
        if (GLU == 1u) {
            let v0 = glu4(s0[i], s2[i]);
            let v1 = glu4(s1[i], s3[i]);
            for (var j = 0u; j < 4u; j++) {
                store(t + i, r + 8u * j, n, v0[j]);
                store(t + i, r + 32u + 8u * j, n, v1[j]);
            }
        } else {
            for (var j = 0u; j < 4u; j++) {
                store(t + i, r + 8u * j, n, s0[i][j]);
                store(t + i, r + 32u + 8u * j, n, s1[i][j]);
                store(t + i, r + 64u + 8u * j, n, s2[i][j]);
                store(t + i, r + 96u + 8u * j, n, s3[i][j]);
            }
        }
    }
}
