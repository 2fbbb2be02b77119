// The Q4_K matvecs' f32 row work (matvec_q4_k.wgsl, and the Q4_K rows of matvec_q4_k_q6_k.wgsl), which
// matvec_q4_k.wgsl's header describes: a thread's units of one row (and of a second row on the same x: GLU's
// up row or PAIRS' row ROWS further), each unit one 16-byte load of quant bytes (32 values) and its block's
// 16-byte header, loaded one unit ahead of the arithmetic and made into floats once for all tokens. Needs the
// including kernel's K, TPR, T_MAX, OUTS, SECOND, x_vec, n_tokens, unit_scales (matvec/q4_k_unit_scales.wgsl) and
// a `q4_weight: array<vec4<u32>>` binding; rows are given as word offsets.

const Q4_BLOCK_WORDS4: u32 = 9u;                  // 144 bytes
const Q4_ROW_WORDS4: u32 = K / 256u * Q4_BLOCK_WORDS4;
const Q4_UNITS_PER_ROW: u32 = K / 32u;            // 16 quant bytes = 32 values each

// The unit's 32 values of x for one token: the low sub-block's 16 (4 vec4 from xb), the high's (8 vec4 on).
struct Q4UnitX {
    lo0: vec4<f32>, lo1: vec4<f32>, lo2: vec4<f32>, lo3: vec4<f32>,
    hi0: vec4<f32>, hi1: vec4<f32>, hi2: vec4<f32>, hi3: vec4<f32>,
    sum_lo: f32, sum_hi: f32,
}

fn q4_unit_x(xb: u32) -> Q4UnitX {
    var u: Q4UnitX;
    u.lo0 = x_vec(xb);
    u.lo1 = x_vec(xb + 1u);
    u.lo2 = x_vec(xb + 2u);
    u.lo3 = x_vec(xb + 3u);
    u.hi0 = x_vec(xb + 8u);
    u.hi1 = x_vec(xb + 9u);
    u.hi2 = x_vec(xb + 10u);
    u.hi3 = x_vec(xb + 11u);
    let ones = vec4<f32>(1.0);
    u.sum_lo = dot(u.lo0 + u.lo1 + u.lo2 + u.lo3, ones);
    u.sum_hi = dot(u.hi0 + u.hi1 + u.hi2 + u.hi3, ones);
    return u;
}

// A unit's 32 quant values q as f32 1 + q / 16, made once for all of a step's tokens: lo from the low nibbles of its
// 16 bytes (the low sub-block's 16 values), hi from the high. Each nibble is shifted into the top of an f32 mantissa
// whose exponent is 1.0's (one_bits): a shift and a mask-and-OR a value, where a byte's conversion to a float
// (quant/byte_floats.wgsl) also took a second mask and a subtraction. The 1 is taken off once a sub-block, by
// q4_unit_dot's sums of x.
struct Q4Values {
    lo: mat4x4<f32>,
    hi: mat4x4<f32>,
}

const Q4_NIBBLE_BITS: u32 = 0x780000u;   // mantissa bits 19..22: a nibble there is nibble / 16

fn q4_low_nibbles(w: u32, one: u32) -> vec4<f32> {
    let m = vec4<u32>(w << 19u, w << 11u, w << 3u, w >> 5u) & vec4<u32>(Q4_NIBBLE_BITS);
    return bitcast<vec4<f32>>(m | vec4<u32>(one));
}

fn q4_high_nibbles(w: u32, one: u32) -> vec4<f32> {
    let m = vec4<u32>(w << 15u, w << 7u, w >> 1u, w >> 9u) & vec4<u32>(Q4_NIBBLE_BITS);
    return bitcast<vec4<f32>>(m | vec4<u32>(one));
}

fn q4_unit_values(q: vec4<u32>) -> Q4Values {
    let one = one_bits();
    return Q4Values(mat4x4<f32>(q4_low_nibbles(q.x, one), q4_low_nibbles(q.y, one), q4_low_nibbles(q.z, one),
                                q4_low_nibbles(q.w, one)),
                    mat4x4<f32>(q4_high_nibbles(q.x, one), q4_high_nibbles(q.y, one), q4_high_nibbles(q.z, one),
                                q4_high_nibbles(q.w, one)));
}

// The unit's scales for values 1 + q / 16 (q4_unit_values) from unit_scales' s = (d sc_lo, dmin m_lo, d sc_hi,
// dmin m_hi): d sc q - dmin m = 16 d sc (1 + q / 16) - (16 d sc + dmin m).
fn q4_nibble_scales(s: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(16.0 * s.x, 16.0 * s.x + s.y, 16.0 * s.z, 16.0 * s.z + s.w);
}

