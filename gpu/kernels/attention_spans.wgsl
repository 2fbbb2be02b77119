// attention_spans: pass 1 of split attention for a few query rows over many keys (decoder self-attention over
// a KV-cache slot, cross-attention over an encoder's rows). Row t, head h attends to
// keys [spans[t].x, spans[t].y); the keys are cut into SPLITS chunks of CHUNK, and each workgroup turns one
// (row, head, chunk) into a partial result: the chunk's max score m, sum of exp(score - m) l and the unnormalised
// sum of exp(score - m) v; attention_spans_combine.wgsl merges the chunks.
//   partial[(t * HEADS + h) * SPLITS + s] = (acc[D], m, l)     (D + 2 values, an empty chunk gives l = 0)
// q, k and v rows: *_STRIDE values per row, head h from *_OFFSET + h * D (offsets and strides multiples of 4).
// Work split: one workgroup of 64 per (row, head, chunk), rows past the step's n_tokens skipped. Phase 1: each
// invocation scores keys lid, lid + 64, ... into workgroup memory; the chunk's max and sum by tree reductions.
// Phase 2: invocation (c = lid % (D / 4), g = lid / (D / 4)) adds p_j v_j for the keys j = g mod G of the chunk in
// vec4 c; the G groups are summed in workgroup memory. Spreading the keys over workgroups keeps a GPU busy with one
// or a few query rows, where one invocation per (row, head) walks 1500 keys alone.
#include "common/step.wgsl"

override HEADS: u32 = 6u;
override D: u32 = 64u;           // head dimension, a multiple of 4, at most 256 (64 vec4)
override CHUNK: u32 = 256u;      // keys per workgroup (a multiple of 64)
override SPLITS: u32 = 6u;       // chunks per (row, head)
override SCALE: f32 = 0.125;
override Q_STRIDE: u32 = 1152u;
override Q_OFFSET: u32 = 0u;
override K_STRIDE: u32 = 384u;
override K_OFFSET: u32 = 0u;
override V_STRIDE: u32 = 384u;
override V_OFFSET: u32 = 0u;

const WG: u32 = 64u;
const V4: u32 = D / 4u;
const G: u32 = WG / V4;          // key groups in phase 2
const NEG_BIG: f32 = -3.4028235e38;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> k: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> v: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> spans: array<vec2<u32>>;      // [T_MAX] key rows of each query row
@group(0) @binding(5) var<storage, read_write> partial: array<f32>;    // [T_MAX * HEADS * SPLITS, D + 2]

var<workgroup> scores: array<f32, CHUNK>;
var<workgroup> reduce: array<f32, WG>;
var<workgroup> sums: array<vec4<f32>, WG>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let item = wid.x + wid.y * nwg.x;  // (t * HEADS + h) * SPLITS + s
    let t = item / (HEADS * SPLITS);
    if (t >= step.n_tokens) {
        return;  // uniform over the workgroup
    }
    let h = (item / SPLITS) % HEADS;
    let s = item % SPLITS;
    let span = spans[t];
    let lo = min(span.x + s * CHUNK, span.y);
    let n = min(CHUNK, span.y - lo);
    let q_base = (t * Q_STRIDE + Q_OFFSET + h * D) / 4u;

    // Phase 1: scores of the chunk's keys, their max and sum of exponentials.
    var local_max = NEG_BIG;
    for (var j = lid; j < n; j += WG) {
        let kb = ((lo + j) * K_STRIDE + K_OFFSET + h * D) / 4u;
        var d = vec4<f32>(0.0);
        for (var i = 0u; i < V4; i++) {
            d += q[q_base + i] * k[kb + i];
        }
        let score = (d.x + d.y + d.z + d.w) * SCALE;
        scores[j] = score;
        local_max = max(local_max, score);
    }
    reduce[lid] = local_max;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride >>= 1u) {
        if (lid < stride) {
            reduce[lid] = max(reduce[lid], reduce[lid + stride]);
        }
        workgroupBarrier();
    }
    let m = reduce[0];
    workgroupBarrier();
    var local_sum = 0.0;
    for (var j = lid; j < n; j += WG) {
        let p = exp(scores[j] - m);
        scores[j] = p;
        local_sum += p;
    }
    reduce[lid] = local_sum;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride >>= 1u) {
        if (lid < stride) {
            reduce[lid] += reduce[lid + stride];
        }
        workgroupBarrier();
    }
    let l = reduce[0];

    // Phase 2: sum of p_j v_j, vec4 c of the head, keys of group g.
    let c = lid % V4;
    let g = lid / V4;
    var acc = vec4<f32>(0.0);
    if (g < G) {
        for (var j = g; j < n; j += G) {
            acc += scores[j] * v[((lo + j) * V_STRIDE + V_OFFSET + h * D) / 4u + c];
        }
    }
    sums[lid] = acc;
    workgroupBarrier();
    let out = item * (D + 2u);
    if (lid < V4) {
        var total = vec4<f32>(0.0);
        for (var gg = 0u; gg < G; gg++) {
            total += sums[gg * V4 + lid];
        }
        partial[out + 4u * lid] = total.x;
        partial[out + 4u * lid + 1u] = total.y;
        partial[out + 4u * lid + 2u] = total.z;
        partial[out + 4u * lid + 3u] = total.w;
    }
    if (lid == 0u) {
        partial[out + D] = m;
        partial[out + D + 1u] = l;
    }
}
