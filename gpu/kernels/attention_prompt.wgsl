// attention_prompt: causal attention of a prompt chunk (many query tokens) over a layer's paged KV cache.
//   out[t, h, :] = sum_j softmax_j(SCALE * q[t, h] . k[j, g]) v[j, g],  g = h / GROUP
// for keys j in [lo, hi] of the token's sequence: p = rows[t].x, hi = p + rows[t].w (the keys after its own
// that the row also sees: an image's rows see the whole image, 0 elsewhere), lo = max(0, p + 1 - WINDOW) on
// sliding-window layers (0 on global ones), keys found through the sequence's pages (common/rows.wgsl).
// Same contract as attention.wgsl; a step may hold tokens of several sequences.
//
// Work split: the query rows of kv head g are numbered t * GROUP + (h - g * GROUP), so the heads sharing a
// kv head sit side by side; a workgroup of WG threads takes R = WG / TPR consecutive such rows (a block)
// and one of SPLITS parts of their keys. Each row belongs to TPR = D / 32 threads, each of which holds 32
// of its dims (vec4 c = slice + TPR i, i < 8: neighbouring threads, neighbouring words) of q and of the
// output accumulator in named registers (loop-indexed arrays spill to local memory on NVIDIA's Vulkan
// compiler). The block's keys are walked in chunks of KC: the chunk's K and V rows are converted to f32
// into workgroup memory once and read by every row of the block (the next chunk's words are loaded into
// registers while this one is used). Keys go four at a time: each thread dots its 32 dims with four keys,
// the TPR threads of a row sum their parts (attention/prompt_${REDUCE}.wgsl: subgroup shuffles, or
// workgroup memory), then an online softmax in base 2 (q is prescaled by SCALE * log2 e): the running max
// moves (and the accumulator is rescaled) only when a quad's max exceeds it.
// Causal and window masks are per (row, key); a block's keys are the union of its rows' ranges, per run of
// rows of one sequence (a block straddling two sequences walks each one's keys, masking the other's rows).
// SPLITS > 1: a run's key range of span keys is cut into min(SPLITS, ceil(span / MIN_PART)) equal parts;
// part s of each row goes to the scratch `out` as (unnormalised acc[D]) at [row * SPLITS + s] and
// (max in log2 units, sum, 0, 0) at ML_BASE + row * SPLITS + s (unused parts have sum 0), merged by
// attention/prompt_combine.wgsl.
#include "common/step.wgsl"
#include "common/rows.wgsl"
#include "attention/prompt_${REDUCE}.wgsl"

override D: u32 = 256u;         // head dimension: 32, 64, 128, 256 or 512
override HEADS: u32 = 4u;       // query heads
override KV_HEADS: u32 = 1u;    // key/value heads (grouped-query attention)
override WINDOW: u32 = 0u;      // sliding window in tokens; 0 = global attention
override SCALE: f32 = 0.0625;   // score scale, 1/sqrt(D) for Gemma 3
override SOFTCAP: f32 = 0.0;    // scores capped to SOFTCAP * tanh(score / SOFTCAP) (Gemma 2); 0 = none
override LATER_KEYS: bool = true;  // rows[t].w is honoured; false: causal (Gemma 4's full layers under images)
override KV_F16: bool = true;   // cache words hold two f16 values
override WG: u32 = 256u;        // threads per workgroup
override KC: u32 = 16u;         // keys per chunk in workgroup memory (a multiple of 4)
override SPLITS: u32 = 1u;      // most parts a block's keys are cut into
override MIN_PART: u32 = 64u;   // fewest keys per part (a shorter range gets fewer parts)
override PAIRS: bool = false;   // each thread holds 16 dims of two rows (not 32 of one): half the tile reads
override T_MAX: u32 = 512u;     // token rows of the program (sizes the scratch when SPLITS > 1)
override PAGE_TOKENS: u32 = 128u;  // positions per KV page
override MAX_PAGES: u32 = 64u;     // page-table entries per sequence

