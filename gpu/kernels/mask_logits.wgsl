// mask_logits: in place on the output rows' logits: a row whose sampling params say it is constrained
// (params[r].masked != 0) keeps logits[r, i] only where bit i % 32 of mask[r, i / 32] is set; the others
// become -inf, so no sampler (argmax, Gumbel-max, top candidates) and no read-back row can pick them.
// Rows that are not constrained are left as they are.
// Work split: one invocation per mask word (32 logits) of the step's first n_out rows, 256 per workgroup;
// an invocation whose word allows all 32 tokens writes nothing.
#include "common/step.wgsl"

override V: u32 = 262144u;   // logits per row
override WORDS: u32 = 8192u; // mask words per row: ceil(V / 32)

// One row's sampling parameters (as in sample/gumbel_partial.wgsl); only `masked` is read here.
struct SampleParams {
    inv_temperature: u32,  // f32 bits of 1 / temperature
    seed: u32,             // the row's seed
    position: u32,         // the position the row samples for
    masked: u32,           // 1: apply the row's token mask; 0: leave the row as it is
}

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> params: array<SampleParams>;     // [R_MAX]
@group(0) @binding(2) var<storage, read> mask: array<u32>;                // [R_MAX, WORDS] allowed-token bits
@group(0) @binding(3) var<storage, read_write> logits: array<u32>;        // [R_MAX, V] f32 bits

const NEG_INF: u32 = 0xFF800000u;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * 256u + lid;
    if (i >= step.n_out * WORDS) {
        return;
    }
    let row = i / WORDS;
    let word = i % WORDS;
    if (params[row].masked == 0u) {
        return;
    }
    let allowed = mask[i];
    if (allowed == 0xFFFFFFFFu) {
        return;
    }
    let first = word * 32u;
    let count = min(32u, V - first);
    for (var b = 0u; b < count; b++) {
        if ((allowed & (1u << b)) == 0u) {
            logits[row * V + first + b] = NEG_INF;
        }
    }
}
