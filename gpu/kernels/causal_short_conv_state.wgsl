// causal_short_conv_state: moves each sequence's conv state past a step's rows: the K - 1 inputs (B * x, or x) up to
// the last row of the sequence in the step, oldest first (common/conv_state_rows.wgsl), taken from the step's rows
// and the old state (a step shorter than K - 1 rows keeps part of it). Runs after causal_short_conv has read it.
// Work split: one invocation per (row, channel), 256 per workgroup; only each sequence's last row of the step writes,
// reading every value it needs before writing, so no two invocations touch one state value.
#include "common/step.wgsl"

override C: u32 = 1024u;       // channels
override K: u32 = 3u;          // taps (at most MAX_K)
override STRIDE: u32 = 3072u;  // values per row of bcx
override B_COL: u32 = 0u;      // first column of B in bcx
override X_COL: u32 = 2048u;   // of x
override GATED: bool = true;   // the input is B * x, else x

const MAX_K: u32 = 8u;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> bcx: array<f32>;            // [T_MAX, STRIDE] in-projection output
@group(0) @binding(2) var<storage, read_write> state: array<f32>;    // [slots, K - 1, C] conv state
@group(0) @binding(3) var<storage, read> rows: array<vec4<u32>>;     // [T_MAX] (position, slot, -, -)

#include "common/conv_state_rows.wgsl"

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * 256u + lid;
    if (i >= step.n_tokens * C) {
        return;
    }
    let t = i / C;
    let c = i % C;
    let row = rows[t];
    if (t + 1u < step.n_tokens) {
        let next = rows[t + 1u];
        if (next.y == row.y && next.x == row.x + 1u) {
            return;  // not the sequence's last row in this step
        }
    }
    let run = run_before(t);
    var kept: array<f32, MAX_K>;
    for (var j = 0u; j < K - 1u; j++) {
        kept[j] = input_back(t, c, K - 2u - j, run);
    }
    for (var j = 0u; j < K - 1u; j++) {
        state[(row.y * (K - 1u) + j) * C + c] = kept[j];
    }
}
