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
// A run is walked BLOCK rows at a time: their q, k, v, decay and update rate are staged in workgroup memory
// together, so that a row's step waits on no global load, and each row takes one barrier (the sums' buffers
// alternate between rows; a row's output is summed after the next row's barrier).
#include "common/step.wgsl"
#include "common/delta_runs.wgsl"

override H_K: u32 = 2u;          // query / key heads
override H_V: u32 = 4u;          // value heads (a multiple of H_K)
override D_K: u32 = 128u;        // query / key head dimension: rows of the state
override D_V: u32 = 128u;        // value head dimension: columns of the state
override COLS: u32 = 16u;        // state columns per workgroup (divides D_V)
override LANES: u32 = 16u;       // invocations sharing a column (divides D_K)
override BLOCK: u32 = 8u;        // rows staged together
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

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> qkv: array<f32>;          // [rows, QKV_STRIDE]
@group(0) @binding(2) var<storage, read> a: array<f32>;            // [rows, AB_STRIDE]
@group(0) @binding(3) var<storage, read> b: array<f32>;            // [rows, AB_STRIDE]
@group(0) @binding(4) var<storage, read> ssm_a: array<f32>;        // [H_V] A = -exp(A_log)
@group(0) @binding(5) var<storage, read> dt_bias: array<f32>;      // [H_V]
@group(0) @binding(6) var<storage, read> rows: array<vec4<u32>>;   // [T_MAX] (position, slot, -, -)
@group(0) @binding(7) var<storage, read_write> state: array<f32>;  // [slots, H_V, D_K, D_V]
@group(0) @binding(8) var<storage, read_write> o: array<f32>;      // [rows, O_STRIDE]

// the block's rows: q and k [BLOCK, D_K], v of the workgroup's columns [BLOCK, COLS], decay and update rate
var<workgroup> q_blk: array<f32, BLOCK * D_K>;
var<workgroup> k_blk: array<f32, BLOCK * D_K>;
var<workgroup> v_blk: array<f32, BLOCK * COLS>;
var<workgroup> decay_blk: array<f32, BLOCK>;
var<workgroup> beta_blk: array<f32, BLOCK>;
// per invocation, in two buffers that alternate between rows: its rows' part of S^T k and of S^T q; per lane
// (column 0's invocations): its rows' part of k.k and q.q
var<workgroup> kv_parts: array<f32, 2u * WG>;
var<workgroup> norm_parts: array<vec2<f32>, 2u * LANES>;
var<workgroup> out_parts: array<f32, 2u * WG>;

// Column c's output for the row whose parts are in buffer p (lane 0 of the column writes it).
fn write_out(p: u32, c: u32, r: u32, h: u32, col: u32, q_scale: f32) {
    var total = 0.0;
    for (var l = 0u; l < LANES; l++) {
        total += out_parts[p * WG + l * COLS + c];
    }
    o[r * O_STRIDE + h * D_V + col] = total * q_scale;
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
    let col0 = (id % blocks) * COLS;
    let col = col0 + c;
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
    var p = 0u;               // the buffer of the current row's parts
    var pending = false;      // a row's output is still to be written (its parts in buffer 1 - p)
    var pending_row = 0u;
    var pending_scale = 0.0;
    var r0 = first;
    loop {
        // stage the next BLOCK rows (past the step: the step's last row again, never used)
        workgroupBarrier();  // the previous block's staged rows are read by everyone
        for (var i = lid; i < BLOCK * D_K; i += WG) {
            let t = r0 + i / D_K;
            let row = min(t, step.n_tokens - 1u) * QKV_STRIDE;
            q_blk[i] = qkv[row + Q_OFFSET + hk * D_K + i % D_K];
            k_blk[i] = qkv[row + K_OFFSET + hk * D_K + i % D_K];
        }
        for (var i = lid; i < BLOCK * COLS; i += WG) {
            let t = min(r0 + i / COLS, step.n_tokens - 1u);
            v_blk[i] = qkv[t * QKV_STRIDE + V_OFFSET + h * D_V + col0 + i % COLS];
        }
        for (var i = lid; i < BLOCK; i += WG) {
            let tc = min(r0 + i, step.n_tokens - 1u);
            decay_blk[i] = exp(a_coef * softplus(a[tc * AB_STRIDE + A_OFFSET + h] + bias));
            beta_blk[i] = 1.0 / (1.0 + exp(-b[tc * AB_STRIDE + B_OFFSET + h]));
        }
        workgroupBarrier();
        var stop = false;
        for (var u = 0u; u < BLOCK; u++) {
            let t = r0 + u;  // a row past the step or the run ends the walk
            if (t >= step.n_tokens || (t != first && !continues(t))) {
                stop = true;
                break;
            }
            let decay = decay_blk[u];
            // q and k are normalised by scaling the sums they enter (one pass gathers their norms and S^T k)
            var kv = 0.0;
            var norms = vec2<f32>(0.0);
            for (var j = 0u; j < ROWS; j++) {
                let i = u * D_K + lane + j * LANES;
                let kvalue = k_blk[i];
                s[j] *= decay;
                kv += s[j] * kvalue;
                norms += vec2<f32>(kvalue * kvalue, q_blk[i] * q_blk[i]);
            }
            kv_parts[p * WG + lid] = kv;
            if (c == 0u) {
                norm_parts[p * LANES + lane] = norms;
            }
            workgroupBarrier();
            if (pending && lane == 0u) {
                write_out(1u - p, c, pending_row, h, col, pending_scale);
            }
            var kv_total = 0.0;
            for (var l = 0u; l < LANES; l++) {
                kv_total += kv_parts[p * WG + l * COLS + c];
            }
            var norm_total = vec2<f32>(0.0);
            for (var l = 0u; l < LANES; l++) {
                norm_total += norm_parts[p * LANES + l];
            }
            let k_scale = inverseSqrt(norm_total.x + QK_EPS);
            let delta = beta_blk[u] * (v_blk[u * COLS + c] - kv_total * k_scale);
            var out = 0.0;
            for (var j = 0u; j < ROWS; j++) {
                let i = u * D_K + lane + j * LANES;
                s[j] += k_blk[i] * k_scale * delta;
                out += s[j] * q_blk[i];
            }
            out_parts[p * WG + lid] = out;
            pending = true;
            pending_row = r0 + u;
            pending_scale = inverseSqrt(norm_total.y + QK_EPS) * inverseSqrt(f32(D_K));
            p = 1u - p;
        }
        if (stop) {
            break;
        }
        r0 += BLOCK;
    }
    workgroupBarrier();
    if (pending && lane == 0u) {
        write_out(1u - p, c, pending_row, h, col, pending_scale);
    }
    for (var j = 0u; j < ROWS; j++) {
        state[base + (lane + j * LANES) * D_V] = s[j];
    }
}
