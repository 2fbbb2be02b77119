// qk_norm_rope_store: attention's per-head norms, RoPE and cache append in one dispatch.
//   q_out[t, h, :] = rope(q[t, h, :] / rms * q_w, p)                      h < HEADS
//   k_cache[r, g, :] = rope(k[t, g, :] / rms * k_w, p),  v_cache[r, g, :] = v[t, g, :],  g < KV_HEADS
// at the token's position p = rows[t].x, whose pool row r comes from its sequence's pages
// (common/rows.wgsl); rms over the head's D values, as norm_rope.wgsl; cache words hold two f16
// per u32 when KV_F16, else f32 bits. q, k and v are read from columns of projection outputs:
// row t of q starts at t * Q_STRIDE + Q_OFFSET (likewise k, v), so a fused q|k|v projection (one
// matrix product for all three) binds the same tensor three times; attention reads the cache.
// V_NORM (Gemma 4): v rows are divided by their RMS too (a norm without weight), as HF's v_norm.
// RoPE is NeoX-style (dims i and i + D/2 rotate together), angles from the host's (cos, sin) table.
// Work split: one workgroup of 64 invocations per head row: the step's n_tokens * HEADS q rows
// first, then its n_tokens * KV_HEADS k rows, each of which also copies its v row. An invocation
// takes dims {i, i + 1, i + D/2, i + D/2 + 1} for even i, so a pair of adjacent outputs shares one
// f16 cache word. Sums of squares go through common/row_sum_${REDUCE}.wgsl ("subgroup" or "workgroup");
// the norm, RoPE and store are common/head_norm_rope.wgsl's, which decode attention's fused prologue
// (attention/q_raw.wgsl) shares.
#include "common/step.wgsl"
#include "common/row_sum_${REDUCE}.wgsl"
#include "common/rows.wgsl"
#include "common/head_norm_rope.wgsl"
#include "common/qkv_columns.wgsl"

override D: u32 = 256u;         // head dimension, a multiple of 4
override HEADS: u32 = 4u;       // query heads per token
override KV_HEADS: u32 = 1u;    // key/value heads per token
override EPS: f32 = 1e-6;
override KV_F16: bool = true;   // cache words hold two f16 values
override V_NORM: bool = false;   // Gemma 4: v rows are RMS-normalised (no weight) before they are stored
override PAGE_TOKENS: u32 = 128u;  // positions per KV page
override MAX_PAGES: u32 = 64u;     // page-table entries per sequence

const WG: u32 = NORM_LANES;   // 64
const KV_WIDTH: u32 = KV_HEADS * D;  // cache values per position

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> q: array<f32>;              // [T_MAX, Q_STRIDE]
@group(0) @binding(2) var<storage, read> k: array<f32>;              // [T_MAX, K_STRIDE]
@group(0) @binding(3) var<storage, read> v: array<f32>;              // [T_MAX, V_STRIDE]
@group(0) @binding(4) var<storage, read> q_w: array<f32>;            // [D] q norm weight
@group(0) @binding(5) var<storage, read> k_w: array<f32>;            // [D] k norm weight
@group(0) @binding(6) var<storage, read> rope: array<vec2<f32>>;     // [n_ctx, D/2] (cos, sin)
@group(0) @binding(7) var<storage, read_write> k_cache: array<u32>;  // [pool rows, KV_WIDTH] values as words
@group(0) @binding(8) var<storage, read_write> v_cache: array<u32>;
@group(0) @binding(9) var<storage, read> rows: array<vec4<u32>>;     // [T_MAX] (position, slot, -, -)
@group(0) @binding(10) var<storage, read> page_table: array<u32>;    // [slots, MAX_PAGES]
@group(0) @binding(11) var<storage, read_write> q_out: array<f32>;   // [T_MAX, HEADS, D]

fn row_main(row: u32, lid: u32) {
    let q_rows = step.n_tokens * HEADS;   // uniform: which tensor a workgroup takes is uniform
    let is_q = row < q_rows;
    if (!is_q && row - q_rows >= step.n_tokens * KV_HEADS) {
        return;
    }
    var t: u32;          // the token
    var head: u32;       // its head (a q head or a kv head)
    var src: u32;        // first value of the head row in q or k
    if (is_q) {
        t = row / HEADS;
        head = row % HEADS;
        src = t * Q_STRIDE + Q_OFFSET + head * D;
    } else {
        t = (row - q_rows) / KV_HEADS;
        head = (row - q_rows) % KV_HEADS;
        src = t * K_STRIDE + K_OFFSET + head * D;
    }
    let position = rows[t].x;
    var sum = 0.0;
    for (var i = lid; i < D; i += WG) {
        var x: f32;
        if (is_q) { x = q[src + i]; } else { x = k[src + i]; }
        sum += x * x;
    }
    let inv_rms = head_inv_rms(row_sum(sum));
    // where the row goes: q_out's row, or the position's pool row of the cache, this head's D values
    var dst = row * D;
    if (!is_q) {
        dst = pool_row(rows[t].y, position) * KV_WIDTH + head * D;
    }
    for (var i = 2u * lid; i < HALF; i += 2u * WG) {
        if (is_q) {   // dims i, i + 1, i + HALF, i + HALF + 1 normalised and rotated
            let r = norm_rope_pairs(vec2<f32>(q[src + i], q[src + i + 1u]),
                                    vec2<f32>(q[src + i + HALF], q[src + i + HALF + 1u]),
                                    vec2<f32>(q_w[i], q_w[i + 1u]), vec2<f32>(q_w[i + HALF], q_w[i + HALF + 1u]),
                                    inv_rms, position, i);
            q_out[dst + i] = r.x;
            q_out[dst + i + 1u] = r.y;
            q_out[dst + i + HALF] = r.z;
            q_out[dst + i + HALF + 1u] = r.w;
        } else {
            let r = norm_rope_pairs(vec2<f32>(k[src + i], k[src + i + 1u]),
                                    vec2<f32>(k[src + i + HALF], k[src + i + HALF + 1u]),
                                    vec2<f32>(k_w[i], k_w[i + 1u]), vec2<f32>(k_w[i + HALF], k_w[i + HALF + 1u]),
                                    inv_rms, position, i);
            store_pair(false, dst + i, r.x, r.y);
            store_pair(false, dst + i + HALF, r.z, r.w);
        }
    }
    if (!is_q) {
        let v_src = t * V_STRIDE + V_OFFSET + head * D;
        var v_scale = 1.0;   // exact when V_NORM is off: x * 1.0 == x
        if (V_NORM) {
            var v_sum = 0.0;
            for (var i = lid; i < D; i += WG) {
                v_sum += v[v_src + i] * v[v_src + i];
            }
            v_scale = inverseSqrt(row_sum(v_sum) / f32(D) + EPS);
        }
        for (var i = 2u * lid; i < D; i += 2u * WG) {
            store_pair(true, dst + i, v[v_src + i] * v_scale, v[v_src + i + 1u] * v_scale);
        }
    }
}