const RT: u32 = select(1u, 2u, PAIRS);          // query rows per thread
const TPR: u32 = D * RT / 32u;                  // threads per query row (32 / RT dims each)
const R: u32 = WG / TPR * RT;                   // query rows per workgroup
const GROUP: u32 = HEADS / KV_HEADS;            // query heads per kv head
const VEC: u32 = D / 4u;                        // vec4 per head row (q, out, f32 tiles)
const WV: u32 = select(D / 4u, D / 8u, KV_F16); // vec4<u32> words per head row of the cache
const KV_VEC: u32 = KV_HEADS * WV;              // vec4<u32> words per pool row
const LOADS: u32 = KC * WV;                     // vec4<u32> words of K (and of V) per chunk
const PER: u32 = (LOADS + WG - 1u) / WG;        // of them per thread: at most 4
const ML_BASE: u32 = T_MAX * HEADS * SPLITS * VEC;
const LOG2E: f32 = 1.4426950408889634;
const NEG_BIG: f32 = -3.4028235e38;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;         // [T_MAX, HEADS, D]
@group(0) @binding(2) var<storage, read> k_cache: array<vec4<u32>>;   // [pool rows, KV_HEADS, D] words
@group(0) @binding(3) var<storage, read> v_cache: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read_write> out: array<vec4<f32>>; // [T_MAX, HEADS, D], or the scratch
@group(0) @binding(5) var<storage, read> rows: array<vec4<u32>>;      // [T_MAX] (position, slot, -, later keys)
@group(0) @binding(6) var<storage, read> page_table: array<u32>;      // [slots, MAX_PAGES]

var<workgroup> k_tile: array<vec4<f32>, KC * VEC>;  // [KC][D] the chunk's keys, f32
var<workgroup> v_tile: array<vec4<f32>, KC * VEC>;  // [KC][D] its values

// The first key position p may see.
fn first_key(p: u32) -> u32 {
    if (WINDOW > 0u && p + 1u > WINDOW) {
        return p + 1u - WINDOW;
    }
    return 0u;
}

// Cache word index of load i (< LOADS) of the chunk at key `chunk`, or 0xffffffff past the part's keys.
fn word_index(i: u32, chunk: u32, k_end: u32, slot: u32, g: u32) -> u32 {
    let key = chunk + i / WV;
    if (i >= LOADS || key >= k_end) {
        return 0xffffffffu;
    }
    return pool_row(slot, key) * KV_VEC + g * WV + i % WV;
}

// Write load i's K and V words into the tiles as f32 (keys past the part: zeros, so masked keys weigh
// 0 * finite).
fn stage(i: u32, kw: vec4<u32>, vw: vec4<u32>) {
    if (i >= LOADS) {
        return;
    }
    let j = i / WV;
    let c = i % WV;
    if (KV_F16) {
        let at = j * VEC + 2u * c;
        k_tile[at] = vec4<f32>(unpack2x16float(kw.x), unpack2x16float(kw.y));
        k_tile[at + 1u] = vec4<f32>(unpack2x16float(kw.z), unpack2x16float(kw.w));
        v_tile[at] = vec4<f32>(unpack2x16float(vw.x), unpack2x16float(vw.y));
        v_tile[at + 1u] = vec4<f32>(unpack2x16float(vw.z), unpack2x16float(vw.w));
    } else {
        k_tile[j * VEC + c] = bitcast<vec4<f32>>(kw);
        v_tile[j * VEC + c] = bitcast<vec4<f32>>(vw);
    }
}

