// attention_combine: merge the SPLITS partial softmaxes of attention.wgsl into each row's output.
//   M = max_s m_s,  L = sum_s l_s e^(m_s - M),  out[row, :] = sum_s acc_s e^(m_s - M) / L
// A part with no keys has m = -max f32 and l = 0, so its weight is 0.
// Work split: one workgroup of 256 invocations per (token, head) row. Only the row's first `parts`
// parts can hold keys (attention/key_parts.wgsl, as attention.wgsl cut them). Invocation s < SPLITS
// loads part s's (m, l) into workgroup memory (every part, so that these loads need not wait for the
// row table's), and every invocation has M and L over the first `parts` from those broadcast reads:
// by subgroupMax / subgroupAdd over lanes that take a part each (attention/combine_subgroup.wgsl), or by
// walking the parts (attention/combine_workgroup.wgsl; 2 x 32 reads one after another at 32 parts).
// Then invocation i takes dims 4 (i % (D/4)) .. + 3 of every P_GROUPS-th part from part i / (D/4)
// (8 parts each for D = 256 and 32 parts), its loads in a constant-trip loop without a branch so that
// they are in flight together, and the groups' sums meet in workgroup memory. (One invocation per dim
// walking all 32 parts, a load each behind a branch, took 12.2 us on an H100 where the constant-trip
// loads took 6.8.)
#include "common/step.wgsl"
#include "attention/key_parts.wgsl"
#include "attention/combine_${REDUCE}.wgsl"

override D: u32 = 256u;
override HEADS: u32 = 4u;
override SPLITS: u32 = 2u;
override WINDOW: u32 = 0u;         // as attention.wgsl's: which keys a row sees,
override MIN_PART_KEYS: u32 = 16u; // and how many parts they fill
override LATER_KEYS: bool = true;  // (rows[t].w honoured or not)

override WG: u32 = 256u;          // invocations a workgroup, at least D / 4 (software adapters: D / 4)
const QUADS: u32 = D / 4u;                      // vec4s of a row
const P_GROUPS: u32 = min(WG / QUADS, SPLITS);  // invocations sharing a dim quad
const P_PARTS: u32 = (SPLITS + P_GROUPS - 1u) / P_GROUPS;  // parts each of them adds
const STRIDE4: u32 = D / 4u + 1u;               // vec4s per part: acc, then (m, l, -, -)
const NEG_BIG: f32 = -3.4028235e38;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> partials: array<vec4<f32>>;  // [T_MAX * HEADS, SPLITS, D + 4]: acc[D], m, l, -, -
@group(0) @binding(2) var<storage, read_write> out: array<f32>;       // [T_MAX, HEADS, D]
@group(0) @binding(3) var<storage, read> rows: array<vec4<u32>>;      // [T_MAX] (position, slot, -, -)

var<workgroup> part_max: array<f32, SPLITS>;
var<workgroup> part_sum: array<f32, SPLITS>;
var<workgroup> group_sums: array<vec4<f32>, WG>;

// M and L over the first `parts` parts, walking part_max and part_sum (every invocation the same order).
fn memory_part_stats(parts: u32) -> vec2<f32> {
    var m = NEG_BIG;
    for (var s = 0u; s < parts; s++) {
        m = max(m, part_max[s]);
    }
    var total = 0.0;
    for (var s = 0u; s < parts; s++) {
        total += part_sum[s] * exp(part_max[s] - m);
    }
    return vec2<f32>(m, total);
}

// The merge of (token, head) row `row`; tid: the invocation's role.
fn combine_main(row: u32, tid: u32) {
    if (row >= step.n_tokens * HEADS) {
        return;
    }
    let first = row * SPLITS * STRIDE4;
    let r = rows[row / HEADS];
    let parts = key_parts(r.x, r.x + select(0u, r.w, LATER_KEYS)).parts;  // parts past these hold no keys
    for (var s = tid; s < SPLITS; s += WG) {
        let ml = partials[first + s * STRIDE4 + D / 4u];
        part_max[s] = ml.x;
        part_sum[s] = ml.y;
    }
    workgroupBarrier();
    let stats = part_stats(parts);   // attention/combine_${REDUCE}.wgsl: (M, L)
    let m = stats.x;
    let quad = tid % QUADS;
    let group = tid / QUADS;
    var sum = vec4<f32>(0.0);
    if (group < P_GROUPS) {
        for (var i = 0u; i < P_PARTS; i++) {
            // past the last part that can hold keys: read that part again (a cache hit) at weight 0
            let s = min(group + i * P_GROUPS, parts - 1u);
            let weight = select(0.0, exp(part_max[s] - m), group + i * P_GROUPS < parts);
            sum += partials[first + s * STRIDE4 + quad] * weight;
        }
    }
    group_sums[tid] = sum;
    workgroupBarrier();
    if (tid < QUADS) {
        var total_sum = group_sums[tid];
        for (var g = 1u; g < P_GROUPS; g++) {
            total_sum += group_sums[g * QUADS + tid];
        }
        let at = row * D + 4u * tid;
        let value = total_sum / stats.y;
        out[at] = value.x;
        out[at + 1u] = value.y;
        out[at + 2u] = value.z;
        out[at + 3u] = value.w;
    }
}
