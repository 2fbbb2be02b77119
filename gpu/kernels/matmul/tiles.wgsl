// matmul entry point for GPUs: a workgroup of (BT / TT) x (BR / RR) threads computes BT tokens x BR
// weight rows over its part of k (K / SPLIT values), each thread TT tokens x RR rows (TT, RR = 4 or 8) in f32
// registers. Its k range is walked in chunks of BK values: per chunk the threads dequantise the
// weight tile (BR rows x BK, each value once) and copy the x tile (BT tokens x BK) into workgroup
// memory as ${TILE} (matmul/tile_${TILE}.wgsl), both k-major, so each k step of a chunk (multiply_k,
// written out for every step) reads TT / 4 vec4 of tokens and RR / 4 vec4 of rows for TT RR
// multiply-adds. The next chunk is read from the buffers into registers while the current one is
// multiplied, so memory latency overlaps arithmetic (Q4_K held as its loaded words and dequantised when
// stored, other types dequantised as read: matmul/group16_${GROUP_LOADS}.wgsl). Accumulators and loads
// are named variables, not arrays: NVIDIA's Vulkan compiler kept loop-indexed arrays in local memory
// (measured 5x slower on an H200).
// A thread's rows are quads tx (and tx + BR / 8 when RR = 8) of the tile's BR / 4, its tokens quads
// ty (and ty + BT / 8 when TT = 8), so neighbouring threads read neighbouring workgroup words. With
// GLU the tile's first BR / 2 rows are gate rows and the next BR / 2 their up rows (RR = 8: a
// thread's second quad is the up rows of its first).
// SPLIT > 1 (short k loops measured fastest, and small shapes need more workgroups): workgroup s of a
// tile sums k chunks [s C / SPLIT, (s + 1) C / SPLIT) of the row's C = K / BK (parts differ by a chunk at
// most, so any SPLIT up to C: the split that fills whole rounds of workgroups need not divide C) and
// stores its raw sums (with GLU, gate sums at column c and up sums at N_ROWS + c) at y[s T_MAX + t, c];
// kernels/matmul_reduce.wgsl adds the SPLIT parts into the real y. Tiles wholly past n_tokens return at
// once; partial tiles compute on repeated rows (or zero tokens) and skip their stores.
#include "matmul/tile_${TILE}.wgsl"
#include "matmul/group16_${GROUP_LOADS}.wgsl"
#include "matmul/tile_store.wgsl"

@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;   // [T_MAX, K]

override BT: u32 = 64u;    // tokens per workgroup tile, a multiple of TT
override BR: u32 = 128u;   // weight rows per workgroup tile, a multiple of 4 RR
override RR: u32 = 8u;     // weight rows per thread: 4, or 8 (two quads; GLU needs 8)
override TT: u32 = 4u;     // tokens per thread: 4, or 8 (two quads)
override BK: u32 = 32u;    // k per chunk, 16 or 32 (main calls multiply_k for each), dividing K
override SPLIT: u32 = 1u;  // workgroups sharing a tile's k range

const TX: u32 = BR / RR;            // threads across rows
const WG: u32 = TX * (BT / TT);
const CHUNKS: u32 = K / BK;         // k chunks of a row, SPLIT or more
const W_COUNT: u32 = BR * BK / GROUP_VALUES;  // dequant16 calls per chunk: 1 or 2 per thread
const X_COUNT: u32 = BT * BK / 4u;            // vec4 of x per chunk: 1, 2 or 4 per thread
const W_JOBS: u32 = (W_COUNT + WG - 1u) / WG;
const X_JOBS: u32 = (X_COUNT + WG - 1u) / WG;

// k-major tiles in quads of k steps: [kk / 4][kk % 4][column quad]. multiply_k's indices are constants, so the
// bounds check clamps a thread's column once and each load's address is the column's plus an immediate; a store
// of 4 k steps (store_w4, store_x) indexes the quad once and its steps by constants, so its 4 addresses are one
// base register plus immediates. With the k step as one index (clamped on each store), NVIDIA's compiler
// recomputed the stores' clamped addresses in every chunk: H100 SASS, a chunk of the 8 x 8 tile's loop went from
// about 1,440 instructions for its 1,024 fmas to 1,350-1,400 (with quant/high_bits.wgsl's multiply), and exact
// prefill 4B 5,157 -> 5,292 tok/s, 1B 18,063 -> 18,639 / 18,652, 270M 64,001 -> 64,946.
// xs: x[t0 + 4 j + c, k0 + 4 q + i] at [q].steps[i][j][c]; ws: tile row 4 j + c, k step 4 q + i at [q][i][j][c]
// Each k quad of xs is padded by 32 / BK vec4 so that a warp's stores of x (BK / 4 quads of 128 / BK tokens each,
// see store_x) fall on 32 different banks.
struct XQuad {
    steps: array<array<vec4<tile_t>, BT / 4u>, 4>,
    pad: array<vec4<tile_t>, 32u / BK>,
}
var<workgroup> xs: array<XQuad, BK / 4u>;
var<workgroup> ws: array<array<array<vec4<tile_t>, BR / 4u>, 4>, BK / 4u>;

