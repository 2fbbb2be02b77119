// gumbel_partial: pass 1 of sampling from softmax(logits[r] * inv_temperature[r]) by the
// Gumbel-max trick: the index of max_i (logits[r, i] * inv_t + G_i), with G_i independent standard
// Gumbel noise, is distributed exactly as that softmax. G_i comes from Philox4x32-10
// (sample/philox.wgsl) with key (seed_lo, seed_hi) of the row and counter (i / 4, step.seed, 0, 0),
// word i % 4: the same seeds and step give the same token, and the caller changes step.seed every
// step. A row whose inv_temperature is 0, negative, infinite or NaN (temperature 0) takes the
// plain argmax, so greedy and sampled rows share a batch. -inf and NaN logits never win unless the
// whole row is -inf or NaN; +inf logits always win (the lowest index of them).
// Each workgroup writes its chunk's best (order key of the score, index), like argmax_partial.wgsl;
// argmax_combine.wgsl picks each row's best chunk.
// Work split: ROWS * CHUNKS workgroups of WG invocations; an invocation takes 4 consecutive
// values at a time (one Philox call gives their 4 words), groups of 4 strided by WG.
#include "common/step.wgsl"
#include "sample/order_key.wgsl"
#include "sample/philox.wgsl"
#include "sample/reduce_${REDUCE}.wgsl"

override V: u32 = 262144u;     // values per logits row (vocabulary)
override ROWS: u32 = 1u;       // logits rows
override CHUNK: u32 = 2048u;   // values per workgroup, a multiple of 4
override CHUNKS: u32 = 128u;   // workgroups per row: ceil(V / CHUNK)

override WG: u32 = 256u;     // invocations a workgroup, a power of two (8 on software adapters)

// One row's sampling parameters, mirrored by gpu.ops.sampling.SAMPLE_PARAMS_FIELDS.
struct SampleParams {
    inv_temperature: u32,  // f32 bits of 1 / temperature; argmax unless positive and finite
    seed_lo: u32,          // low word of the row's 64-bit seed (the Philox key)
    seed_hi: u32,          // high word of the seed, 0 for 32-bit seeds
    reserved: u32,         // not read here: mask_logits.wgsl reads it as the row's masked flag
}

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> params: array<SampleParams>;       // [ROWS]
@group(0) @binding(2) var<storage, read> logits: array<u32>;                // [ROWS, V] f32 bits
@group(0) @binding(3) var<storage, read_write> partials: array<vec2<u32>>;  // [ROWS, CHUNKS] (key, index)

fn group_main(group: u32, lid: u32) {
    if (group >= ROWS * CHUNKS) {
        return;
    }
    let row = group / CHUNKS;
    let first = (group % CHUNKS) * CHUNK;
    let count = min(CHUNK, V - first);
    let base = row * V + first;
    let p = params[row];
    let greedy = p.inv_temperature == 0u || p.inv_temperature >= 0x7F800000u;  // also every negative
    let inv_t = bitcast<f32>(p.inv_temperature);
    var best = vec2<u32>(EMPTY_KEY, 0xFFFFFFFFu);
    for (var n = 4u * lid; n < count; n += 4u * WG) {
        var noise = vec4<u32>(0u);
        if (!greedy) {
            noise = philox4x32_10(vec4<u32>((first + n) / 4u, step.seed, 0u, 0u), vec2<u32>(p.seed_lo, p.seed_hi));
        }
        for (var e = 0u; e < 4u; e++) {
            if (n + e < count) {
                let bits = logits[base + n + e];
                var key = order_key(bits);
                if (!greedy && key_is_finite(key)) {
                    key = order_key(bitcast<u32>(bitcast<f32>(bits) * inv_t + gumbel_noise(noise[e])));
                }
                if (key > best.x) {
                    best = vec2<u32>(key, first + n + e);
                }
            }
        }
    }
    let chunk_best = best_pair(best.x, best.y);
    if (lid == 0u) {
        partials[group] = chunk_best;
    }
}
