// gated_delta_rule: the gated delta rule recurrence of Gated DeltaNet linear attention (transformers'
// torch_recurrent_gated_delta_rule with use_qk_l2norm_in_kernel), over the rows of a step: prompt chunks, decode
// rows of many sequences, or a mix. rows[t] = (position, slot, -, -) is the step's row table (common/rows.wgsl);
// a sequence's rows in a step are consecutive, at consecutive positions. For each run of rows of one sequence,
// value head h and each row r of the run in order:
//   q = l2norm(q_r,hk) / sqrt(D_K), k = l2norm(k_r,hk), with l2norm(x) = x / sqrt(sum(x^2) + 1e-6)
//   g = A[h] * softplus(a[r, h] + dt_bias[h]) (A = -exp(A_log), as GGUF stores it), beta = sigmoid(b[r, h])
//   S = exp(g) S;  S += k (beta (v_r,h - S^T k))^T;  o[r, h] = S^T q
// S [D_K, D_V] is the sequence's state for head h, read from and written back to its slot of the state pool
// (slot s, head h at (s * H_V + h) * D_K * D_V, row-major; gpu/recurrent_state.py); a run starting at position 0
// starts from zeros instead, so a slot's old state never leaks into a new sequence. Key head hk serving value
// head h: h % H_K when V_TILED (llama.cpp's GGUF order), else h / (H_V / H_K) (transformers' repeat_interleave).
// Work split: one workgroup per (row, value head, block of COLS state columns) over a 2-D grid; only the workgroups
// of a run's first row work (the others return at once), each walking its run. A state column's D_K values are
// spread over LANES invocations, D_K / LANES registers each (few enough to stay in registers: a whole column per
// invocation spills to memory), and the rule's sums over a column (S^T k, S^T q, and q's and k's norms) are
// gathered from the lanes through workgroup memory. Invocation lid serves column lid % COLS of the block (adjacent
// invocations, adjacent columns: the state's loads and stores coalesce) and its rows lane + j * LANES.
#include "common/step.wgsl"

override H_K: u32 = 2u;          // query / key heads
override H_V: u32 = 4u;          // value heads (a multiple of H_K)
override D_K: u32 = 128u;        // query / key head dimension: rows of the state
override D_V: u32 = 128u;        // value head dimension: columns of the state
override COLS: u32 = 16u;        // state columns per workgroup (divides D_V)
override LANES: u32 = 16u;       // invocations sharing a column (divides D_K)
override V_TILED: bool = true;   // key head of value head h: h % H_K (true) or h / (H_V / H_K)
override QKV_STRIDE: u32 = 768u; // values per q/k/v row (the causal conv's output row)
override Q_OFFSET: u32 = 0u;     // column of q's head 0 in that row
override K_OFFSET: u32 = 256u;   // column of k's head 0
override V_OFFSET: u32 = 512u;   // column of v's head 0
override AB_STRIDE: u32 = 4u;    // values per a row and per b row
override A_OFFSET: u32 = 0u;     // column of a's head 0 (the decay input, "alpha")
override B_OFFSET: u32 = 0u;     // column of b's head 0 (the update rate input, "beta")
override O_STRIDE: u32 = 512u;   // values per output row (>= H_V * D_V)

const WG: u32 = COLS * LANES;
const ROWS: u32 = D_K / LANES;   // state values per invocation
const QK_EPS: f32 = 1e-6;        // added to the sum of squares (FLA's and transformers' l2norm)
const SOFTPLUS_LINEAR: f32 = 20.0;  // torch's softplus threshold: softplus(x) = x above it

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> qkv: array<f32>;          // [rows, QKV_STRIDE]
@group(0) @binding(2) var<storage, read> a: array<f32>;            // [rows, AB_STRIDE]
@group(0) @binding(3) var<storage, read> b: array<f32>;            // [rows, AB_STRIDE]
@group(0) @binding(4) var<storage, read> ssm_a: array<f32>;        // [H_V] A = -exp(A_log)
@group(0) @binding(5) var<storage, read> dt_bias: array<f32>;      // [H_V]
@group(0) @binding(6) var<storage, read> rows: array<vec4<u32>>;   // [T_MAX] (position, slot, -, -)
@group(0) @binding(7) var<storage, read_write> state: array<f32>;  // [slots, H_V, D_K, D_V]
@group(0) @binding(8) var<storage, read_write> o: array<f32>;      // [rows, O_STRIDE]

