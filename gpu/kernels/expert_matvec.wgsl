// expert_matvec: the chosen experts' products of a mixture-of-experts block, for each token t and each of its
// TOP_K choices c (expert e = choice[t, c], router weight route[t, c]):
//   gate-up (DOWN false): y[t, c, j] = gelu_tanh(W[e 2N + j] . x[t]) * (W[e 2N + N + j] . x[t])   j < N
//                         x: [T_MAX, K], y: [T_MAX, TOP_K, N]; W = ffn_gate_up_exps (each expert's N gate rows,
//                         then its N up rows)
//   down (DOWN true):     y[t, j] = sum_c route[t, c] (W[e N + j] . x[t, c])                        j < N
//                         x: [T_MAX, TOP_K, K], y: [T_MAX, N]; W = ffn_down_exps (each expert's N rows)
// W is read as GGUF stores it (quant/${WEIGHT_TYPE}.wgsl decodes 16 values at a time), so only the chosen
// experts' rows are read: top_k of the experts' bytes, not all of them.
// Work split: one invocation per output value (token, choice and row; down: all choices of a row in one
// invocation, summed in order), 64 per workgroup, each walking its row 16 values at a time.
#include "common/step.wgsl"
#include "quant/bytes.wgsl"
#include "quant/${WEIGHT_TYPE}.wgsl"
#include "common/gelu_tanh.wgsl"

override K: u32 = 2816u;        // values per weight row (a multiple of BLOCK_VALUES)
override N: u32 = 704u;         // output rows per expert (gate-up: gate rows, the up rows follow)
override TOP_K: u32 = 8u;       // experts per token
override DOWN: bool = false;

const ROW_BYTES: u32 = K / BLOCK_VALUES * BLOCK_BYTES;
const GROUPS_PER_BLOCK: u32 = BLOCK_VALUES / GROUP_VALUES;
const GROUPS_PER_ROW: u32 = K / GROUP_VALUES;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> weight: array<u32>;       // every expert's rows, GGUF bytes
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;      // [T_MAX, K] or [T_MAX, TOP_K, K]
@group(0) @binding(3) var<storage, read> choice: array<u32>;       // [T_MAX, TOP_K] chosen experts
@group(0) @binding(4) var<storage, read> route: array<f32>;        // [T_MAX, TOP_K] their router weights
@group(0) @binding(5) var<storage, read_write> y: array<f32>;      // [T_MAX, TOP_K, N] or [T_MAX, N]

// W[row] . x[x_base .. x_base + K)  (x_base in values, a multiple of 16)
fn row_dot(row: u32, x_base: u32) -> f32 {
    let base = row * ROW_BYTES;
    var acc = 0.0;
    for (var gi = 0u; gi < GROUPS_PER_ROW; gi++) {
        let w = dequant16(base + (gi / GROUPS_PER_BLOCK) * BLOCK_BYTES, gi % GROUPS_PER_BLOCK);
        let xi = (x_base + gi * GROUP_VALUES) / 4u;
        acc += dot(w[0], x[xi]) + dot(w[1], x[xi + 1u]) + dot(w[2], x[xi + 2u]) + dot(w[3], x[xi + 3u]);
    }
    return acc;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * 64u + lid;
    if (DOWN) {
        if (i >= step.n_tokens * N) {
            return;
        }
        let t = i / N;
        let j = i % N;
        var sum = 0.0;
        for (var c = 0u; c < TOP_K; c++) {
            let e = choice[t * TOP_K + c];
            sum += route[t * TOP_K + c] * row_dot(e * N + j, (t * TOP_K + c) * K);
        }
        y[i] = sum;
        return;
    }
    if (i >= step.n_tokens * TOP_K * N) {
        return;
    }
    let t = i / (TOP_K * N);
    let c = (i / N) % TOP_K;
    let j = i % N;
    let e = choice[t * TOP_K + c];
    let gate = row_dot(e * 2u * N + j, t * K);
    let up = row_dot(e * 2u * N + N + j, t * K);
    y[i] = gelu_tanh(gate) * up;
}
