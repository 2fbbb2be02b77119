// gated_delta_chunk: the chunk-local half of the gated delta rule's chunked form (transformers'
// torch_chunk_gated_delta_rule, FLA's chunk_gated_delta_rule) for a prompt step's rows; gated_delta_scan.wgsl
// then carries the state across chunks. Chunks are the step's blocks of C rows, cut further where a block holds
// rows of more than one run (a run: consecutive rows of one slot at consecutive positions, common/rows.wgsl), so
// a segment is a run's rows within one block. For each segment and value head h, with q and k l2-normalised (q
// also scaled by 1/sqrt(D_K)), g_t = A[h] softplus(a_t + dt_bias[h]), beta_t = sigmoid(b_t) and G_t the sum of
// g over the segment's rows up to t:
//   L[t, s] = beta_t (k_t . k_s) exp(G_t - G_s)  for s < t                   (the UT system, strictly lower)
//   (I + L) W = beta k exp(G),  (I + L) U = beta v                           (forward substitution)
//   P[t, s] = (q_t . k_s) exp(G_t - G_s)         for s <= t                  (attention within the segment)
// Written per row t and head h: wu[t, h] = (W_t [D_K], U_t [D_V]); pg[t, h] = (P_t [C], G_t, q scale, k scale,
// 0), the scales being what normalises row t's raw q and k.
// Work split: one workgroup per (block, value head); invocations share the pairs (t, s) of the dot products,
// then each owns columns of [W | U] and walks the segment's rows (its earlier rows' values read back from wu,
// which it wrote itself).
#include "common/step.wgsl"
#include "common/delta_runs.wgsl"

override H_K: u32 = 2u;          // query / key heads
override H_V: u32 = 4u;          // value heads (a multiple of H_K)
override D_K: u32 = 128u;        // query / key head dimension
override D_V: u32 = 128u;        // value head dimension
override C: u32 = 32u;           // rows a block
override V_TILED: bool = true;   // key head of value head h: h % H_K (true) or h / (H_V / H_K)
override QKV_STRIDE: u32 = 768u; // values per q/k/v row (the causal conv's output row)
override Q_OFFSET: u32 = 0u;     // column of q's head 0 in that row
override K_OFFSET: u32 = 256u;   // column of k's head 0
override V_OFFSET: u32 = 512u;   // column of v's head 0
override AB_STRIDE: u32 = 4u;    // values per a row and per b row
override A_OFFSET: u32 = 0u;     // column of a's head 0 (the decay input, "alpha")
override B_OFFSET: u32 = 0u;     // column of b's head 0 (the update rate input, "beta")

const WG: u32 = 256u;
const WU: u32 = D_K + D_V;       // values per (row, head) of wu
const PG: u32 = C + 4u;          // values per (row, head) of pg

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> qkv: array<f32>;           // [rows, QKV_STRIDE]
@group(0) @binding(2) var<storage, read> a: array<f32>;             // [rows, AB_STRIDE]
@group(0) @binding(3) var<storage, read> b: array<f32>;             // [rows, AB_STRIDE]
@group(0) @binding(4) var<storage, read> ssm_a: array<f32>;         // [H_V] A = -exp(A_log)
@group(0) @binding(5) var<storage, read> dt_bias: array<f32>;       // [H_V]
@group(0) @binding(6) var<storage, read> rows: array<vec4<u32>>;    // [T_MAX] (position, slot, -, -)
@group(0) @binding(7) var<storage, read_write> wu: array<f32>;      // [rows, H_V, WU]
@group(0) @binding(8) var<storage, read_write> pg: array<f32>;      // [rows, H_V, PG]

var<workgroup> seg: array<u32, C>;      // the block row where each row's segment starts
var<workgroup> cum: array<f32, C>;      // G_t
var<workgroup> beta: array<f32, C>;
var<workgroup> q_scale: array<f32, C>;
var<workgroup> k_scale: array<f32, C>;
var<workgroup> ut: array<f32, C * C>;   // L[t, s], s < t in one segment, else 0

