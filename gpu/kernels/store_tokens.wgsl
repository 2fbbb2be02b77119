// store_tokens: hand each sequence's sampled token to its next decode step.
//   slot_tokens[rows[out_rows[r]].y] = sampled[r]   for r < step.n_out
// The next step's get_rows reads slot_tokens for rows marked as decoding (common/rows.wgsl), so a
// run of decode steps needs no host round trip between them.
// Work split: one workgroup; invocation r takes output row r (at most a few hundred rows).
#include "common/step.wgsl"

const WG: u32 = 256u;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> sampled: array<u32>;            // [R_MAX] sampled token ids
@group(0) @binding(2) var<storage, read> out_rows: array<u32>;           // [R_MAX] token row of each
@group(0) @binding(3) var<storage, read> rows: array<vec4<u32>>;         // [T_MAX] (position, slot, -, -)
@group(0) @binding(4) var<storage, read_write> slot_tokens: array<u32>;  // [slots]

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) lid: u32) {
    for (var r = lid; r < step.n_out; r += WG) {
        slot_tokens[rows[out_rows[r]].y] = sampled[r];
    }
}
