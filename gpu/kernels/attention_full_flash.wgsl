// attention_full_flash: full (unmasked) self-attention over N rows in one pass, without the N x N scores:
//   out[t, h, :] = sum_j softmax_j(SCALE * q[t, h] . k[j, h]) v[j, h]
// q, k and v are read from one fused row [q | k | v] of 3 * HEADS * D values; out rows hold HEADS * D values.
// Work split (FlashAttention-2): a workgroup takes BR consecutive query rows of one head and walks all N keys in
// chunks of KC. The block's q rows (prescaled by SCALE * log2 e, so the softmax runs in base 2) stay in
// workgroup memory; each chunk's K rows, then its V rows, are loaded once into one tile shared by every query
// row of the block. Per chunk:
//   scores: register tiles of 4 rows x 4 keys (keys g + KC4 u, u < 4: interleaved so that neighbouring threads
//     read neighbouring rows of the tile; rows padded to an odd count of vec4 against bank conflicts), 16 FMAs
//     per pair of vec4 loads, into s (the row's keys g + KC4 u as one vec4);
//   softmax: PARTS threads a row each take every PARTS-th key group and keep the row's running max and their
//     part of its sum in registers; they share their chunk maxima through workgroup memory, turn the chunk's
//     scores into weights in place and leave the accumulator's rescale factor in `alpha` (the V rows load
//     meanwhile);
//   values: thread (row group, vec4 c) of WG = BR / 4 * D / 4 holds 4 rows x 4 dims of the output accumulator
//     in named registers (loop-indexed arrays spill to local memory on NVIDIA's Vulkan compiler), 16 FMAs per
//     pair of loads (a vec4 of weights, a vec4 of values).
// PREFETCH: each thread's share of the V rows is fetched from global memory into registers before the scores
// and stored to the tile after them, and the next chunk's K rows during the values, so that the loads' latency
// hides behind the FMAs (at most 4 vec4 a thread: KC <= BR). Without it, each tile is loaded right before use.
// Keys past N weigh 0; rows past N are computed from zero q and not written. The host picks BR, KC and PREFETCH
// from the device's workgroup storage (gpu/ops/full_attention.py, flash_plan).
#include "common/step.wgsl"

override N: u32 = 1500u;        // rows (queries and keys), any count
override HEADS: u32 = 6u;       // heads in a fused row (and in an output row)
override D: u32 = 64u;          // head dimension, a multiple of 4 (at least 16)
override SCALE: f32 = 0.125;    // score scale, 1 / sqrt(D)
override BR: u32 = 64u;         // query rows per workgroup, a multiple of 4
override KC: u32 = 32u;         // keys per chunk, a multiple of 4
override PREFETCH: bool = false; // K and V words fetched into registers a phase ahead (needs KC <= BR)

const V4: u32 = D / 4u;                  // vec4 per head row
const VP: u32 = V4 | 1u;                 // vec4 per tile row: odd, so rows start on different banks
const KC4: u32 = KC / 4u;                // key groups per chunk
const WG: u32 = BR / 4u * V4;            // threads: one per (4 rows, vec4 of the output)
const STRIDE4: u32 = 3u * HEADS * V4;    // vec4 per fused row
const TILES: u32 = BR / 4u * KC4;        // score tiles of 4 rows x 4 keys per chunk
const PARTS: u32 = min(4u, V4 / 4u);     // threads per row in the softmax (at most WG / BR)
const BLOCKS: u32 = (N + BR - 1u) / BR;  // query blocks per head
const LOADS: u32 = KC * V4;              // vec4 of K (and of V) per chunk
const PER: u32 = (LOADS + WG - 1u) / WG; // of them per thread: 4 KC / BR, at most 4 with PREFETCH
const LOG2E: f32 = 1.4426950408889634;
const NEG_BIG: f32 = -3.4028235e38;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> qkv: array<vec4<f32>>;         // [N, 3 * HEADS * D / 4]
@group(0) @binding(2) var<storage, read_write> out: array<vec4<f32>>;   // [N, HEADS * D / 4]

var<workgroup> q_tile: array<vec4<f32>, BR * VP>;   // [BR][VP] the block's q rows, prescaled
var<workgroup> kv_tile: array<vec4<f32>, KC * VP>;  // [KC][VP] the chunk's K rows, then its V rows
var<workgroup> s: array<vec4<f32>, BR * KC4>;       // [BR][KC4] scores, then weights, of keys g + KC4 u
var<workgroup> alpha: array<f32, BR>;               // per row: the accumulator's rescale factor, at the end 1 / sum
var<workgroup> part_max: array<f32, PARTS * BR>;    // per row and part: the chunk's max, at the end the part's sum

