// The Q6_K matvecs' f32 row work (matvec_q6_k.wgsl, and the Q6_K rows of matvec_q4_k_q6_k.wgsl), which
// matvec_q6_k.wgsl's header describes: a thread's 32-value units of one row (and of a second row on the same
// x: GLU's up row or PAIRS' row ROWS further), each read and made into floats once, then multiplied with each
// token's x. Needs the including kernel's K, TPR, T_MAX, OUTS, SECOND, x_vec, n_tokens, one_bits
// (matvec/constants.wgsl) and matvec/q6_k_unit.wgsl (with its q6_weight binding); rows are given as byte offsets.

const Q6_ROW_BYTES: u32 = K / 256u * Q6_K_BLOCK_BYTES;
const Q6_UNITS_PER_ROW: u32 = K / 32u;

// The unit's 32 values of x for one token: quarter a's 8 values are x[base + 32 a .. + 8) (2 vec4 each).
struct Q6UnitX {
    a0: mat2x4<f32>, a1: mat2x4<f32>, a2: mat2x4<f32>, a3: mat2x4<f32>,
    sums: vec4<f32>,  // sum of each quarter's 8 values
}

fn q6_unit_x(xb: u32) -> Q6UnitX {
    var u: Q6UnitX;
    u.a0 = mat2x4<f32>(x_vec(xb), x_vec(xb + 1u));
    u.a1 = mat2x4<f32>(x_vec(xb + 8u), x_vec(xb + 9u));
    u.a2 = mat2x4<f32>(x_vec(xb + 16u), x_vec(xb + 17u));
    u.a3 = mat2x4<f32>(x_vec(xb + 24u), x_vec(xb + 25u));
    let ones = vec4<f32>(1.0);
    u.sums = vec4<f32>(dot(u.a0[0] + u.a0[1], ones), dot(u.a1[0] + u.a1[1], ones),
                       dot(u.a2[0] + u.a2[1], ones), dot(u.a3[0] + u.a3[1], ones));
    return u;
}

// One quarter's 8 unsigned 6-bit values q as f32 1 + q / 64: low, the 4-bit parts (two words), high, the 2-bit
// parts in place. Each value is shifted into the top of an f32 mantissa whose exponent is 1.0's (one_bits), a shift
// and a mask-and-OR a value (see matvec/q4_k_rows.wgsl's q4_unit_values); q6_unit_dot takes the 1 off.
fn q6_quarter(low: vec2<u32>, high: vec2<u32>) -> mat2x4<f32> {
    let q0 = (low.x & 0x0F0F0F0Fu) | ((high.x & 0x03030303u) << 4u);
    let q1 = (low.y & 0x0F0F0F0Fu) | ((high.y & 0x03030303u) << 4u);
    return mat2x4<f32>(q6_mantissas(q0), q6_mantissas(q1));
}

const Q6_VALUE_BITS: u32 = 0x7E0000u;  // mantissa bits 17..22: a 6-bit value there is value / 64

// The four 6-bit values in the bytes of w (bits 8k .. 8k + 5) as 1 + q / 64.
fn q6_mantissas(w: u32) -> vec4<f32> {
    let m = vec4<u32>(w << 17u, w << 9u, w << 1u, w >> 7u) & vec4<u32>(Q6_VALUE_BITS);
    return bitcast<vec4<f32>>(m | vec4<u32>(one_bits()));
}

// A unit's 32 values (quarter a's 8 in a<a>) with its scales, read and made once for all of a step's tokens.
struct Q6Values {
    a0: mat2x4<f32>, a1: mat2x4<f32>, a2: mat2x4<f32>, a3: mat2x4<f32>,
    scales: vec4<f32>,
    d: f32,
}

// The unit of the block at byte `block`, half h, l = l0 .. l0 + 7.
fn q6_unit_values(block: u32, h: u32, l0: u32) -> Q6Values {
    let q = q6_k_unit(block, h, l0);
    return Q6Values(q6_quarter(q.ql_a, q.qh), q6_quarter(q.ql_b, q.qh >> vec2<u32>(2u)),
                    q6_quarter(q.ql_a >> vec2<u32>(4u), q.qh >> vec2<u32>(4u)),
                    q6_quarter(q.ql_b >> vec2<u32>(4u), q.qh >> vec2<u32>(6u)), q.scales, q.d);
}

// sum over the unit's 32 values of W x: with v = 1 + q / 64 (q6_quarter), (q - 32) x = 64 v x - 96 x.
fn q6_unit_dot(v: Q6Values, u: Q6UnitX) -> f32 {
    let vx = vec4<f32>(dot(v.a0[0], u.a0[0]) + dot(v.a0[1], u.a0[1]), dot(v.a1[0], u.a1[0]) + dot(v.a1[1], u.a1[1]),
                       dot(v.a2[0], u.a2[0]) + dot(v.a2[1], u.a2[1]), dot(v.a3[0], u.a3[0]) + dot(v.a3[1], u.a3[1]));
    return v.d * dot(v.scales, 64.0 * vx - 96.0 * u.sums);
}

// acc + the products of a unit's values v (v_2: its second row's) with token t (a literal: see
// matvec/constants.wgsl) where computes_token; first: the unit's first value.
fn q6_unit_token(acc: array<f32, OUTS>, t: u32, n: u32, v: Q6Values, v_2: Q6Values, first: u32) -> array<f32, OUTS> {
    var sums = acc;
    if (computes_token(t, n)) {
        let xu = q6_unit_x((t * K + first) / 4u);
        sums[t] += q6_unit_dot(v, xu);
        if (SECOND == 1u) {
            sums[min(T_MAX + t, OUTS - 1u)] += q6_unit_dot(v_2, xu);
        }
    }
    return sums;
}

// This thread's share of the row at byte offset bases.x: the dot products of its units with each token ([t];
// with SECOND, the row at bases.y's at [T_MAX + t]: the same x serves both).
fn q6_row_partial(bases: vec2<u32>, lane: u32) -> array<f32, OUTS> {
    var acc: array<f32, OUTS>;
    let n = n_tokens();
    for (var u = lane; u < Q6_UNITS_PER_ROW; u += TPR) {
        let block = u / 8u;
        let h = (u / 4u) % 2u;
        let l0 = 8u * (u % 4u);
        let at = block * Q6_K_BLOCK_BYTES;
        let first = block * 256u + 128u * h + l0;
        let v = q6_unit_values(bases.x + at, h, l0);
        var v_2 = Q6Values();
        if (SECOND == 1u) {
            v_2 = q6_unit_values(bases.y + at, h, l0);
        }
        acc = q6_unit_token(acc, 0u, n, v, v_2, first);
        acc = q6_unit_token(acc, 1u, n, v, v_2, first);
        acc = q6_unit_token(acc, 2u, n, v, v_2, first);
        acc = q6_unit_token(acc, 3u, n, v, v_2, first);
        acc = q6_unit_token(acc, 4u, n, v, v_2, first);
        acc = q6_unit_token(acc, 5u, n, v, v_2, first);
        acc = q6_unit_token(acc, 6u, n, v, v_2, first);
        acc = q6_unit_token(acc, 7u, n, v, v_2, first);
    }
    return acc;
}