// Weight job j (j < W_COUNT): tile row j % BR, 16-value group j / BR of each chunk. Thread lid has
// jobs lid and lid + WG (where W_JOBS = 2); threads past the count, whole warps, skip them.

// The row's group index of weight job j in the chunk at k0 (fetched and stored by the same index).
fn w_group(j: u32, k0: u32) -> u32 {
    return k0 / GROUP_VALUES + j / BR;
}

// Four k values of one row, k steps 4 q .. 4 q + 3.
fn store_w4(q: u32, col: u32, c4: u32, v: vec4<f32>) {
    ws[q][0][col][c4] = to_tile(v.x);
    ws[q][1][col][c4] = to_tile(v.y);
    ws[q][2][col][c4] = to_tile(v.z);
    ws[q][3][col][c4] = to_tile(v.w);
}

// The group's columns each by a constant index. A loop over them indexed the matrix at run time, and NVIDIA's
// compiler kept it a loop picking each column by a chain of predicated moves (H100 SASS: about 40 instructions
// a column besides its 4 stores, in the threads that dequantise); written out, the 4B's exact prefill went from
// 4,737 to 5,056 tok/s.
fn store_w(j: u32, w: mat4x4<f32>) {
    // the group's first k-step quad: jobs j < W_COUNT = BR BK / 16 make it less than BK / 4, so "% (BK / 4)"
    // changes nothing but tells the compiler so: with BK = 16 it is 0, and the stores' quads constants
    let q = ((j / BR) * (GROUP_VALUES / 4u)) % (BK / 4u);
    let col = (j % BR) / 4u;
    let c4 = j % 4u;
    store_w4(q, col, c4, w[0]);
    store_w4(q + 1u, col, c4, w[1]);
    store_w4(q + 2u, col, c4, w[2]);
    store_w4(q + 3u, col, c4, w[3]);
}

// x job j (j < X_COUNT): tile token j / (BK / 4), its vec4 j % (BK / 4) of each chunk; thread lid has jobs lid + m
// WG. Neighbouring threads read one token's contiguous k (64 or 128 bytes): with jobs along tokens instead (token
// j % BT), each warp-wide load touched 32 tokens' rows, 32 cache lines, and the L1 transactions of a chunk's loads
// (x, the weights and workgroup memory) outnumbered its fma issue cycles. H200, 512 tokens, us, along tokens ->
// along k: the 4B's o 2048 x 2560 Q6_K 216 -> 194, gate-up 2560 x 2 x 10240 Q4_K 1,342 -> 1,285.
fn x_token(j: u32) -> u32 {
    return j / (BK / 4u);
}

fn x_quad(j: u32) -> u32 {
    return j % (BK / 4u);
}

// x job j's vec4 of chunk k0 (zeros past n).
fn fetch_x(t0: u32, n: u32, j: u32, k0: u32) -> vec4<f32> {
    let t = t0 + x_token(j);
    return select(vec4<f32>(), x[min(t, n - 1u) * (K / 4u) + (k0 / 4u) + x_quad(j)], t < n);
}

fn store_x(j: u32, v: vec4<f32>) {
    let q = x_quad(j);
    let col = x_token(j) / 4u;
    let c4 = x_token(j) % 4u;
    xs[q].steps[0][col][c4] = to_tile(v.x);
    xs[q].steps[1][col][c4] = to_tile(v.y);
    xs[q].steps[2][col][c4] = to_tile(v.z);
    xs[q].steps[3][col][c4] = to_tile(v.w);
}

// A thread's loads of one chunk: weight jobs lid and lid + WG (as group_fetch holds them), x jobs lid + m WG.
struct Loads {
    w0: GroupLoad,
    w1: GroupLoad,
    x0: vec4<f32>,
    x1: vec4<f32>,
    x2: vec4<f32>,
    x3: vec4<f32>,
}

