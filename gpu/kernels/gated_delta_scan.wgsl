// gated_delta_scan: the state-carrying half of the gated delta rule's chunked form over a prompt step's rows,
// after gated_delta_chunk.wgsl wrote each segment's W, U, P and G (see there). For each run (consecutive rows of
// one slot at consecutive positions) and value head h, its segments in order, with S [D_K, D_V] the state before
// the segment (the slot's state, or zeros where the run starts at position 0), G_e the segment's last G:
//   V' = U - W S                                   (what the old state does not already predict)
//   o_t = exp(G_t) q_t S + sum_{s <= t} P[t, s] V'_s
//   S = exp(G_e) S + sum_t exp(G_e - G_t) k_t V'_t^T
// q and k as gated_delta_chunk normalised them. The run's final S is written back to its slot.
// Work split: one workgroup per (row, value head, block of COLS state columns), as gated_delta_rule.wgsl's; only
// the workgroups of a run's first row work. The state's columns lie in workgroup memory; each product's outputs
// are shared out over the invocations.
#include "common/step.wgsl"
#include "common/delta_runs.wgsl"

override H_K: u32 = 2u;          // query / key heads
override H_V: u32 = 4u;          // value heads (a multiple of H_K)
override D_K: u32 = 128u;        // query / key head dimension: rows of the state
override D_V: u32 = 128u;        // value head dimension: columns of the state
override C: u32 = 32u;           // rows a block (gated_delta_chunk's)
override COLS: u32 = 16u;        // state columns per workgroup (divides D_V)
override V_TILED: bool = true;   // key head of value head h: h % H_K (true) or h / (H_V / H_K)
override QKV_STRIDE: u32 = 768u; // values per q/k/v row
override Q_OFFSET: u32 = 0u;     // column of q's head 0 in that row
override K_OFFSET: u32 = 256u;   // column of k's head 0
override O_STRIDE: u32 = 512u;   // values per output row (>= H_V * D_V)

const WG: u32 = 256u;
const WU: u32 = D_K + D_V;
const PG: u32 = C + 4u;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> qkv: array<f32>;          // [rows, QKV_STRIDE]
@group(0) @binding(2) var<storage, read> rows: array<vec4<u32>>;   // [T_MAX] (position, slot, -, -)
@group(0) @binding(3) var<storage, read> wu: array<f32>;           // [rows, H_V, WU]
@group(0) @binding(4) var<storage, read> pg: array<f32>;           // [rows, H_V, PG]
@group(0) @binding(5) var<storage, read_write> state: array<f32>;  // [slots, H_V, D_K, D_V]
@group(0) @binding(6) var<storage, read_write> o: array<f32>;      // [rows, O_STRIDE]

var<workgroup> s_cols: array<f32, D_K * COLS>;  // S[i, col0 + c] at i * COLS + c
var<workgroup> v_new: array<f32, C * COLS>;     // V'[t, col0 + c] at t * COLS + c

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
    let col0 = (id % blocks) * COLS;
    let hk = select(h / (H_V / H_K), h % H_K, V_TILED);
    let qo = Q_OFFSET + hk * D_K;
    let ko = K_OFFSET + hk * D_K;
    let base = (rows[first].y * H_V + h) * D_K * D_V + col0;
    let fresh = rows[first].x == 0u;
    for (var i = lid; i < D_K * COLS; i += WG) {
        s_cols[i] = select(state[base + (i / COLS) * D_V + i % COLS], 0.0, fresh);
    }
    var r0 = first;
    loop {
        // the segment: the run's rows from r0 to the end of r0's block
        var n = 0u;
        let block_end = min((r0 / C + 1u) * C, step.n_tokens);
        for (var t = r0; t < block_end && (t == r0 || continues(t)); t++) {
            n += 1u;
        }
        workgroupBarrier();  // s_cols is complete (loaded, or updated by the previous segment)
        // V' = U - W S
        for (var i = lid; i < n * COLS; i += WG) {
            let t = i / COLS;
            let c = i % COLS;
            let at = ((r0 + t) * H_V + h) * WU;
            var x = wu[at + D_K + col0 + c];
            for (var k = 0u; k < D_K; k++) {
                x -= wu[at + k] * s_cols[k * COLS + c];
            }
            v_new[i] = x;
        }
        workgroupBarrier();
        // o = exp(G) q S + P V'
        for (var i = lid; i < n * COLS; i += WG) {
            let t = i / COLS;
            let c = i % COLS;
            let r = r0 + t;
            let at = (r * H_V + h) * PG;
            var inter = 0.0;
            for (var k = 0u; k < D_K; k++) {
                inter += qkv[r * QKV_STRIDE + qo + k] * s_cols[k * COLS + c];
            }
            var intra = 0.0;
            let skip = r0 % C;  // P's columns are the block's rows; the segment starts at this one
            for (var s = 0u; s <= t; s++) {
                intra += pg[at + skip + s] * v_new[s * COLS + c];
            }
            o[r * O_STRIDE + h * D_V + col0 + c] = exp(pg[at + C]) * pg[at + C + 1u] * inter + intra;
        }
        workgroupBarrier();  // S is read above before it is moved on below
        let last = pg[((r0 + n - 1u) * H_V + h) * PG + C];
        for (var i = lid; i < D_K * COLS; i += WG) {
            let k = i / COLS;
            let c = i % COLS;
            var x = exp(last) * s_cols[i];
            for (var t = 0u; t < n; t++) {
                let r = r0 + t;
                let at = (r * H_V + h) * PG + C;
                x += qkv[r * QKV_STRIDE + ko + k] * pg[at + 2u] * exp(last - pg[at]) * v_new[t * COLS + c];
            }
            s_cols[i] = x;
        }
        r0 += n;
        if (n == 0u || r0 >= step.n_tokens || !continues(r0)) {
            break;
        }
    }
    workgroupBarrier();
    for (var i = lid; i < D_K * COLS; i += WG) {
        state[base + (i / COLS) * D_V + i % COLS] = s_cols[i];
    }
}
