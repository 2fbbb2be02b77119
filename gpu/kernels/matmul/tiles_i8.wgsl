// matmul entry point for GPUs in 8-bit integers: the tiles of matmul/tiles.wgsl (BT tokens x BR weight
// rows a workgroup, 4 tokens x 8 rows a thread, k optionally split over SPLIT workgroups) with the
// multiply-adds done four at a time by dot4I8Packed (DP4A on NVIDIA: on an H100 it measured 120 T int8
// operations/s against 43 TFLOP/s of f32 fma), as llama.cpp's integer-dot kernels do. The input comes
// quantised per 32 values by kernels/quantize_q8.wgsl (or by residual_norm_q8.wgsl, by the same rule): int8
// q_x with a scale d_x and the block's exact sum s_x; the weight's 32-value blocks are unpacked to int8 with
// their scales by quant_i8/${WEIGHT_TYPE}.wgsl (value = d q_w + m, d per 16 or 32 values). Per block:
//   sum_k W x  ~  d_x (d_lo (q_w . q_x)[0..16) + d_hi (q_w . q_x)[16..32)) + m s_x
// the integer dots exact, the rest f32; the error is that of x's 8-bit rounding (relative ~2^-8 per
// value, averaging out over k), the same trade llama.cpp makes.
// Per 32-value chunk of k the workgroup unpacks its BR weight rows (one thread a row) and copies its
// BT tokens' blocks (one thread a token) into workgroup memory, laid out so that neighbouring threads
// read neighbouring words (a row's thread holds its super-block's head, block_head_i8, for the
// super-block's 32-value blocks: for Q4_K 8 words a block where it loaded 12); each thread then takes its
// two row quads one after the other, and within a quad values 0..15 then 16..31 (4 words of each of its 4
// rows and 4 tokens at a time), for 8 dot4I8Packed per (token, row). Few live registers matter more here
// than overlapping loads with arithmetic: on an H100 (4B shapes, 512 tokens) holding a quad's 8 words per
// row at once and fetching the next chunk into registers during the multiply ran 5,431 tok/s, this order
// 6,189. The thread/row/token layout and the epilogue are tiles.wgsl's (matmul/tile_store.wgsl), RR = 8.
#include "quant_i8/${WEIGHT_TYPE}.wgsl"
#include "matmul/tile_store.wgsl"

// The input's q and scales: quantize_q8's two tensors (the defaults), or both bindings on one QuantisedActivation
// (gpu/ops/quantised.py: a row's K / 4 words of q, then its K / 32 pairs), as residual_norm_q8.wgsl writes it.
@group(0) @binding(2) var<storage, read> xq: array<vec4<u32>>;   // row t's 16-int8 vec4s from t X_ROW_VEC4
@group(0) @binding(4) var<storage, read> xs: array<vec2<f32>>;   // row t's (d_x, s_x) from t X_ROW_PAIRS + X_PAIRS_AT

override BT: u32 = 64u;    // tokens per workgroup tile, a multiple of 4
override BR: u32 = 128u;   // weight rows per workgroup tile, a multiple of 32 (with GLU: gate then up rows)
override SPLIT: u32 = 1u;  // workgroups sharing a tile's k range
override X_ROW_VEC4: u32 = K / 16u;   // vec4s of xq per row (QuantisedActivation: 5 K / 64)
override X_ROW_PAIRS: u32 = K / 32u;  // pairs of xs per row (QuantisedActivation: 5 K / 32)
override X_PAIRS_AT: u32 = 0u;        // a row's first pair after its start (QuantisedActivation: K / 8)

const RR: u32 = 8u;                 // rows per thread: quads tx and tx + BR / 8
const TX: u32 = BR / RR;            // threads across rows
const WG: u32 = TX * (BT / 4u);
const QR: u32 = BR / 4u;            // row quads of the tile
const QT: u32 = BT / 4u;            // token quads
const BLOCKS: u32 = K / 32u;        // 32-value blocks per row
const BLOCKS_PER_SUPER: u32 = BLOCK_VALUES / 32u;  // 32-value blocks per block of the weight type
const PART: u32 = BLOCKS / SPLIT;   // blocks per workgroup
const JOBS: u32 = BR + BT;          // loads per chunk: one per weight row, one per token (at most WG)