// Load i of rows [chunk, chunk + KC) of part `part` of head h: zero past the chunk's loads or past N.
fn chunk_word(i: u32, chunk: u32, part: u32, h: u32) -> vec4<f32> {
    let key = chunk + i / V4;
    if (i >= LOADS || key >= N) {
        return vec4<f32>(0.0);
    }
    return qkv[key * STRIDE4 + (part * HEADS + h) * V4 + i % V4];
}

// Stage rows [chunk, chunk + KC) of part `part` (1: K, 2: V) of head h into kv_tile (rows past N: zeros).
fn load_chunk(chunk: u32, part: u32, h: u32, lid: u32) {
    for (var i = lid; i < LOADS; i += WG) {
        kv_tile[i / V4 * VP + i % V4] = chunk_word(i, chunk, part, h);
    }
}

// A thread's words of a chunk's K or V rows in registers (PREFETCH): load lid + WG u in field u.
struct Staged {
    w0: vec4<f32>,
    w1: vec4<f32>,
    w2: vec4<f32>,
    w3: vec4<f32>,
}

fn fetch(chunk: u32, part: u32, h: u32, lid: u32) -> Staged {
    var x = Staged(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
    x.w0 = chunk_word(lid, chunk, part, h);
    if (PER > 1u) {
        x.w1 = chunk_word(lid + WG, chunk, part, h);
    }
    if (PER > 2u) {
        x.w2 = chunk_word(lid + 2u * WG, chunk, part, h);
    }
    if (PER > 3u) {
        x.w3 = chunk_word(lid + 3u * WG, chunk, part, h);
    }
    return x;
}

fn stage_word(i: u32, w: vec4<f32>) {
    if (i < LOADS) {
        kv_tile[i / V4 * VP + i % V4] = w;
    }
}

fn stage(x: Staged, lid: u32) {
    stage_word(lid, x.w0);
    if (PER > 1u) {
        stage_word(lid + WG, x.w1);
    }
    if (PER > 2u) {
        stage_word(lid + 2u * WG, x.w2);
    }
    if (PER > 3u) {
        stage_word(lid + 3u * WG, x.w3);
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let id = wid.x + wid.y * nwg.x;
    // uniform per workgroup: the whole workgroup returns before any barrier
    if (id >= HEADS * BLOCKS || step.n_tokens == 0u) {
        return;
    }
    let h = id / BLOCKS;
    let row0 = (id % BLOCKS) * BR;

    for (var i = lid; i < BR * V4; i += WG) {
        let r = i / V4;
        let c = i % V4;
        var x = vec4<f32>(0.0);
        if (row0 + r < N) {
            x = qkv[(row0 + r) * STRIDE4 + h * V4 + c] * (SCALE * LOG2E);
        }
        q_tile[r * VP + c] = x;
    }

    // this thread's output tile: rows 4 rg + i, vec4 c
    let rg = lid / V4;
    let c = lid % V4;
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    // thread lid < PARTS * BR: part `part` of row `own`'s keys, its running max (log2 units, the same in all
    // of the row's parts) and its part of the running sum
    let own = lid / PARTS;
    let part = lid % PARTS;
    var m = NEG_BIG;
    var l = 0.0;
    let lanes = vec4<u32>(0u, KC4, 2u * KC4, 3u * KC4);
    var k_next = Staged(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
    var v_next = k_next;
    if (PREFETCH) {
        k_next = fetch(0u, 1u, h, lid);
    }

    for (var chunk = 0u; chunk < N; chunk += KC) {
        if (PREFETCH) {
            stage(k_next, lid);
        } else {
            load_chunk(chunk, 1u, h, lid);
        }
        workgroupBarrier();
        if (PREFETCH) {  // in flight during the scores
            v_next = fetch(chunk, 2u, h, lid);
        }
        for (var t = lid; t < TILES; t += WG) {
            let g = t % KC4;
            let r = (t / KC4) * 4u;
            var s0 = vec4<f32>(0.0);
            var s1 = vec4<f32>(0.0);
            var s2 = vec4<f32>(0.0);
            var s3 = vec4<f32>(0.0);
            for (var d = 0u; d < V4; d++) {
                let k0 = kv_tile[g * VP + d];
                let k1 = kv_tile[(g + KC4) * VP + d];
                let k2 = kv_tile[(g + 2u * KC4) * VP + d];
                let k3 = kv_tile[(g + 3u * KC4) * VP + d];
                let q0 = q_tile[r * VP + d];
                let q1 = q_tile[(r + 1u) * VP + d];
                let q2 = q_tile[(r + 2u) * VP + d];
                let q3 = q_tile[(r + 3u) * VP + d];
                s0 += vec4<f32>(dot(q0, k0), dot(q0, k1), dot(q0, k2), dot(q0, k3));
                s1 += vec4<f32>(dot(q1, k0), dot(q1, k1), dot(q1, k2), dot(q1, k3));
                s2 += vec4<f32>(dot(q2, k0), dot(q2, k1), dot(q2, k2), dot(q2, k3));
                s3 += vec4<f32>(dot(q3, k0), dot(q3, k1), dot(q3, k2), dot(q3, k3));
            }
            s[r * KC4 + g] = s0;
            s[(r + 1u) * KC4 + g] = s1;
            s[(r + 2u) * KC4 + g] = s2;
            s[(r + 3u) * KC4 + g] = s3;
        }
        workgroupBarrier();
        if (PREFETCH) {
            stage(v_next, lid);
        } else {
            load_chunk(chunk, 2u, h, lid);
        }
        // keys past N (only in the last chunk) count as -inf
        let limit = vec4<u32>(N - chunk);
        var mx = vec4<f32>(NEG_BIG);
        if (lid < PARTS * BR) {
            for (var g = part; g < KC4; g += PARTS) {
                mx = max(mx, select(vec4<f32>(NEG_BIG), s[own * KC4 + g], lanes + g < limit));
            }
            part_max[lid] = max(max(mx.x, mx.y), max(mx.z, mx.w));
        }
        workgroupBarrier();
        if (lid < PARTS * BR) {
            var m_new = m;
            for (var u = 0u; u < PARTS; u++) {
                m_new = max(m_new, part_max[own * PARTS + u]);
            }
            let a = exp2(m - m_new);
            var sum = vec4<f32>(0.0);
            for (var g = part; g < KC4; g += PARTS) {
                let p = select(vec4<f32>(0.0), exp2(s[own * KC4 + g] - m_new), lanes + g < limit);
                s[own * KC4 + g] = p;
                sum += p;
            }
            l = l * a + (sum.x + sum.y) + (sum.z + sum.w);
            m = m_new;
            if (part == 0u) {
                alpha[own] = a;
            }
        }
        workgroupBarrier();
        if (PREFETCH) {  // the next chunk's keys, in flight during the values
            k_next = fetch(chunk + KC, 1u, h, lid);
        }
        let r = rg * 4u;
        acc0 *= alpha[r];
        acc1 *= alpha[r + 1u];
        acc2 *= alpha[r + 2u];
        acc3 *= alpha[r + 3u];
        for (var g = 0u; g < KC4; g++) {
            let v0 = kv_tile[g * VP + c];
            let v1 = kv_tile[(g + KC4) * VP + c];
            let v2 = kv_tile[(g + 2u * KC4) * VP + c];
            let v3 = kv_tile[(g + 3u * KC4) * VP + c];
            let w0 = s[r * KC4 + g];
            let w1 = s[(r + 1u) * KC4 + g];
            let w2 = s[(r + 2u) * KC4 + g];
            let w3 = s[(r + 3u) * KC4 + g];
            acc0 += w0.x * v0 + w0.y * v1 + w0.z * v2 + w0.w * v3;
            acc1 += w1.x * v0 + w1.y * v1 + w1.z * v2 + w1.w * v3;
            acc2 += w2.x * v0 + w2.y * v1 + w2.z * v2 + w2.w * v3;
            acc3 += w3.x * v0 + w3.y * v1 + w3.z * v2 + w3.w * v3;
        }
        workgroupBarrier();
    }

    if (lid < PARTS * BR) {
        part_max[lid] = l;
    }
    workgroupBarrier();
    if (lid < BR) {
        var sum = 0.0;
        for (var u = 0u; u < PARTS; u++) {
            sum += part_max[lid * PARTS + u];
        }
        alpha[lid] = 1.0 / sum;
    }
    workgroupBarrier();
    let r = rg * 4u;
    let o = (row0 + r) * HEADS * V4 + h * V4 + c;
    let ostride = HEADS * V4;
    if (row0 + r < N) {
        out[o] = acc0 * alpha[r];
    }
    if (row0 + r + 1u < N) {
        out[o + ostride] = acc1 * alpha[r + 1u];
    }
    if (row0 + r + 2u < N) {
        out[o + 2u * ostride] = acc2 * alpha[r + 2u];
    }
    if (row0 + r + 3u < N) {
        out[o + 3u * ostride] = acc3 * alpha[r + 3u];
    }
}
