// matvec_q4_k_i8: matvec_q4_k.wgsl on an input quantised to 8 bits per 32 values (llama.cpp's Q8_1 for its
// integer-dot matvecs; a model's int8_activations): y[t, ROW_START + r] = sum over 32-value blocks b of
//   d_x(t, b) * d sc_b * sum_i q_i xq_i  -  dmin m_b * sum_i x_i        (sum x exact, as matmul/tiles_i8.wgsl)
// for N_ROWS rows of one shard and the step's first min(n_tokens, T_MAX) tokens (GLU as in matvec.wgsl).
//
// Why: the f32 kernel turns every 4-bit value into an f32 (four instructions a value with its multiply-add)
// and reads 4 bytes of x from workgroup memory per value; here dot4I8Packed multiplies and adds four
// nibbles (masked in place: they are bytes 0..15) by four int8 of x in one instruction, and x costs a byte.
// Work split and units as matvec_q4_k.wgsl: unit u of a row is 16 quant bytes, block u / 8, chunk
// j = (u % 8) / 2, half u % 2: its low nibbles are 16 values of sub-block 2j, its high nibbles the same 16
// positions of sub-block 2j + 1. Each sub-block is one 32-value block of x; the minimum's term (times the
// block's exact sum) is added once, by the unit of half 0.
#include "matvec/constants.wgsl"
#include "matmul/glu.wgsl"
#include "matvec/q4_k_unit_scales.wgsl"
#include "matvec/${ENTRY}.wgsl"
#include "matvec/x_${X_SOURCE}.wgsl"

const BLOCK_WORDS4: u32 = 9u;                     // 144 bytes
const ROW_WORDS4: u32 = K / 256u * BLOCK_WORDS4;
const UNITS_PER_ROW: u32 = K / 32u;               // 16 quant bytes = 32 values each
const UP_WORDS4: u32 = N_ROWS * ROW_WORDS4 * GLU;
const NIBBLES: u32 = 0x0F0F0F0Fu;

@group(0) @binding(1) var<storage, read> weight: array<vec4<u32>>;

fn dot16(q: vec4<u32>, x: vec4<u32>) -> i32 {
    return dot4I8Packed(q.x, x.x) + dot4I8Packed(q.y, x.y) + dot4I8Packed(q.z, x.z) + dot4I8Packed(q.w, x.w);
}

// One token's x for a unit: 16 int8 of the low sub-block's block and the high's, and both blocks' (d, sum).
struct UnitX {
    lo: vec4<u32>,
    hi: vec4<u32>,
    d_lo: vec2<f32>,
    d_hi: vec2<f32>,
}

// first: the low sub-block's first value of the unit in the [T_MAX, K] input (a multiple of 16).
fn unit_x(first: u32) -> UnitX {
    let scales = x_q8_scales2(first / 32u);  // the low sub-block's block is even: the pair starts there
    return UnitX(x_q8(first / 16u), x_q8((first + 32u) / 16u), scales.xy, scales.zw);
}

// The unit's sum of W x: q its 16 quant bytes, s their scales (unit_scales), with_min: add the minimum's term.
fn unit_dot(q: vec4<u32>, s: vec4<f32>, u: UnitX, with_min: bool) -> f32 {
    let lo = dot16(q & vec4<u32>(NIBBLES), u.lo);
    let hi = dot16((q >> vec4<u32>(4u)) & vec4<u32>(NIBBLES), u.hi);
    let mins = select(0.0, s.y * u.d_lo.y + s.w * u.d_hi.y, with_min);
    return s.x * u.d_lo.x * f32(lo) + s.z * u.d_hi.x * f32(hi) - mins;
}

// Called by the entry point before prepare_x; this kernel loads its weights where it uses them.
fn prefetch_row(first_row: u32, slot: u32, lane: u32) {}

// A unit's weight words for all tokens: quant bytes and scales of the row and of its up row (GLU), whether its
// sub-blocks' minimums apply, and its first value.
struct I8Unit {
    q: vec4<u32>,
    s: vec4<f32>,
    q_up: vec4<u32>,
    s_up: vec4<f32>,
    with_min: bool,
    first: u32,
}

// acc + the unit's products with token t (a literal: see matvec/constants.wgsl) where computes_token.
fn unit_token(acc: array<f32, OUTS>, t: u32, n: u32, w: I8Unit) -> array<f32, OUTS> {
    var sums = acc;
    if (computes_token(t, n)) {
        let xu = unit_x(t * K + w.first);
        sums[t] += unit_dot(w.q, w.s, xu, w.with_min);
        if (GLU == 1u) {
            sums[min(T_MAX + t, OUTS - 1u)] += unit_dot(w.q_up, w.s_up, xu, w.with_min);
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
    let row_base = (FIRST_ROW + row) * ROW_WORDS4;
    for (var u = lane; u < UNITS_PER_ROW; u += TPR) {
        let block = u / 8u;
        let part = u % 8u;
        let j = part / 2u;
        let at = row_base + block * BLOCK_WORDS4;
        let q = weight[at + 1u + part];  // quant bytes 16 + 32 j + 16 (part % 2)
        let s = unit_scales(weight[at], j);
        var q_up = vec4<u32>();
        var s_up = vec4<f32>();
        if (GLU == 1u) {
            q_up = weight[at + UP_WORDS4 + 1u + part];
            s_up = unit_scales(weight[at + UP_WORDS4], j);
        }
        // first: the low sub-block's first value
        let w = I8Unit(q, s, q_up, s_up, part % 2u == 0u, block * 256u + 64u * j + 16u * (part % 2u));
        acc = unit_token(acc, 0u, n, w);
        acc = unit_token(acc, 1u, n, w);
        acc = unit_token(acc, 2u, n, w);
        acc = unit_token(acc, 3u, n, w);
        acc = unit_token(acc, 4u, n, w);
        acc = unit_token(acc, 5u, n, w);
        acc = unit_token(acc, 6u, n, w);
        acc = unit_token(acc, 7u, n, w);
    }
    return acc;
}

#include "matvec/store_${STORE}.wgsl"