// Row rho = 4 j + c of the tile: its q at ws_q[4 h + c][j] (h = 0: values 0..15, 1: 16..31), its
// scales at component c of ws_d[e][j] (e = 0: d_lo, 1: d_hi, 2: m). Token 4 j + i likewise in
// xs_q[4 h + i][j] and xs_d[e][j] (e = 0: d_x, 1: s_x). Two dimensions, the outer index a constant in the
// multiply, so that the bounds check clamps j once for all of a quad's loads and each load's address is
// j's plus an immediate (flat arrays clamped every index: about 30 more instructions a block in the loop).
var<workgroup> ws_q: array<array<vec4<u32>, QR>, 8>;
var<workgroup> ws_d: array<array<vec4<f32>, QR>, 3>;
var<workgroup> xs_q: array<array<vec4<u32>, QT>, 8>;
var<workgroup> xs_d: array<array<vec4<f32>, QT>, 2>;

// A load job's block: a weight row's (head: its super-block's, as block_i8 takes it), or a token's (lo, hi,
// (d_x, s_x, 0)).
fn fetch(job: u32, r0: u32, t0: u32, n: u32, b: u32, head: vec4<u32>) -> I8Block {
    if (job < BR) {
        return block_i8(tile_row_byte(r0, job), b, head);
    }
    let t = t0 + job - BR;
    if (t >= n) {
        return I8Block(vec4<u32>(), vec4<u32>(), vec3<f32>());   // zeros past the step's tokens
    }
    let ds = xs[t * X_ROW_PAIRS + X_PAIRS_AT + b];
    return I8Block(xq[t * X_ROW_VEC4 + 2u * b], xq[t * X_ROW_VEC4 + 2u * b + 1u], vec3<f32>(ds, 0.0));
}

fn store_job(job: u32, v: I8Block) {
    if (job < BR) {
        let j = job / 4u;
        let c = job % 4u;
        ws_q[c][j] = v.lo;
        ws_q[4u + c][j] = v.hi;
        ws_d[0][j][c] = v.scales.x;
        ws_d[1][j][c] = v.scales.y;
        ws_d[2][j][c] = v.scales.z;
    } else {
        let j = (job - BR) / 4u;
        let i = (job - BR) % 4u;
        xs_q[i][j] = v.lo;
        xs_q[4u + i][j] = v.hi;
        xs_d[0][j][i] = v.scales.x;
        xs_d[1][j][i] = v.scales.y;
    }
}

// Integer sums carry a bias of 0x4B400000, the f32 bits of 1.5 * 2^23: for |v| < 2^22 the bits of BIAS + v are
// the float 1.5 * 2^23 + v exactly, so one float subtract makes v a float (instead of a quarter-rate conversion),
// and the bias rides in as the first dot4I8Packed's accumulator (no add of its own).
const BIAS: i32 = 0x4B400000;

fn biased_to_f32(v: vec4<i32>) -> vec4<f32> {
    return bitcast<vec4<f32>>(v) - vec4<f32>(12582912.0);
}

// acc + x . w over 16 values, one dot4I8Packed chain (each a DP4A with its accumulator).
fn dot16_i8(x: vec4<u32>, w: vec4<u32>, acc: i32) -> i32 {
    let s0 = acc + dot4I8Packed(x.x, w.x);
    let s1 = s0 + dot4I8Packed(x.y, w.y);
    let s2 = s1 + dot4I8Packed(x.z, w.z);
    return s2 + dot4I8Packed(x.w, w.w);
}

// A quad's sums for the thread's 4 tokens.
struct Quad4 {
    t0: vec4<f32>, t1: vec4<f32>, t2: vec4<f32>, t3: vec4<f32>,
}

// acc + one token's block sums with 4 rows, from the biased integer dots: lo (values 0..15) and hi (16..31)
// apart where the halves have their own scales (HALF_SCALES), else hi holding the whole block's dot; times the
// scales, plus the rows' minimum times the block's sum of x. |lo + hi| <= 32 * 127 * 127 < 2^22. Written as
// fmas onto the accumulator: every multiply-add a thread saves here is 1/8 of its dot4I8Packed work.
fn combine(acc: vec4<f32>, lo: vec4<i32>, hi: vec4<i32>, d_x: f32, s_x: f32, d_lo: vec4<f32>, d_hi: vec4<f32>,
           m: vec4<f32>) -> vec4<f32> {
    var sum = acc;
    if (HAS_MIN) {
        sum = fma(m, vec4<f32>(s_x), sum);
    }
    if (HALF_SCALES) {
        sum = fma(biased_to_f32(lo), d_lo * d_x, sum);
    }
    return fma(biased_to_f32(hi), d_hi * d_x, sum);
}