// sum over the unit's 32 values of W x: v its values (q4_unit_values), s their scales (q4_nibble_scales).
fn q4_unit_dot(v: Q4Values, s: vec4<f32>, u: Q4UnitX) -> f32 {
    let qx_lo = dot(v.lo[0], u.lo0) + dot(v.lo[1], u.lo1) + dot(v.lo[2], u.lo2) + dot(v.lo[3], u.lo3);
    let qx_hi = dot(v.hi[0], u.hi0) + dot(v.hi[1], u.hi1) + dot(v.hi[2], u.hi2) + dot(v.hi[3], u.hi3);
    return s.x * qx_lo - s.y * u.sum_lo + s.z * qx_hi - s.w * u.sum_hi;
}

// The weight words of a thread's next unit (quant bytes and block header, and its second row's), loaded one unit
// ahead of the arithmetic: the first before the input's prologue (a normalised input takes two reductions and
// three rounds of loads before any weight is needed), each next one before the current unit's arithmetic.
var<private> q4_next_q: vec4<u32>;
var<private> q4_next_h: vec4<u32>;
var<private> q4_next_q_2: vec4<u32>;
var<private> q4_next_h_2: vec4<u32>;

// Unit u of the rows at word offsets bases (x: the row, y: its second row, read where SECOND).
fn q4_load_unit(bases: vec2<u32>, u: u32) {
    let block = (u / 8u) * Q4_BLOCK_WORDS4;
    q4_next_q = q4_weight[bases.x + block + 1u + u % 8u];  // quant bytes 16 + 32 j + 16 (part % 2)
    q4_next_h = q4_weight[bases.x + block];
    if (SECOND == 1u) {
        q4_next_q_2 = q4_weight[bases.y + block + 1u + u % 8u];
        q4_next_h_2 = q4_weight[bases.y + block];
    }
}

// The thread's first unit, before the input's prologue.
fn q4_prefetch(bases: vec2<u32>, lane: u32) {
    if (lane < Q4_UNITS_PER_ROW) {
        q4_load_unit(bases, lane);
    }
}

// A unit decoded once for all tokens: quant values and scales (unit_scales) of the row and of its second row, and
// the unit's first value. Converted inside each token's dot instead, the values were made again for every token:
// H100, the 4B's shapes, 8 decode streams 537 -> 728 tok/s with matvec/q6_k_rows.wgsl's likewise (one stream the
// same, 330 -> 331).
struct Q4Unit {
    v: Q4Values,
    s: vec4<f32>,
    v_2: Q4Values,
    s_2: vec4<f32>,
    first: u32,
}

// acc + the unit's products with token t (a literal: see matvec/constants.wgsl) where computes_token.
fn q4_unit_token(acc: array<f32, OUTS>, t: u32, n: u32, w: Q4Unit) -> array<f32, OUTS> {
    var sums = acc;
    if (computes_token(t, n)) {
        let xu = q4_unit_x((t * K + w.first) / 4u);
        sums[t] += q4_unit_dot(w.v, w.s, xu);
        if (SECOND == 1u) {
            sums[min(T_MAX + t, OUTS - 1u)] += q4_unit_dot(w.v_2, w.s_2, xu);
        }
    }
    return sums;
}

// This thread's share of the row at word offset bases.x: the dot products of its units with each token ([t];
// with SECOND, the row at bases.y's at [T_MAX + t]: the same x serves both). q4_prefetch came first.
fn q4_row_partial(bases: vec2<u32>, lane: u32) -> array<f32, OUTS> {
    var acc: array<f32, OUTS>;
    let n = n_tokens();
    for (var u = lane; u < Q4_UNITS_PER_ROW; u += TPR) {
        let q = q4_next_q;
        let h = q4_next_h;
        let q_2 = q4_next_q_2;
        let h_2 = q4_next_h_2;
        if (u + TPR < Q4_UNITS_PER_ROW) {
            q4_load_unit(bases, u + TPR);
        }
        let block = u / 8u;
        let part = u % 8u;
        let j = part / 2u;
        let s = q4_nibble_scales(unit_scales(h, j));
        var s_2 = vec4<f32>();
        if (SECOND == 1u) {
            s_2 = q4_nibble_scales(unit_scales(h_2, j));
        }
        var v_2 = Q4Values();
        if (SECOND == 1u) {
            v_2 = q4_unit_values(q_2);
        }
        let first = block * 256u + 64u * j + 16u * (part % 2u);  // the low sub-block's first value
        let w = Q4Unit(q4_unit_values(q), s, v_2, s_2, first);
        acc = q4_unit_token(acc, 0u, n, w);
        acc = q4_unit_token(acc, 1u, n, w);
        acc = q4_unit_token(acc, 2u, n, w);
        acc = q4_unit_token(acc, 3u, n, w);
        acc = q4_unit_token(acc, 4u, n, w);
        acc = q4_unit_token(acc, 5u, n, w);
        acc = q4_unit_token(acc, 6u, n, w);
        acc = q4_unit_token(acc, 7u, n, w);
    }
    return acc;
}
