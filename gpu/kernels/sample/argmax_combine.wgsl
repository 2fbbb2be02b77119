// argmax_combine: pass 2 of argmax and gumbel sampling. out_ids[row] = the index of the best of
// the row's CHUNKS partial (order key, index) pairs written by argmax_partial.wgsl or
// gumbel_partial.wgsl: the largest key, the lowest index among equal keys.
// Work split: one workgroup of 256 invocations per row; invocation i reads chunks i, i + 256, ...
// then sample/reduce_${REDUCE}.wgsl reduces the pairs.
#include "sample/order_key.wgsl"
#include "sample/reduce_${REDUCE}.wgsl"

override ROWS: u32 = 1u;       // logits rows
override CHUNKS: u32 = 128u;   // partials per row

const WG: u32 = 256u;

@group(0) @binding(0) var<storage, read> partials: array<vec2<u32>>;  // [ROWS, CHUNKS] (key, index)
@group(0) @binding(1) var<storage, read_write> out_ids: array<u32>;   // [>= ROWS] token ids

fn group_main(row: u32, lid: u32) {
    if (row >= ROWS) {
        return;
    }
    var best = vec2<u32>(EMPTY_KEY, 0xFFFFFFFFu);
    for (var c = lid; c < CHUNKS; c += WG) {
        best = better_pair(best, partials[row * CHUNKS + c]);
    }
    let row_best = best_pair(best.x, best.y);
    if (lid == 0u) {
        out_ids[row] = row_best.y;
    }
}
