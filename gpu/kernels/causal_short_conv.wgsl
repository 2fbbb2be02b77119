// causal_short_conv: a depthwise causal convolution over each sequence's positions, of a step's rows:
//   GATED (LFM2's gated short conv, from the in-projection's B, C and x columns):
//     out[t, c] = C[t, c] * sum_j w[c, j] * (B * x)[position(t) - (K - 1) + j, c]
//   else (Gated DeltaNet's q|k|v conv):  out[t, c] = act(sum_j w[c, j] * x[position(t) - (K - 1) + j, c])
// with act SiLU where SILU, else none. Inputs before the step come from the sequence's conv state
// (common/conv_state_rows.wgsl); causal_short_conv_state.wgsl then moves the state on, or, where each sequence has
// one row in the step (decode; STORE), this kernel does: each invocation is then the only one to touch its
// sequence's channel of the state, and reads it before writing.
// Rows of several sequences may share a step (prompt chunks of one, decode rows of many).
// Work split: one invocation per (row, channel), 256 per workgroup.
#include "common/step.wgsl"

override C: u32 = 1024u;       // channels
override K: u32 = 3u;          // taps
override STRIDE: u32 = 3072u;  // values per row of bcx
override B_COL: u32 = 0u;      // first column of B in bcx
override C_COL: u32 = 1024u;   // of C
override X_COL: u32 = 2048u;   // of x
override GATED: bool = true;   // B * x in, C * conv out; else x in (B_COL, C_COL not read)
override SILU: bool = false;   // SiLU on the convolution's output (before any C gate)
override STORE: bool = false;  // one row per sequence: move the state on here too

const MAX_K: u32 = 8u;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> bcx: array<f32>;         // [T_MAX, STRIDE] in-projection output
@group(0) @binding(2) var<storage, read> w: array<f32>;           // [C, K] taps, the oldest input's first
@group(0) @binding(3) var<storage, read_write> state: array<f32>; // [slots, K - 1, C] conv state (STORE: updated)
@group(0) @binding(4) var<storage, read> rows: array<vec4<u32>>;  // [T_MAX] (position, slot, -, -)
@group(0) @binding(5) var<storage, read_write> out: array<f32>;   // [T_MAX, C]

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
    let run = run_before(t);
    var acc = 0.0;
    for (var j = 0u; j < K; j++) {
        acc += w[c * K + j] * input_back(t, c, K - 1u - j, run);
    }
    var y = acc;
    if (SILU) {
        y = y / (1.0 + exp(-y));
    }
    if (GATED) {
        y = bcx[t * STRIDE + C_COL + c] * y;
    }
    out[i] = y;
    if (STORE) {
        var kept: array<f32, MAX_K>;
        for (var j = 0u; j < K - 1u; j++) {
            kept[j] = input_back(t, c, K - 2u - j, run);
        }
        let slot = rows[t].y;
        for (var j = 0u; j < K - 1u; j++) {
            state[(slot * (K - 1u) + j) * C + c] = kept[j];
        }
    }
}
