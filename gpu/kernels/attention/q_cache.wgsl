// attention.wgsl's Q_SOURCE "cache": q as qk_norm_rope_store.wgsl wrote it, every key and value
// (the token's own included) from the cache, which that dispatch has already appended to.

@group(0) @binding(1) var<storage, read> q: array<f32>;          // [T_MAX, HEADS, D]
@group(0) @binding(2) var<storage, read> k_cache: array<u32>;    // [pool rows, KV_HEADS, D] words
@group(0) @binding(3) var<storage, read> v_cache: array<u32>;

// q_row = q of (token, head) row `row`.
fn load_query(row: u32, t: u32, kv_head: u32, position: u32, holds_position: bool, tid: u32) {
    for (var i = tid; i < D; i += WG) {
        q_row[i] = q[row * D + i];
    }
}

// Dims i, i + 1 of key position `key`, whose cache row starts at value `row`.
fn key_pair(key: u32, row: u32, i: u32) -> vec2<f32> {
    return cached_key_pair(row, i);
}

// Values dim .. dim + 3 of key position `key`, whose cache row starts at value `row`.
fn value4_at(key: u32, row: u32, dim: u32) -> vec4<f32> {
    return cached_value4(row, dim);
}
