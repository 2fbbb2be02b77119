// causal_conv1d: a depthwise causal convolution over the tokens of one or more sequences, carrying each
// sequence's last K - 1 input rows between steps (Gated DeltaNet's short convolution over q, k and v; transformers'
// causal_conv1d_fn / causal_conv1d_update). For sequence n (seqs[n] = (first row, rows, state slot, -)) and
// channel c, with x' = the K - 1 rows of its conv state followed by its rows of x:
//   y[first + t, c] = act(sum_{j < K} w[c, j] * x'[t + j, c])     act = SiLU when SILU, else identity
// and afterwards the state holds the last K - 1 rows of x'. A new sequence's state must start zeroed.
// Layouts: x [rows, X_STRIDE] (channel c at X_OFFSET + c), y [rows, C], w [C, K] (GGUF's ssm_conv1d),
// state [slots, K - 1, C] (slot s's row i at (s * (K - 1) + i) * C).
// Work split: one invocation per (sequence, channel), 64 per workgroup; it walks its sequence's rows in order,
// keeping the window of K - 1 inputs in registers, so reading and rewriting the state cannot race.
#include "common/step.wgsl"

override C: u32 = 768u;          // channels
override K: u32 = 4u;            // kernel taps (2..8)
override X_STRIDE: u32 = 768u;   // values per x row (>= X_OFFSET + C)
override X_OFFSET: u32 = 0u;     // column of channel 0 in an x row
override SILU: bool = true;      // apply SiLU to the output

const WG: u32 = 64u;
const MAX_K: u32 = 8u;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> x: array<f32>;            // [rows, X_STRIDE]
@group(0) @binding(2) var<storage, read> w: array<f32>;            // [C, K]
@group(0) @binding(3) var<storage, read> seqs: array<vec4<u32>>;   // [sequences] (first row, rows, slot, -)
@group(0) @binding(4) var<storage, read_write> state: array<f32>;  // [slots, K - 1, C]
@group(0) @binding(5) var<storage, read_write> y: array<f32>;      // [rows, C]

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let blocks = (C + WG - 1u) / WG;
    let seq = seqs[gid.x / (blocks * WG)];
    let c = gid.x % (blocks * WG);
    if (c >= C || seq.y == 0u || step.n_tokens == 0u) {
        return;
    }
    let sbase = seq.z * (K - 1u) * C + c;
    var window: array<f32, MAX_K>;  // window[0 .. K - 2]: the previous K - 1 inputs, oldest first
    var taps: array<f32, MAX_K>;
    for (var j = 0u; j < K; j++) {
        taps[j] = w[c * K + j];
    }
    for (var j = 0u; j + 1u < K; j++) {
        window[j] = state[sbase + j * C];
    }
    for (var r = seq.x; r < seq.x + seq.y; r++) {
        let xv = x[r * X_STRIDE + X_OFFSET + c];
        var acc = taps[K - 1u] * xv;
        for (var j = 0u; j + 1u < K; j++) {
            acc += taps[j] * window[j];
        }
        for (var j = 0u; j + 2u < K; j++) {
            window[j] = window[j + 1u];
        }
        window[K - 2u] = xv;
        y[r * C + c] = select(acc, acc / (1.0 + exp(-acc)), SILU);
    }
    for (var j = 0u; j + 1u < K; j++) {
        state[sbase + j * C] = window[j];
    }
}
