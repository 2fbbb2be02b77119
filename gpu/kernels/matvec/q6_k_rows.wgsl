// The Q6_K matvecs' f32 row work (matvec_q6_k.wgsl, and the Q6_K rows of matvec_q4_k_q6_k.wgsl), which
// matvec_q6_k.wgsl's header describes: a thread's 32-value units of one row (and of a second row on the same
// x: GLU's up row or PAIRS' row ROWS further), loaded where they are used. Needs the including kernel's K, TPR,
// T_MAX, OUTS, SECOND, x_vec, n_tokens, matvec/q6_k_unit.wgsl (with its q6_weight binding) and u8x4_to_f32
// (quant/byte_floats.wgsl); rows are given as byte offsets.

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

// sum q x over one quarter's 8 values: low, the 4-bit parts (two words), high, the 2-bit parts in place.
fn q6_quarter_dot(low: vec2<u32>, high: vec2<u32>, xq: mat2x4<f32>) -> f32 {
    let q0 = (low.x & 0x0F0F0F0Fu) | ((high.x & 0x03030303u) << 4u);
    let q1 = (low.y & 0x0F0F0F0Fu) | ((high.y & 0x03030303u) << 4u);
    return dot(u8x4_to_f32(q0), xq[0]) + dot(u8x4_to_f32(q1), xq[1]);
}

// sum over the unit's 32 values of W x, the block at byte `block`, half h, l = l0 .. l0 + 7.
fn q6_unit_dot(block: u32, h: u32, l0: u32, u: Q6UnitX) -> f32 {
    let q = q6_k_unit(block, h, l0);
    let qx = vec4<f32>(q6_quarter_dot(q.ql_a, q.qh, u.a0), q6_quarter_dot(q.ql_b, q.qh >> vec2<u32>(2u), u.a1),
                       q6_quarter_dot(q.ql_a >> vec2<u32>(4u), q.qh >> vec2<u32>(4u), u.a2),
                       q6_quarter_dot(q.ql_b >> vec2<u32>(4u), q.qh >> vec2<u32>(6u), u.a3));
    return q.d * dot(q.scales, qx - 32.0 * u.sums);
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
        for (var t = 0u; t < T_MAX; t++) {
            if (t < n) {
                let xu = q6_unit_x((t * K + block * 256u + 128u * h + l0) / 4u);
                acc[t] += q6_unit_dot(bases.x + at, h, l0, xu);
                if (SECOND == 1u) {
                    acc[min(T_MAX + t, OUTS - 1u)] += q6_unit_dot(bases.y + at, h, l0, xu);
                }
            }
        }
    }
    return acc;
}