// Whether weight job j's group in the chunk at k0 lies in a later block than its group in the chunk before (or
// `first`: the loop's first chunk, nothing held yet), so that the group file loads that block's head rather than
// keeping the one held.
fn w_new_block(j: u32, k0: u32, first: bool) -> bool {
    return first || w_group(j, k0) % GROUPS_PER_BLOCK < BK / GROUP_VALUES;
}

// Thread lid's loads of the chunk at k0 (wb0, wb1: its weight jobs' row bytes; zeros for jobs past the counts),
// `held` those of the chunk before (the block heads the group file keeps).
fn fetch_chunk(lid: u32, wb0: u32, wb1: u32, t0: u32, n: u32, k0: u32, held: Loads, first: bool) -> Loads {
    var l = Loads(GroupLoad(), GroupLoad(), vec4<f32>(), vec4<f32>(), vec4<f32>(), vec4<f32>());
    if (lid < W_COUNT) {
        l.w0 = group_fetch(wb0, w_group(lid, k0), held.w0, w_new_block(lid, k0, first));
    }
    if (W_JOBS > 1u && lid + WG < W_COUNT) {
        l.w1 = group_fetch(wb1, w_group(lid + WG, k0), held.w1, w_new_block(lid + WG, k0, first));
    }
    if (lid < X_COUNT) {
        l.x0 = fetch_x(t0, n, lid, k0);
    }
    if (X_JOBS > 1u && lid + WG < X_COUNT) {
        l.x1 = fetch_x(t0, n, lid + WG, k0);
    }
    if (X_JOBS > 2u && lid + 2u * WG < X_COUNT) {
        l.x2 = fetch_x(t0, n, lid + 2u * WG, k0);
    }
    if (X_JOBS > 2u && lid + 3u * WG < X_COUNT) {
        l.x3 = fetch_x(t0, n, lid + 3u * WG, k0);
    }
    return l;
}

// Thread lid's loads of the chunk at k0 into workgroup memory (the weights' values decoded here, group_values).
fn store_chunk(lid: u32, l: Loads, k0: u32) {
    if (lid < W_COUNT) {
        store_w(lid, group_values(l.w0, w_group(lid, k0)));
    }
    if (W_JOBS > 1u && lid + WG < W_COUNT) {
        store_w(lid + WG, group_values(l.w1, w_group(lid + WG, k0)));
    }
    if (lid < X_COUNT) {
        store_x(lid, l.x0);
    }
    if (X_JOBS > 1u && lid + WG < X_COUNT) {
        store_x(lid + WG, l.x1);
    }
    if (X_JOBS > 2u && lid + 2u * WG < X_COUNT) {
        store_x(lid + 2u * WG, l.x2);
    }
    if (X_JOBS > 2u && lid + 3u * WG < X_COUNT) {
        store_x(lid + 3u * WG, l.x3);
    }
}

// A thread's sums: a<i> token 4 ty + i, rows of quad tx; b<i> rows of quad tx + BR / 8 (RR = 8); i = 4..7:
// tokens of quad ty + BT / 8 (TT = 8).
struct Sums {
    a0: vec4<f32>, a1: vec4<f32>, a2: vec4<f32>, a3: vec4<f32>, a4: vec4<f32>, a5: vec4<f32>, a6: vec4<f32>,
    a7: vec4<f32>, b0: vec4<f32>, b1: vec4<f32>, b2: vec4<f32>, b3: vec4<f32>, b4: vec4<f32>, b5: vec4<f32>,
    b6: vec4<f32>, b7: vec4<f32>,
}