// q . k of the tile's key at vec4 b (this thread's 32 dims: vec4 b + TPR i holds q_i's dims).
fn key_dot(b: u32, q0: vec4<f32>, q1: vec4<f32>, q2: vec4<f32>, q3: vec4<f32>, q4: vec4<f32>, q5: vec4<f32>,
           q6: vec4<f32>, q7: vec4<f32>) -> f32 {
    let d = q0 * k_tile[b] + q1 * k_tile[b + TPR] + q2 * k_tile[b + 2u * TPR] + q3 * k_tile[b + 3u * TPR]
        + q4 * k_tile[b + 4u * TPR] + q5 * k_tile[b + 5u * TPR] + q6 * k_tile[b + 6u * TPR]
        + q7 * k_tile[b + 7u * TPR];
    return d.x + d.y + d.z + d.w;
}

// The same for two rows (PAIRS): row A's q in q0..q3 and row B's in q4..q7 over the same 16 dims.
fn key_dot2(b: u32, q0: vec4<f32>, q1: vec4<f32>, q2: vec4<f32>, q3: vec4<f32>, q4: vec4<f32>, q5: vec4<f32>,
            q6: vec4<f32>, q7: vec4<f32>) -> vec2<f32> {
    let k0 = k_tile[b];
    let k1 = k_tile[b + TPR];
    let k2 = k_tile[b + 2u * TPR];
    let k3 = k_tile[b + 3u * TPR];
    let da = q0 * k0 + q1 * k1 + q2 * k2 + q3 * k3;
    let db = q4 * k0 + q5 * k1 + q6 * k2 + q7 * k3;
    return vec2<f32>(da.x + da.y + da.z + da.w, db.x + db.y + db.z + db.w);
}

// sum_u w[u] v_tile[b + u VEC]: one vec4 of four consecutive keys' values, weighted (no dynamic indexing
// of w, which could put it in local memory).
fn values4(b: u32, w: vec4<f32>) -> vec4<f32> {
    return w.x * v_tile[b] + w.y * v_tile[b + VEC] + w.z * v_tile[b + 2u * VEC] + w.w * v_tile[b + 3u * VEC];
}

// values4 for two rows' weights over the same values, each value read once: columns (row A, row B).
fn values4x2(b: u32, wa: vec4<f32>, wb: vec4<f32>) -> mat2x4<f32> {
    let v0 = v_tile[b];
    let v1 = v_tile[b + VEC];
    let v2 = v_tile[b + 2u * VEC];
    let v3 = v_tile[b + 3u * VEC];
    return mat2x4<f32>(wa.x * v0 + wa.y * v1 + wa.z * v2 + wa.w * v3, wb.x * v0 + wb.y * v1 + wb.z * v2 + wb.w * v3);
}

// A thread's query row: whether it is one of the step's, its output row, position and first key.
struct Row {
    live: bool,
    out_row: u32,
    hi: u32,  // the last key it sees: its position, or the last of its image's rows
    lo: u32,
}

// The keys past its position row t also sees (its image's rest), or none where LATER_KEYS is off.
fn later(t: u32) -> u32 {
    return select(0u, rows[t].w, LATER_KEYS);
}

fn row_info(qr: u32, n_rows: u32, g: u32) -> Row {
    let r = min(qr, n_rows - 1u);
    let t = r / GROUP;
    let p = rows[t].x;
    return Row(qr < n_rows, t * HEADS + g * GROUP + r % GROUP, p + later(t), first_key(p));
}

// Scores s of keys `key` (four) of a row, masked to its range and the part's end (-big where masked).
fn masked(s: vec4<f32>, key: vec4<u32>, in_run: bool, row: Row, k_end: u32) -> vec4<f32> {
    let valid = vec4<bool>(in_run) & (key >= vec4<u32>(row.lo)) & (key <= vec4<u32>(row.hi)) & (key < vec4<u32>(k_end));
    var capped = s;
    if (SOFTCAP > 0.0) {  // s is in log2 units (q prescaled by SCALE * LOG2E): cap the score, not its log2
        let cap = SOFTCAP * LOG2E;
        capped = cap * tanh(s / cap);
    }
    return select(vec4<f32>(NEG_BIG), capped, valid);
}

