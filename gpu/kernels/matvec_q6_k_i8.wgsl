// matvec_q6_k_i8: matvec_q6_k.wgsl on an input quantised to 8 bits per 32 values (llama.cpp's Q8_1 for its
// integer-dot matvecs; a model's int8_activations): y[t, ROW_START + r] = sum over 16-value sub-blocks g of
//   d sc_g * d_x(t, block of g) * sum_i (q_i - 32) xq_i
// for N_ROWS rows of one shard and the step's first min(n_tokens, T_MAX) tokens (GLU as in matvec.wgsl).
//
// Why: as matvec_q4_k_i8.wgsl, dot4I8Packed takes four 6-bit values (bytes 0..63, assembled in place as in
// matvec_q6_k.wgsl) times four int8 of x in one instruction; the zero point's term is 32 times the sum of
// the quantised x, four bytes at a time by dot4I8Packed with 0x01010101.
// Units as matvec_q6_k.wgsl: unit u of a row is half h = (u / 4) % 2 of block u / 8 at l0 = 8 (u % 4): the
// 32 values 128 h + 32 a + l0 .. + 7 (a = 0..3), each quarter a in 32-value block 4 h + a of x. A unit's
// weights are read and assembled once for all the step's tokens (Q6Bytes).
#include "matvec/constants.wgsl"
#include "matmul/glu.wgsl"
#include "matvec/q6_k_unit.wgsl"
#include "matvec/${ENTRY}.wgsl"
#include "matvec/x_${X_SOURCE}.wgsl"

const ROW_BYTES: u32 = K / 256u * Q6_K_BLOCK_BYTES;
const UNITS_PER_ROW: u32 = K / 32u;
const UP_BYTES: u32 = N_ROWS * ROW_BYTES * GLU;
const ONES: u32 = 0x01010101u;

@group(0) @binding(1) var<storage, read> q6_weight: array<u32>;

// One token's x for a unit: each quarter's 8 int8 (two words) and its block's d.
struct UnitX {
    a0: vec2<u32>, a1: vec2<u32>, a2: vec2<u32>, a3: vec2<u32>,
    d: vec4<f32>,
}

fn x_8(first: u32) -> vec2<u32> {  // the 8 int8 from value first (a multiple of 8)
    let v = x_q8(first / 16u);
    return select(v.xy, v.zw, (first & 8u) != 0u);
}

// first: the unit's first value (quarter 0) in the [T_MAX, K] input.
fn unit_x(first: u32) -> UnitX {
    let b = first / 32u;  // a multiple of 4: quarters 0..3 are blocks b .. b + 3
    let s01 = x_q8_scales2(b);
    let s23 = x_q8_scales2(b + 2u);
    return UnitX(x_8(first), x_8(first + 32u), x_8(first + 64u), x_8(first + 96u),
                 vec4<f32>(s01.x, s01.z, s23.x, s23.z));
}

// A unit's weights for all tokens: each quarter's 8 six-bit values as bytes 0..63 (two words), its four
// sub-block scales and the block's d. Made once a unit and used for every token: read and assembled once a
// token, as before, they cost the synthetic 1B's int8 decode of 8 streams 1,894 / 1,905 tok/s against 1,964 /
// 1,962 now (H200, interleaved in one call; its output head runs this kernel).
struct Q6Bytes {
    q0: vec2<u32>, q1: vec2<u32>, q2: vec2<u32>, q3: vec2<u32>,
    scales: vec4<f32>,
    d: f32,
}

// The 4-bit parts `low` (two words) with the 2-bit parts `high` in place above them.
fn six_bit(low: vec2<u32>, high: vec2<u32>) -> vec2<u32> {
    return (low & vec2<u32>(0x0F0F0F0Fu)) | ((high & vec2<u32>(0x03030303u)) << vec2<u32>(4u));
}

// The unit of the block at byte `block`, half h, l = l0 .. l0 + 7.
fn unit_bytes(block: u32, h: u32, l0: u32) -> Q6Bytes {
    let q = q6_k_unit(block, h, l0);
    return Q6Bytes(six_bit(q.ql_a, q.qh), six_bit(q.ql_b, q.qh >> vec2<u32>(2u)),
                   six_bit(q.ql_a >> vec2<u32>(4u), q.qh >> vec2<u32>(4u)),
                   six_bit(q.ql_b >> vec2<u32>(4u), q.qh >> vec2<u32>(6u)), q.scales, q.d);
}

// sum (q - 32) xq over one quarter's 8 values.
fn quarter_dot(q: vec2<u32>, x: vec2<u32>) -> i32 {
    let qx = dot4I8Packed(q.x, x.x) + dot4I8Packed(q.y, x.y);
    return qx - 32 * (dot4I8Packed(ONES, x.x) + dot4I8Packed(ONES, x.y));
}

// sum over the unit's 32 values of W x for one token.
fn unit_dot(w: Q6Bytes, u: UnitX) -> f32 {
    let qx = vec4<i32>(quarter_dot(w.q0, u.a0), quarter_dot(w.q1, u.a1), quarter_dot(w.q2, u.a2),
                       quarter_dot(w.q3, u.a3));
    return w.d * dot(w.scales * u.d, vec4<f32>(qx));
}

// Called by the entry point before prepare_x; this kernel loads its weights where it uses them.
fn prefetch_row(first_row: u32, slot: u32, lane: u32) {}

// A unit of a row and of its up row (GLU), and its first value (quarter 0) in a row of the input.
struct I8Unit {
    w: Q6Bytes,
    up: Q6Bytes,
    first: u32,
}

// acc + the unit's products with token t (a literal: see matvec/constants.wgsl) where computes_token.
fn unit_token(acc: array<f32, OUTS>, t: u32, n: u32, unit: I8Unit) -> array<f32, OUTS> {
    var sums = acc;
    if (computes_token(t, n)) {
        let xu = unit_x(t * K + unit.first);
        sums[t] += unit_dot(unit.w, xu);
        if (GLU == 1u) {
            sums[min(T_MAX + t, OUTS - 1u)] += unit_dot(unit.up, xu);
        }
    }
    return sums;
}

// This thread's share of row first_row + slot: the dot products of its units with each token ([t]; with
// GLU, the up row's at [T_MAX + t]).
fn row_partial(first_row: u32, slot: u32, lane: u32) -> array<f32, OUTS> {
    var acc: array<f32, OUTS>;
    let row = first_row + slot;
    let n = n_tokens();
    if (row >= N_ROWS) {
        return acc;
    }
    let row_base = (FIRST_ROW + row) * ROW_BYTES;
    for (var u = lane; u < UNITS_PER_ROW; u += TPR) {
        let block = u / 8u;
        let h = (u / 4u) % 2u;
        let l0 = 8u * (u % 4u);
        let at = row_base + block * Q6_K_BLOCK_BYTES;
        var up = Q6Bytes();
        if (GLU == 1u) {
            up = unit_bytes(at + UP_BYTES, h, l0);
        }
        let unit = I8Unit(unit_bytes(at, h, l0), up, block * 256u + 128u * h + l0);
        acc = unit_token(acc, 0u, n, unit);
        acc = unit_token(acc, 1u, n, unit);
        acc = unit_token(acc, 2u, n, unit);
        acc = unit_token(acc, 3u, n, unit);
        acc = unit_token(acc, 4u, n, unit);
        acc = unit_token(acc, 5u, n, unit);
        acc = unit_token(acc, 6u, n, unit);
        acc = unit_token(acc, 7u, n, unit);
    }
    return acc;
}

#include "matvec/store_${STORE}.wgsl"