fn dot_rows(r1: u32, off1: u32, r2: u32, off2: u32) -> f32 {
    var sum = 0.0;
    for (var i = 0u; i < D_K; i++) {
        sum += qkv[r1 * QKV_STRIDE + off1 + i] * qkv[r2 * QKV_STRIDE + off2 + i];
    }
    return sum;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let id = wid.x + wid.y * nwg.x;
    let block = id / H_V;
    let h = id % H_V;
    let r0 = block * C;
    if (r0 >= step.n_tokens) {
        return;
    }
    let n = min(C, step.n_tokens - r0);
    let hk = select(h / (H_V / H_K), h % H_K, V_TILED);
    let qo = Q_OFFSET + hk * D_K;
    let ko = K_OFFSET + hk * D_K;
    // per row: its gates, its q and k norms, and where its segment starts
    for (var t = lid; t < n; t += WG) {
        let r = r0 + t;
        let g = ssm_a[h] * softplus(a[r * AB_STRIDE + A_OFFSET + h] + dt_bias[h]);
        cum[t] = g;  // summed below
        beta[t] = 1.0 / (1.0 + exp(-b[r * AB_STRIDE + B_OFFSET + h]));
        q_scale[t] = inverseSqrt(dot_rows(r, qo, r, qo) + QK_EPS) * inverseSqrt(f32(D_K));
        k_scale[t] = inverseSqrt(dot_rows(r, ko, r, ko) + QK_EPS);
        seg[t] = select(t, 0u, t > 0u && continues(r));  // fixed below: 0 marks "continues"
    }
    workgroupBarrier();
    if (lid == 0u) {
        var start = 0u;
        var total = 0.0;
        for (var t = 0u; t < n; t++) {
            if (t == 0u || seg[t] != 0u) {  // a run starts here
                start = t;
                total = 0.0;
            }
            total += cum[t];
            cum[t] = total;
            seg[t] = start;
        }
    }
    workgroupBarrier();
    // L and P: the pairs (t, s), s <= t, of one segment
    for (var i = lid; i < C * C; i += WG) {
        let t = i / C;
        let s = i % C;
        var l = 0.0;
        var p = 0.0;
        if (t < n && s <= t && seg[s] == seg[t]) {
            let rt = r0 + t;
            let rs = r0 + s;
            let decay = exp(cum[t] - cum[s]);
            let ks = dot_rows(rt, qo, rs, ko) * q_scale[t] * k_scale[s];
            p = ks * decay;
            if (s < t) {
                l = beta[t] * dot_rows(rt, ko, rs, ko) * k_scale[t] * k_scale[s] * decay;
            }
        }
        ut[i] = l;
        if (t < n) {
            pg[((r0 + t) * H_V + h) * PG + s] = p;
        }
    }
    for (var t = lid; t < n; t += WG) {
        let at = ((r0 + t) * H_V + h) * PG + C;
        pg[at] = cum[t];
        pg[at + 1u] = q_scale[t];
        pg[at + 2u] = k_scale[t];
        pg[at + 3u] = 0.0;
    }
    workgroupBarrier();
    // forward substitution, a column of [W | U] per invocation
    for (var j = lid; j < WU; j += WG) {
        for (var t = 0u; t < n; t++) {
            let r = r0 + t;
            var x: f32;
            if (j < D_K) {
                x = beta[t] * qkv[r * QKV_STRIDE + ko + j] * k_scale[t] * exp(cum[t]);
            } else {
                x = beta[t] * qkv[r * QKV_STRIDE + V_OFFSET + h * D_V + j - D_K];
            }
            for (var s = seg[t]; s < t; s++) {
                x -= ut[t * C + s] * wu[((r0 + s) * H_V + h) * WU + j];
            }
            wu[(r * H_V + h) * WU + j] = x;
        }
    }
}