fn prompt_main(group: u32, me: u32) {
    let part = group % SPLITS;
    let g = (group / SPLITS) % KV_HEADS;
    let block = group / (SPLITS * KV_HEADS);
    let n_rows = step.n_tokens * GROUP;   // query rows of kv head g
    let row0 = block * R;
    if (row0 >= n_rows) {
        return;   // uniform: the whole workgroup
    }
    let row_end = min(row0 + R, n_rows);
    let slice = me % TPR;
    let qr = row0 + RT * (me / TPR);
    let ra = row_info(qr, n_rows, g);       // the thread's row (row A with PAIRS)
    let rb = row_info(qr + 1u, n_rows, g);  // row B with PAIRS

    // q (prescaled) and the accumulator: dims of vec4 slice + TPR i; with PAIRS, q0..q3 and a0..a3 are
    // row A's dims slice + TPR i (i < 4), q4..q7 and a4..a7 row B's same dims
    let qs = SCALE * LOG2E;
    let qb = ra.out_row * VEC + slice;
    let qb2 = select(qb + 4u * TPR, rb.out_row * VEC + slice, PAIRS);
    let q0 = q[qb] * qs;
    let q1 = q[qb + TPR] * qs;
    let q2 = q[qb + 2u * TPR] * qs;
    let q3 = q[qb + 3u * TPR] * qs;
    let q4 = q[qb2] * qs;
    let q5 = q[qb2 + TPR] * qs;
    let q6 = q[qb2 + 2u * TPR] * qs;
    let q7 = q[qb2 + 3u * TPR] * qs;
    var a0 = vec4<f32>();
    var a1 = vec4<f32>();
    var a2 = vec4<f32>();
    var a3 = vec4<f32>();
    var a4 = vec4<f32>();
    var a5 = vec4<f32>();
    var a6 = vec4<f32>();
    var a7 = vec4<f32>();
    var m = NEG_BIG;   // running max of the row's scores (log2 units)
    var l = 0.0;       // running sum of 2^(score - m)
    var mb = NEG_BIG;  // the same for row B (PAIRS)
    var lb = 0.0;

    let t_stop = (row_end - 1u) / GROUP + 1u;   // one past the block's last token
    var run_first = row0;
    loop {
        if (run_first >= row_end) {
            break;
        }
        // the run: consecutive tokens of one sequence, and the union of their key ranges
        let t_first = run_first / GROUP;
        let slot = rows[t_first].y;
        var lo = first_key(rows[t_first].x);
        var hi = rows[t_first].x + later(t_first) + 1u;
        var t_next = t_first + 1u;
        loop {
            if (t_next >= t_stop || rows[t_next].y != slot) {
                break;
            }
            lo = min(lo, first_key(rows[t_next].x));
            hi = max(hi, rows[t_next].x + later(t_next) + 1u);
            t_next += 1u;
        }
        let run_end = min(t_next * GROUP, row_end);
        let in_run = ra.live && qr >= run_first && qr < run_end;
        let in_run_b = PAIRS && rb.live && qr + 1u >= run_first && qr + 1u < run_end;
        let span = hi - lo;
        let parts = min(SPLITS, (span + MIN_PART - 1u) / MIN_PART);
        let per_part = (span + parts - 1u) / parts;
        let k_start = lo + part * per_part;
        let k_end = min(k_start + per_part, hi);
        if (part < parts && k_start < k_end) {
            // prefetch the first chunk's words
            let i0 = word_index(me, k_start, k_end, slot, g);
            let i1 = word_index(me + WG, k_start, k_end, slot, g);
            let i2 = word_index(me + 2u * WG, k_start, k_end, slot, g);
            let i3 = word_index(me + 3u * WG, k_start, k_end, slot, g);
            var kw0 = vec4<u32>();
            var kw1 = vec4<u32>();
            var kw2 = vec4<u32>();
            var kw3 = vec4<u32>();
            var vw0 = vec4<u32>();
            var vw1 = vec4<u32>();
            var vw2 = vec4<u32>();
            var vw3 = vec4<u32>();
            if (i0 != 0xffffffffu) { kw0 = k_cache[i0]; vw0 = v_cache[i0]; }
            if (PER > 1u && i1 != 0xffffffffu) { kw1 = k_cache[i1]; vw1 = v_cache[i1]; }
            if (PER > 2u && i2 != 0xffffffffu) { kw2 = k_cache[i2]; vw2 = v_cache[i2]; }
            if (PER > 3u && i3 != 0xffffffffu) { kw3 = k_cache[i3]; vw3 = v_cache[i3]; }
            for (var chunk = k_start; chunk < k_end; chunk += KC) {
                workgroupBarrier();   // every row is done with the previous chunk
                stage(me, kw0, vw0);
                if (PER > 1u) { stage(me + WG, kw1, vw1); }
                if (PER > 2u) { stage(me + 2u * WG, kw2, vw2); }
                if (PER > 3u) { stage(me + 3u * WG, kw3, vw3); }
                workgroupBarrier();
                // the next chunk's words, read while this one is used
                let next = chunk + KC;
                let j0 = word_index(me, next, k_end, slot, g);
                let j1 = word_index(me + WG, next, k_end, slot, g);
                let j2 = word_index(me + 2u * WG, next, k_end, slot, g);
                let j3 = word_index(me + 3u * WG, next, k_end, slot, g);
                kw0 = vec4<u32>();
                vw0 = vec4<u32>();
                kw1 = vec4<u32>();
                vw1 = vec4<u32>();
                kw2 = vec4<u32>();
                vw2 = vec4<u32>();
                kw3 = vec4<u32>();
                vw3 = vec4<u32>();
                if (j0 != 0xffffffffu) { kw0 = k_cache[j0]; vw0 = v_cache[j0]; }
                if (PER > 1u && j1 != 0xffffffffu) { kw1 = k_cache[j1]; vw1 = v_cache[j1]; }
                if (PER > 2u && j2 != 0xffffffffu) { kw2 = k_cache[j2]; vw2 = v_cache[j2]; }
                if (PER > 3u && j3 != 0xffffffffu) { kw3 = k_cache[j3]; vw3 = v_cache[j3]; }

                let n_keys = min(KC, k_end - chunk);
                for (var j = 0u; j < n_keys; j += 4u) {
                    let b = j * VEC + slice;
                    let key = vec4<u32>(chunk + j) + vec4<u32>(0u, 1u, 2u, 3u);
                    if (PAIRS) {
                        let d0 = key_dot2(b, q0, q1, q2, q3, q4, q5, q6, q7);
                        let d1 = key_dot2(b + VEC, q0, q1, q2, q3, q4, q5, q6, q7);
                        let d2 = key_dot2(b + 2u * VEC, q0, q1, q2, q3, q4, q5, q6, q7);
                        let d3 = key_dot2(b + 3u * VEC, q0, q1, q2, q3, q4, q5, q6, q7);
                        let sa = masked(row_sum4(vec4<f32>(d0.x, d1.x, d2.x, d3.x)), key, in_run, ra, k_end);
                        let sb = masked(row_sum4(vec4<f32>(d0.y, d1.y, d2.y, d3.y)), key, in_run_b, rb, k_end);
                        let ma = max(max(sa.x, sa.y), max(sa.z, sa.w));
                        if (ma > m) {
                            let c = exp2(m - ma);
                            l *= c;
                            a0 *= c;
                            a1 *= c;
                            a2 *= c;
                            a3 *= c;
                            m = ma;
                        }
                        let mbq = max(max(sb.x, sb.y), max(sb.z, sb.w));
                        if (mbq > mb) {
                            let c = exp2(mb - mbq);
                            lb *= c;
                            a4 *= c;
                            a5 *= c;
                            a6 *= c;
                            a7 *= c;
                            mb = mbq;
                        }
                        let wa = select(vec4<f32>(), exp2(sa - vec4<f32>(m)), sa > vec4<f32>(NEG_BIG));
                        let wb = select(vec4<f32>(), exp2(sb - vec4<f32>(mb)), sb > vec4<f32>(NEG_BIG));
                        l += wa.x + wa.y + wa.z + wa.w;
                        lb += wb.x + wb.y + wb.z + wb.w;
                        let p0 = values4x2(b, wa, wb);
                        let p1 = values4x2(b + TPR, wa, wb);
                        let p2 = values4x2(b + 2u * TPR, wa, wb);
                        let p3 = values4x2(b + 3u * TPR, wa, wb);
                        a0 += p0[0];
                        a1 += p1[0];
                        a2 += p2[0];
                        a3 += p3[0];
                        a4 += p0[1];
                        a5 += p1[1];
                        a6 += p2[1];
                        a7 += p3[1];
                        continue;
                    }
                    // this thread's part of the four keys' scores, summed over the row's threads
                    let part_s = vec4<f32>(key_dot(b, q0, q1, q2, q3, q4, q5, q6, q7),
                                           key_dot(b + VEC, q0, q1, q2, q3, q4, q5, q6, q7),
                                           key_dot(b + 2u * VEC, q0, q1, q2, q3, q4, q5, q6, q7),
                                           key_dot(b + 3u * VEC, q0, q1, q2, q3, q4, q5, q6, q7));
                    let sc = masked(row_sum4(part_s), key, in_run, ra, k_end);
                    let mq = max(max(sc.x, sc.y), max(sc.z, sc.w));
                    if (mq > m) {
                        let c = exp2(m - mq);
                        l *= c;
                        a0 *= c;
                        a1 *= c;
                        a2 *= c;
                        a3 *= c;
                        a4 *= c;
                        a5 *= c;
                        a6 *= c;
                        a7 *= c;
                        m = mq;
                    }
                    let w = select(vec4<f32>(), exp2(sc - vec4<f32>(m)), sc > vec4<f32>(NEG_BIG));
                    l += w.x + w.y + w.z + w.w;
                    a0 += values4(b, w);
                    a1 += values4(b + TPR, w);
                    a2 += values4(b + 2u * TPR, w);
                    a3 += values4(b + 3u * TPR, w);
                    a4 += values4(b + 4u * TPR, w);
                    a5 += values4(b + 5u * TPR, w);
                    a6 += values4(b + 6u * TPR, w);
                    a7 += values4(b + 7u * TPR, w);
                }
            }
        }
        run_first = run_end;
    }

    if (PAIRS) {
        store_row(ra, part, slice, m, l, a0, a1, a2, a3);
        store_row(rb, part, slice, mb, lb, a4, a5, a6, a7);
    } else {
        store_row(ra, part, slice, m, l, a0, a1, a2, a3);
        store_row(ra, part, slice + 4u * TPR, m, l, a4, a5, a6, a7);
    }
}

// Store four vec4 of a row's accumulator (dims of vec4 c + TPR i, i < 4): normalised into out, or with
// SPLITS > 1 the part's raw sums and (max, sum) into the scratch (only its sum if it had no keys).
fn store_row(row: Row, part: u32, c: u32, m: f32, l: f32, a0: vec4<f32>, a1: vec4<f32>, a2: vec4<f32>,
             a3: vec4<f32>) {
    if (!row.live) {
        return;
    }
    var dst = row.out_row * VEC + c;
    var inv = 1.0;
    if (SPLITS == 1u) {
        inv = 1.0 / l;
    } else {
        let prow = row.out_row * SPLITS + part;
        if (c == 0u) {
            out[ML_BASE + prow] = vec4<f32>(m, l, 0.0, 0.0);
        }
        if (l == 0.0) {
            return;   // an unused part: the combine reads only its sum
        }
        dst = prow * VEC + c;
    }
    out[dst] = a0 * inv;
    out[dst + TPR] = a1 * inv;
    out[dst + 2u * TPR] = a2 * inv;
    out[dst + 3u * TPR] = a3 * inv;
}