// acc + one token's 16 values (x) dotted with 16 values of each of 4 rows.
fn half_dots(x: vec4<u32>, w0: vec4<u32>, w1: vec4<u32>, w2: vec4<u32>, w3: vec4<u32>, acc: vec4<i32>) -> vec4<i32> {
    return vec4<i32>(dot16_i8(x, w0, acc.x), dot16_i8(x, w1, acc.y), dot16_i8(x, w2, acc.z), dot16_i8(x, w3, acc.w));
}

// acc + the chunk's products of quad j's rows with the thread's tokens, values 0..15 then 16..31 (the hi dots
// continue the lo ones' chains unless the halves have scales of their own).
fn multiply_quad(acc: Quad4, j: u32, ty: u32) -> Quad4 {
    let bias = vec4<i32>(BIAS);
    var w0 = ws_q[0][j];
    var w1 = ws_q[1][j];
    var w2 = ws_q[2][j];
    var w3 = ws_q[3][j];
    let l0 = half_dots(xs_q[0][ty], w0, w1, w2, w3, bias);
    let l1 = half_dots(xs_q[1][ty], w0, w1, w2, w3, bias);
    let l2 = half_dots(xs_q[2][ty], w0, w1, w2, w3, bias);
    let l3 = half_dots(xs_q[3][ty], w0, w1, w2, w3, bias);
    w0 = ws_q[4][j];
    w1 = ws_q[5][j];
    w2 = ws_q[6][j];
    w3 = ws_q[7][j];
    let h0 = half_dots(xs_q[4][ty], w0, w1, w2, w3, select(l0, bias, HALF_SCALES));
    let h1 = half_dots(xs_q[5][ty], w0, w1, w2, w3, select(l1, bias, HALF_SCALES));
    let h2 = half_dots(xs_q[6][ty], w0, w1, w2, w3, select(l2, bias, HALF_SCALES));
    let h3 = half_dots(xs_q[7][ty], w0, w1, w2, w3, select(l3, bias, HALF_SCALES));
    let d_lo = ws_d[0][j];
    let d_hi = ws_d[1][j];
    let m = ws_d[2][j];
    let d_x = xs_d[0][ty];
    let s_x = xs_d[1][ty];
    return Quad4(combine(acc.t0, l0, h0, d_x.x, s_x.x, d_lo, d_hi, m),
                 combine(acc.t1, l1, h1, d_x.y, s_x.y, d_lo, d_hi, m),
                 combine(acc.t2, l2, h2, d_x.z, s_x.z, d_lo, d_hi, m),
                 combine(acc.t3, l3, h3, d_x.w, s_x.w, d_lo, d_hi, m));
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
    let b_begin = s * PART;
    let b_last = b_begin + PART - 1u;
    let loads = lid < JOBS;   // whole warps: BR and BT are multiples of 32 and 4 x 8
    var a = Quad4(vec4<f32>(), vec4<f32>(), vec4<f32>(), vec4<f32>());  // tokens 4 ty + i, rows of quad tx
    var b = a;                                                          // rows of quad tx + BR / 8
    var head = vec4<u32>();  // a weight row's super-block head, loaded once a super-block (Q4_K: 1 load in 3)
    for (var block = b_begin; block <= b_last; block++) {
        if (loads) {
            if (lid < BR && (block == b_begin || block % BLOCKS_PER_SUPER == 0u)) {
                head = block_head_i8(tile_row_byte(r0, lid), block);
            }
            store_job(lid, fetch(lid, r0, t0, n, block, head));
        }
        workgroupBarrier();
        a = multiply_quad(a, tx, ty);
        b = multiply_quad(b, tx + BR / 8u, ty);
        workgroupBarrier();
    }

    store_tile(s, t0 + 4u * ty, r0 + 4u * tx, n, a.t0, a.t1, a.t2, a.t3, b.t0, b.t1, b.t2, b.t3);
}
