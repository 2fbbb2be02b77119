// A head row's RMS norm and NeoX RoPE, and its store into the KV cache: the math that
// qk_norm_rope_store.wgsl and attention's fused prologue (attention/q_raw.wgsl) share, so that
// both compute the same bits for the same row.
// QK_NORM false (networks without q/k norms: Llama, Qwen 2, Mistral, Phi, Gemma 1 and 2): rows are rotated
// as they are; the norm weights are then not used.
// The including kernel declares the overrides D, EPS and KV_F16 and the bindings
// `rope: array<vec2<f32>>` ([n_ctx, D/2] (cos, sin)) and `k_cache`, `v_cache: array<u32>` (read_write).

#include "common/norm_lanes.wgsl"
#include "common/f16_rounded.wgsl"

override QK_NORM: bool = true;

const HALF: u32 = D / 2u;

// 1 / rms of a head row of D values, from the sum of their squares.
fn head_inv_rms(sum_of_squares: f32) -> f32 {
    return inverseSqrt(sum_of_squares / f32(D) + EPS);
}

// Dims (i, i + 1) = a and (i + HALF, i + HALF + 1) = b of a head row (i even) normalised (x * inv_rms * w)
// and rotated by NeoX RoPE at `position` (dims i and i + HALF rotate together): vec4(a'.x, a'.y, b'.x, b'.y).
fn norm_rope_pairs(a: vec2<f32>, b: vec2<f32>, w_a: vec2<f32>, w_b: vec2<f32>, inv_rms: f32, position: u32,
                   i: u32) -> vec4<f32> {
    var na = a;
    var nb = b;
    if (QK_NORM) {
        na = a * inv_rms * w_a;
        nb = b * inv_rms * w_b;
    }
    let c0 = rope[position * HALF + i];
    let c1 = rope[position * HALF + i + 1u];
    let cs = vec2<f32>(c0.x, c1.x);
    let sn = vec2<f32>(c0.y, c1.y);
    return vec4<f32>(na * cs - nb * sn, nb * cs + na * sn);
}

// Store value index `at` (even) and at + 1 of a cache row: one packed word, or two f32 words.
fn store_pair(is_value: bool, at: u32, a: f32, b: f32) {
    if (KV_F16) {
        let word = pack2x16float(vec2<f32>(a, b));
        if (is_value) { v_cache[at / 2u] = word; } else { k_cache[at / 2u] = word; }
    } else if (is_value) {
        v_cache[at] = bitcast<u32>(a);
        v_cache[at + 1u] = bitcast<u32>(b);
    } else {
        k_cache[at] = bitcast<u32>(a);
        k_cache[at + 1u] = bitcast<u32>(b);
    }
}

// A pair of values as the cache gives them back once store_pair has stored them.
fn cache_rounded(pair: vec2<f32>) -> vec2<f32> {
    if (KV_F16) {
        return vec2<f32>(f16_rounded(pair.x), f16_rounded(pair.y));
    }
    return pair;
}
