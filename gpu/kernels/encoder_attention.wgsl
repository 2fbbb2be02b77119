// encoder_attention: bidirectional multi-head attention over packed sequences of uneven lengths.
//   out[t, h, :] = sum_j softmax_j(SCALE * q[t, h] . k[j, g]) v[j, g],   g = h / (HEADS / KV_HEADS)
// for keys j of t's own sequence, [spans[t].x, spans[t].y): a batch is packed row after row with
// no padding, and the span is its padding mask. With WINDOW > 0 (EmbeddingGemma's sliding layers)
// only keys with |t - j| <= WINDOW are seen, as HF's bidirectional sliding mask does.
// q, k and v may be one fused tensor bound three times (BERT's QKV) or three tensors: each is read
// at row * *_STRIDE + *_OFFSET + head * D values (strides and offsets multiples of 4).
//
// Work split: one invocation per (token, head) row, 64 rows per workgroup. It keeps q and the
// output row in registers and walks its keys in chunks of KEYS scores with an online softmax
// (one rescale of the accumulator per chunk). Neighbouring invocations read the same keys, so the
// key and value rows come from cache. Suited to small head dimensions (BERT's 32, 64); larger
// ones (EmbeddingGemma's 256) work with D floats of registers twice over.
#include "common/step.wgsl"

override D: u32 = 32u;          // head dimension (a multiple of 4)
override HEADS: u32 = 12u;      // query heads
override KV_HEADS: u32 = 12u;   // key/value heads (grouped-query attention)
override Q_STRIDE: u32 = 1152u; // values per token row of q
override Q_OFFSET: u32 = 0u;    // first value of head 0 in a q row
override K_STRIDE: u32 = 1152u;
override K_OFFSET: u32 = 384u;
override V_STRIDE: u32 = 1152u;
override V_OFFSET: u32 = 768u;
override SCALE: f32 = 0.17677669529663687;  // score scale, 1/sqrt(D) for BERT
override WINDOW: u32 = 0u;      // keys at most this far from the query (0: the whole sequence)

const WG: u32 = 64u;
const V4: u32 = D / 4u;
const KEYS: u32 = 8u;           // scores per chunk of the online softmax
const NEG_BIG: f32 = -3.4028235e38;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;       // [T_MAX, Q_STRIDE / 4]
@group(0) @binding(2) var<storage, read> k: array<vec4<f32>>;       // [T_MAX, K_STRIDE / 4]
@group(0) @binding(3) var<storage, read> v: array<vec4<f32>>;       // [T_MAX, V_STRIDE / 4]
@group(0) @binding(4) var<storage, read> spans: array<vec2<u32>>;   // [T_MAX] (first row, end row) of t's sequence
@group(0) @binding(5) var<storage, read_write> out: array<vec4<f32>>;  // [T_MAX, HEADS * D / 4]

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = (wid.x + wid.y * nwg.x) * WG + lid;
    if (row >= step.n_tokens * HEADS) {
        return;
    }
    let t = row / HEADS;
    let h = row % HEADS;
    let g = h / (HEADS / KV_HEADS);
    let span = spans[t];
    var lo = span.x;
    var hi = span.y;
    if (WINDOW > 0u) {
        lo = max(lo, select(0u, t - WINDOW, t >= WINDOW));
        hi = min(hi, t + WINDOW + 1u);
    }

    var qv: array<vec4<f32>, V4>;
    var acc: array<vec4<f32>, V4>;
    let q_base = (t * Q_STRIDE + Q_OFFSET + h * D) / 4u;
    for (var i = 0u; i < V4; i++) {
        qv[i] = q[q_base + i];
        acc[i] = vec4<f32>(0.0);
    }
    let k_head = (K_OFFSET + g * D) / 4u;
    let v_head = (V_OFFSET + g * D) / 4u;

    var running_max = NEG_BIG;
    var running_sum = 0.0;
    var scores: array<f32, KEYS>;
    for (var first = lo; first < hi; first += KEYS) {
        let n = min(KEYS, hi - first);
        var chunk_max = running_max;
        for (var c = 0u; c < n; c++) {
            let kb = (first + c) * (K_STRIDE / 4u) + k_head;
            var d = vec4<f32>(0.0);
            for (var i = 0u; i < V4; i++) {
                d += qv[i] * k[kb + i];
            }
            let s = (d.x + d.y + d.z + d.w) * SCALE;
            scores[c] = s;
            chunk_max = max(chunk_max, s);
        }
        let correction = exp(running_max - chunk_max);
        running_sum *= correction;
        for (var i = 0u; i < V4; i++) {
            acc[i] *= correction;
        }
        for (var c = 0u; c < n; c++) {
            let p = exp(scores[c] - chunk_max);
            running_sum += p;
            let vb = (first + c) * (V_STRIDE / 4u) + v_head;
            for (var i = 0u; i < V4; i++) {
                acc[i] += p * v[vb + i];
            }
        }
        running_max = chunk_max;
    }

    let inv = 1.0 / running_sum;  // > 0: a token always sees itself
    let out_base = row * V4;
    for (var i = 0u; i < V4; i++) {
        out[out_base + i] = acc[i] * inv;
    }
}
