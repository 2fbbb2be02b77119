// matmul entry point for software adapters (WG = 64): lavapipe runs a workgroup as a loop over 8-lane
// SIMD slices and compiles every load with lane-varying addresses (workgroup memory included) into a
// per-lane loop of scalar loads, so loads per multiply-add bound it, not arithmetic or barriers.
// Here a thread computes 8 rows x THREAD_TOKENS tokens straight from the weight and x buffers, no
// workgroup memory: per 16 values of k it dequantises its 8 rows once (held in registers across tokens)
// and loads 16 values of x per token for 128 multiply-adds; a workgroup covers 64 rows x 8 THREAD_TOKENS
// tokens. Where a type's groups share words (a block's scale, bytes holding two groups' bits), a row's shared
// words are loaded once for those groups (matmul/held_${HELD_LOADS}.wgsl): the weight loads then cost Q5_0 6
// words a block rather than 16, Q8_0 9 rather than 12, Q4_K 4 + 4 a group rather than 8, Q6_K 19 for four
// groups rather than 48. THREAD_TOKENS is 8 but for steps of fewer tokens (batched decode of 2 to 4
// sequences), where the tokens past the step would repeat the last: lavapipe, the 270M's decode step of 2
// sequences 310 -> 174 ms of GPU time (its Q8_0 output head 175 -> 86).
// With GLU a thread's 8 rows are 4 gate rows and their 4 up rows (32 y columns per workgroup).

#include "matmul/group16_words.wgsl"
#include "matmul/held_${HELD_LOADS}.wgsl"

override WG: u32 = 64u;  // threads per workgroup
override THREAD_TOKENS: u32 = 8u;  // tokens per thread, 1 to 8

@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;   // [T_MAX, K]

const COLS: u32 = 64u / (1u + GLU);  // y columns per workgroup
const TILE_TOKENS: u32 = 8u * THREAD_TOKENS;  // tokens per workgroup
const TOKEN_TILES: u32 = (T_MAX + TILE_TOKENS - 1u) / TILE_TOKENS;

// Products of 16 values of x with 8 dequantised rows: (rows 0..3, rows 4..7).
struct Dot8 {
    lo: vec4<f32>,
    hi: vec4<f32>,
}

fn dot16(w: mat4x4<f32>, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>) -> f32 {
    return dot(w[0], x0) + dot(w[1], x1) + dot(w[2], x2) + dot(w[3], x3);
}

// The 8 rows' (the w, in row order) dot products with x[t, 16 gi .. 16 gi + 15].
fn dot8(t: u32, gi: u32, w0: mat4x4<f32>, w1: mat4x4<f32>, w2: mat4x4<f32>, w3: mat4x4<f32>,
        w4: mat4x4<f32>, w5: mat4x4<f32>, w6: mat4x4<f32>, w7: mat4x4<f32>) -> Dot8 {
    let xi = (t * K + gi * GROUP_VALUES) / 4u;
    let x0 = x[xi];
    let x1 = x[xi + 1u];
    let x2 = x[xi + 2u];
    let x3 = x[xi + 3u];
    return Dot8(vec4<f32>(dot16(w0, x0, x1, x2, x3), dot16(w1, x0, x1, x2, x3), dot16(w2, x0, x1, x2, x3),
                          dot16(w3, x0, x1, x2, x3)),
                vec4<f32>(dot16(w4, x0, x1, x2, x3), dot16(w5, x0, x1, x2, x3), dot16(w6, x0, x1, x2, x3),
                          dot16(w7, x0, x1, x2, x3)));
}

// Rows r + 8 j and tokens t + i, i, j < 8 (with GLU: gate rows r + 8 j, j < 4, then their up rows).

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
    let lo_rows = min(vec4<u32>(r) + vec4<u32>(0u, 8u, 16u, 24u), last);
    let hi_rows = select(min(vec4<u32>(r) + vec4<u32>(32u, 40u, 48u, 56u), last), lo_rows + vec4<u32>(N_ROWS),
                         GLU == 1u);
    let rows_lo = vec4<u32>(FIRST_ROW) + lo_rows;
    let rows_hi = vec4<u32>(FIRST_ROW) + hi_rows;
    let base_lo = rows_lo * ROW_BYTES;
    let base_hi = rows_hi * ROW_BYTES;
    var lo: array<vec4<f32>, 8>;  // [token i]: rows j = 0..3
    var hi: array<vec4<f32>, 8>;  // [token i]: rows j = 4..7
    // (the token loop twice: through a function taking the sums by pointer, it ran slower)
    if (HELD_GROUPS == 1u) {  // each group loaded by itself, in one loop (nested as below, these types ran slower)
        for (var gi = 0u; gi < K / GROUP_VALUES; gi++) {
            let w0 = group16(base_lo.x, gi);
            let w1 = group16(base_lo.y, gi);
            let w2 = group16(base_lo.z, gi);
            let w3 = group16(base_lo.w, gi);
            let w4 = group16(base_hi.x, gi);
            let w5 = group16(base_hi.y, gi);
            let w6 = group16(base_hi.z, gi);
            let w7 = group16(base_hi.w, gi);
            for (var i = 0u; i < THREAD_TOKENS; i++) {
                let d = dot8(min(t + i, n - 1u), gi, w0, w1, w2, w3, w4, w5, w6, w7);
                lo[i] += d.lo;
                hi[i] += d.hi;
            }
        }
    } else {
        for (var h = 0u; h < K / (GROUP_VALUES * HELD_GROUPS); h++) {
            let h0 = held_fetch(base_lo.x, h);
            let h1 = held_fetch(base_lo.y, h);
            let h2 = held_fetch(base_lo.z, h);
            let h3 = held_fetch(base_lo.w, h);
            let h4 = held_fetch(base_hi.x, h);
            let h5 = held_fetch(base_hi.y, h);
            let h6 = held_fetch(base_hi.z, h);
            let h7 = held_fetch(base_hi.w, h);
            for (var g = 0u; g < HELD_GROUPS; g++) {
                let gi = held_group_index(h, g);
                let w0 = held_group16(h0, base_lo.x, gi);
                let w1 = held_group16(h1, base_lo.y, gi);
                let w2 = held_group16(h2, base_lo.z, gi);
                let w3 = held_group16(h3, base_lo.w, gi);
                let w4 = held_group16(h4, base_hi.x, gi);
                let w5 = held_group16(h5, base_hi.y, gi);
                let w6 = held_group16(h6, base_hi.z, gi);
                let w7 = held_group16(h7, base_hi.w, gi);
                for (var i = 0u; i < THREAD_TOKENS; i++) {
                    let d = dot8(min(t + i, n - 1u), gi, w0, w1, w2, w3, w4, w5, w6, w7);
                    lo[i] += d.lo;
                    hi[i] += d.hi;
                }
            }
        }
    }
    for (var i = 0u; i < THREAD_TOKENS; i++) {
        if (GLU == 1u) {
            let v = glu4(lo[i], hi[i]);
            for (var j = 0u; j < 4u; j++) {
                store(t + i, r + 8u * j, n, v[j]);
            }
        } else {
            for (var j = 0u; j < 4u; j++) {
                store(t + i, r + 8u * j, n, lo[i][j]);
                store(t + i, r + 32u + 8u * j, n, hi[i][j]);
            }
        }
    }
}
