// argmax_partial: pass 1 of argmax. Each workgroup takes CHUNK consecutive logits of one row and
// writes the chunk's best (order key, index): the largest value, the lowest index among equal
// ones, NaN counted as -inf (sample/order_key.wgsl). argmax_combine.wgsl then picks each row's
// best chunk.
// Work split: ROWS * CHUNKS workgroups of WG invocations (group = row * CHUNKS + chunk); an
// invocation walks the chunk with stride WG (adjacent invocations read adjacent words) keeping
// its first best, then sample/reduce_${REDUCE}.wgsl reduces the workgroup's pairs.
#include "sample/order_key.wgsl"
#include "sample/reduce_${REDUCE}.wgsl"

override V: u32 = 262144u;     // values per logits row (vocabulary)
override ROWS: u32 = 1u;       // logits rows
override CHUNK: u32 = 2048u;   // values per workgroup
override CHUNKS: u32 = 128u;   // workgroups per row: ceil(V / CHUNK)

override WG: u32 = 256u;     // invocations a workgroup, a power of two (8 on software adapters)

@group(0) @binding(0) var<storage, read> logits: array<u32>;                // [ROWS, V] f32 bits
@group(0) @binding(1) var<storage, read_write> partials: array<vec2<u32>>;  // [ROWS, CHUNKS] (key, index)

fn group_main(group: u32, lid: u32) {
    if (group >= ROWS * CHUNKS) {
        return;
    }
    let row = group / CHUNKS;
    let first = (group % CHUNKS) * CHUNK;
    let count = min(CHUNK, V - first);
    let base = row * V + first;
    var best = vec2<u32>(EMPTY_KEY, 0xFFFFFFFFu);
    for (var n = lid; n < count; n += WG) {
        let key = order_key(logits[base + n]);
        if (key > best.x) {
            best = vec2<u32>(key, first + n);
        }
    }
    let chunk_best = best_pair(best.x, best.y);
    if (lid == 0u) {
        partials[group] = chunk_best;
    }
}