var<workgroup> q_row: array<f32, D_K>;
var<workgroup> k_row: array<f32, D_K>;
var<workgroup> sums: array<vec3<f32>, WG>;  // per invocation: its rows' part of (S^T k, k.k, q.q)
var<workgroup> outs: array<f32, WG>;        // per invocation: its rows' part of S^T q

fn softplus(x: f32) -> f32 {
    return select(log(1.0 + exp(x)), x, x > SOFTPLUS_LINEAR);
}

// Whether row t continues the sequence of row t - 1 in the step.
fn continues(t: u32) -> bool {
    return t > 0u && rows[t - 1u].y == rows[t].y && rows[t - 1u].x + 1u == rows[t].x;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let blocks = D_V / COLS;
    let id = wid.x + wid.y * nwg.x;  // uniform across the workgroup, as everything the branches below read
    let first = id / (blocks * H_V);
    if (first >= step.n_tokens || continues(first)) {
        return;
    }
    let h = (id / blocks) % H_V;
    let c = lid % COLS;
    let lane = lid / COLS;
    let col = (id % blocks) * COLS + c;
    let hk = select(h / (H_V / H_K), h % H_K, V_TILED);
    let slot = rows[first].y;
    let base = (slot * H_V + h) * D_K * D_V + col;
    let fresh = rows[first].x == 0u;
    var s: array<f32, ROWS>;  // rows lane + j * LANES of the column
    for (var j = 0u; j < ROWS; j++) {
        s[j] = select(state[base + (lane + j * LANES) * D_V], 0.0, fresh);
    }
    let a_coef = ssm_a[h];
    let bias = dt_bias[h];
    for (var r = first; r < step.n_tokens && (r == first || continues(r)); r++) {
        let row = r * QKV_STRIDE;
        workgroupBarrier();  // the previous row's q, k and sums are read by everyone
        for (var i = lid; i < D_K; i += WG) {
            q_row[i] = qkv[row + Q_OFFSET + hk * D_K + i];
            k_row[i] = qkv[row + K_OFFSET + hk * D_K + i];
        }
        workgroupBarrier();
        let decay = exp(a_coef * softplus(a[r * AB_STRIDE + A_OFFSET + h] + bias));
        let beta = 1.0 / (1.0 + exp(-b[r * AB_STRIDE + B_OFFSET + h]));
        // q and k are normalised by scaling the sums they enter (one pass gathers their norms and S^T k)
        var part = vec3<f32>(0.0);
        for (var j = 0u; j < ROWS; j++) {
            let i = lane + j * LANES;
            let kvalue = k_row[i];
            s[j] *= decay;
            part += vec3<f32>(s[j] * kvalue, kvalue * kvalue, q_row[i] * q_row[i]);
        }
        sums[lid] = part;
        workgroupBarrier();
        var total = vec3<f32>(0.0);  // (S^T k)[col] after the decay, k.k and q.q, k and q not yet normalised
        for (var l = 0u; l < LANES; l++) {
            total += sums[l * COLS + c];
        }
        let q_scale = inverseSqrt(total.z + QK_EPS) * inverseSqrt(f32(D_K));
        let k_scale = inverseSqrt(total.y + QK_EPS);
        let delta = beta * (qkv[row + V_OFFSET + h * D_V + col] - total.x * k_scale);
        var out = 0.0;
        for (var j = 0u; j < ROWS; j++) {
            let i = lane + j * LANES;
            s[j] += k_row[i] * k_scale * delta;
            out += s[j] * q_row[i];
        }
        outs[lid] = out;
        workgroupBarrier();
        if (lane == 0u) {
            var o_total = 0.0;
            for (var l = 0u; l < LANES; l++) {
                o_total += outs[l * COLS + c];
            }
            o[r * O_STRIDE + h * D_V + col] = o_total * q_scale;
        }
    }
    for (var j = 0u; j < ROWS; j++) {
        state[base + (lane + j * LANES) * D_V] = s[j];
    }
}
