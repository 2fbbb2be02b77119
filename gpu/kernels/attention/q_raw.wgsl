// attention.wgsl's Q_SOURCE "raw", for decode steps: qk_norm_rope_store.wgsl folded into the prologue.
// Each workgroup computes its q row, rope(rms_norm(q[t, h]) * q_w, p), from the projection output;
// the workgroup whose part holds the token's position p also computes k(p) = rope(rms_norm(k[t, g]) * k_w, p)
// and v(p) = v[t, g] into workgroup memory, rounded as the cache rounds them, and uses those for key p;
// one workgroup per (token, kv head) stores them in the cache at p: the group's last q head, so that where
// workgroups run in order (lavapipe) the others run before the store and a read of cache row p would show.
// Sound only where no workgroup of the dispatch needs another row's new key: decode steps, whose token
// rows are each the only new token of their sequence. Reads of cache row p here are discarded (key_pair and
// value4_at load the cache for every key and select k(p), v(p) after), so its store does not matter to
// this dispatch; the next step's dispatches see it. The norm, RoPE and store are common/head_norm_rope.wgsl's
// and the sums of squares are added in qk_norm_rope_store's order for the same REDUCE variant
// (attention/decode_${REDUCE}.wgsl's head_sums), so that the two paths give the same bits.
#include "common/head_norm_rope.wgsl"
#include "common/qkv_columns.wgsl"

override EPS: f32 = 1e-6;

@group(0) @binding(1) var<storage, read> q: array<f32>;              // [T_MAX, Q_STRIDE]
@group(0) @binding(2) var<storage, read_write> k_cache: array<u32>;  // [pool rows, KV_HEADS, D] words
@group(0) @binding(3) var<storage, read_write> v_cache: array<u32>;
@group(0) @binding(7) var<storage, read> k: array<f32>;              // [T_MAX, K_STRIDE]
@group(0) @binding(8) var<storage, read> v: array<f32>;              // [T_MAX, V_STRIDE]
@group(0) @binding(9) var<storage, read> q_w: array<f32>;            // [D] q norm weight
@group(0) @binding(10) var<storage, read> k_w: array<f32>;           // [D] k norm weight
@group(0) @binding(11) var<storage, read> rope: array<vec2<f32>>;    // [n_ctx, D/2] (cos, sin)

var<workgroup> new_key: array<f32, D>;                   // k(p), v(p) as the cache will hold them
var<workgroup> new_value: array<f32, D>;
var<private> new_position: u32 = 0xffffffffu;            // p where this part holds it; no key matches otherwise

// q_row = q of (token, head) row `row` normalised and rotated; where holds_position, k(p) and v(p) too.
// Called from uniform control flow (it has barriers).
fn load_query(row: u32, t: u32, kv_head: u32, position: u32, holds_position: bool, tid: u32) {
    let head = row % HEADS;
    let q_src = t * Q_STRIDE + Q_OFFSET + head * D;
    let k_src = t * K_STRIDE + K_OFFSET + kv_head * D;
    var sums = vec2<f32>(0.0, 0.0);
    if (tid < NORM_LANES) {
        for (var i = tid; i < D; i += NORM_LANES) {
            let x = q[q_src + i];
            sums.x += x * x;
            if (holds_position) {
                let y = k[k_src + i];
                sums.y += y * y;
            }
        }
    }
    sums = head_sums(sums, tid);  // attention/decode_${REDUCE}.wgsl
    let q_inv_rms = head_inv_rms(sums.x);
    for (var i = 2u * tid; i < HALF; i += 2u * WG) {
        let r = norm_rope_pairs(vec2<f32>(q[q_src + i], q[q_src + i + 1u]),
                                vec2<f32>(q[q_src + i + HALF], q[q_src + i + HALF + 1u]),
                                vec2<f32>(q_w[i], q_w[i + 1u]), vec2<f32>(q_w[i + HALF], q_w[i + HALF + 1u]),
                                q_inv_rms, position, i);
        q_row[i] = r.x;
        q_row[i + 1u] = r.y;
        q_row[i + HALF] = r.z;
        q_row[i + HALF + 1u] = r.w;
    }
    if (!holds_position) {
        return;
    }
    new_position = position;
    let k_inv_rms = head_inv_rms(sums.y);
    let stores = head % (HEADS / KV_HEADS) == HEADS / KV_HEADS - 1u;
    let dst = pool_row(rows[t].y, position) * KV_WIDTH + kv_head * D;
    for (var i = 2u * tid; i < HALF; i += 2u * WG) {
        let r = norm_rope_pairs(vec2<f32>(k[k_src + i], k[k_src + i + 1u]),
                                vec2<f32>(k[k_src + i + HALF], k[k_src + i + HALF + 1u]),
                                vec2<f32>(k_w[i], k_w[i + 1u]), vec2<f32>(k_w[i + HALF], k_w[i + HALF + 1u]),
                                k_inv_rms, position, i);
        let a = cache_rounded(r.xy);
        let b = cache_rounded(r.zw);
        new_key[i] = a.x;
        new_key[i + 1u] = a.y;
        new_key[i + HALF] = b.x;
        new_key[i + HALF + 1u] = b.y;
        if (stores) {
            store_pair(false, dst + i, r.x, r.y);
            store_pair(false, dst + i + HALF, r.z, r.w);
        }
    }
    let v_src = t * V_STRIDE + V_OFFSET + kv_head * D;
    for (var i = 2u * tid; i < D; i += 2u * WG) {
        let pair = vec2<f32>(v[v_src + i], v[v_src + i + 1u]);
        let rounded = cache_rounded(pair);
        new_value[i] = rounded.x;
        new_value[i + 1u] = rounded.y;
        if (stores) {
            store_pair(true, dst + i, pair.x, pair.y);
        }
    }
}

// Dims i, i + 1 of key position `key`, whose cache row starts at value `row`: k(p) from workgroup memory.
// The cache is read whatever the key (no branch around the load: see attention.wgsl).
fn key_pair(key: u32, row: u32, i: u32) -> vec2<f32> {
    return select(cached_key_pair(row, i), vec2<f32>(new_key[i], new_key[i + 1u]), key == new_position);
}

// Values dim .. dim + 3 of key position `key`, whose cache row starts at value `row`: v(p) from workgroup memory.
fn value4_at(key: u32, row: u32, dim: u32) -> vec4<f32> {
    let fresh = vec4<f32>(new_value[dim], new_value[dim + 1u], new_value[dim + 2u], new_value[dim + 3u]);
    return select(cached_value4(row, dim), fresh, key == new_position);
}