// The products of k step kk of the chunk in workgroup memory. Called once for each kk with kk a literal:
// NVIDIA's compiler kept a loop over kk a loop, and a step of it cost 92 instructions for 64 fmas (H100 SASS:
// each workgroup load's index clamped and shifted, accumulators moved between registers, the counter).
fn multiply_k(acc_in: Sums, kk: u32, tx: u32, ty: u32) -> Sums {
    var acc = acc_in;
    let xa = vec4<f32>(xs[kk / 4u].steps[kk % 4u][ty]);
    let wa = vec4<f32>(ws[kk / 4u][kk % 4u][tx]);
    var wb = vec4<f32>();
    if (RR == 8u) {
        wb = vec4<f32>(ws[kk / 4u][kk % 4u][tx + BR / 8u]);
    }
    acc.a0 += xa.x * wa;
    acc.a1 += xa.y * wa;
    acc.a2 += xa.z * wa;
    acc.a3 += xa.w * wa;
    if (RR == 8u) {
        acc.b0 += xa.x * wb;
        acc.b1 += xa.y * wb;
        acc.b2 += xa.z * wb;
        acc.b3 += xa.w * wb;
    }
    if (TT == 8u) {
        let xb = vec4<f32>(xs[kk / 4u].steps[kk % 4u][ty + BT / 8u]);
        acc.a4 += xb.x * wa;
        acc.a5 += xb.y * wa;
        acc.a6 += xb.z * wa;
        acc.a7 += xb.w * wa;
        if (RR == 8u) {
            acc.b4 += xb.x * wb;
            acc.b5 += xb.y * wb;
            acc.b6 += xb.z * wb;
            acc.b7 += xb.w * wb;
        }
    }
    return acc;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let place = tile_place(wid.x + wid.y * nwg.x);
    let s = place.part;
    let r0 = place.r0;
    let t0 = place.t0;
    let n = n_tokens();
    if (s >= SPLIT || t0 >= n) {
        return;
    }
    let tx = lid % TX;
    let ty = lid / TX;
    let k_begin = (s * CHUNKS / SPLIT) * BK;
    let k_last = ((s + 1u) * CHUNKS / SPLIT - 1u) * BK;

    // this thread's loads, fetched one chunk ahead: the weight's rows (as bytes) of its dequantisation jobs
    let wb0 = tile_row_byte(r0, lid % BR);
    let wb1 = tile_row_byte(r0, (lid + WG) % BR);
    var loads = fetch_chunk(lid, wb0, wb1, t0, n, k_begin, Loads(), true);

    var acc = Sums(vec4<f32>(), vec4<f32>(), vec4<f32>(), vec4<f32>(), vec4<f32>(), vec4<f32>(), vec4<f32>(),
                   vec4<f32>(), vec4<f32>(), vec4<f32>(), vec4<f32>(), vec4<f32>(), vec4<f32>(), vec4<f32>(),
                   vec4<f32>(), vec4<f32>());
    for (var k0 = k_begin; k0 <= k_last; k0 += BK) {
        store_chunk(lid, loads, k0);
        workgroupBarrier();
        // the next chunk, read while this one is multiplied (the last fetches itself again, unused)
        loads = fetch_chunk(lid, wb0, wb1, t0, n, min(k0 + BK, k_last), loads, false);
        // every k step of the chunk with its index a constant (see multiply_k)
        acc = multiply_k(multiply_k(multiply_k(multiply_k(acc, 0u, tx, ty), 1u, tx, ty), 2u, tx, ty), 3u, tx, ty);
        acc = multiply_k(multiply_k(multiply_k(multiply_k(acc, 4u, tx, ty), 5u, tx, ty), 6u, tx, ty), 7u, tx, ty);
        acc = multiply_k(multiply_k(multiply_k(multiply_k(acc, 8u, tx, ty), 9u, tx, ty), 10u, tx, ty), 11u, tx, ty);
        acc = multiply_k(multiply_k(multiply_k(multiply_k(acc, 12u, tx, ty), 13u, tx, ty), 14u, tx, ty), 15u, tx, ty);
        if (BK == 32u) {
            acc = multiply_k(multiply_k(multiply_k(multiply_k(acc, 16u, tx, ty), 17u, tx, ty), 18u, tx, ty),
                             19u, tx, ty);
            acc = multiply_k(multiply_k(multiply_k(multiply_k(acc, 20u, tx, ty), 21u, tx, ty), 22u, tx, ty),
                             23u, tx, ty);
            acc = multiply_k(multiply_k(multiply_k(multiply_k(acc, 24u, tx, ty), 25u, tx, ty), 26u, tx, ty),
                             27u, tx, ty);
            acc = multiply_k(multiply_k(multiply_k(multiply_k(acc, 28u, tx, ty), 29u, tx, ty), 30u, tx, ty),
                             31u, tx, ty);
        }
        workgroupBarrier();
    }

    store_tile(s, t0 + 4u * ty, r0 + 4u * tx, n, acc.a0, acc.a1, acc.a2, acc.a3, acc.b0, acc.b1, acc.b2, acc.b3);
    if (TT == 8u) {
        store_tile(s, t0 + 4u * ty + BT / 2u, r0 + 4u * tx, n, acc.a4, acc.a5, acc.a6, acc.a7, acc.b4, acc.b5, acc.b6,
                   acc.b7);
    }
}
