// matvec_q6_k: matvec.wgsl for Q6_K weights, a unit of 32 values per thread step: y[t, ROW_START + r] =
// sum_k W[FIRST_ROW + r, k] * x[t, k] for N_ROWS rows of one shard and the step's first
// min(n_tokens, T_MAX) tokens (GLU as in matvec.wgsl: gate rows, then up rows N_ROWS further).
//
// Why a kernel of its own: the generic decoder (quant/q6_k.wgsl) makes 16 values from two unaligned
// 16-byte loads (five words each), a scale byte and d, reading each low-bits byte twice and each
// high-bits byte four times. Here a unit is one half h of a block and 8 consecutive l (see q6_k.wgsl
// for the layout): 8 bytes of ql at 64h + l, 8 at 64h + 32 + l and 8 of qh at 32h + l give the 32
// values 128h + 32a + l (a = 0..3) with four scales; every byte is read once (matvec/q6_k_unit.wgsl).
// Each quarter a is summed as d*sc_a * (sum q x - 32 sum x).
//
// Work split: as matvec_q4_k.wgsl: TPR threads per row, ROWS rows per workgroup, lane l takes units
// l, l + TPR, ... of its row (unit u: block u / 8, half (u / 4) % 2, l = 8 (u % 4)).
#include "matvec/constants.wgsl"
#include "quant/byte_floats.wgsl"
#include "matmul/gelu_glu.wgsl"
#include "matvec/q6_k_unit.wgsl"
#include "matvec/${ENTRY}.wgsl"
#include "matvec/x_${X_SOURCE}.wgsl"

const ROW_BYTES: u32 = K / 256u * Q6_K_BLOCK_BYTES;
const UNITS_PER_ROW: u32 = K / 32u;
const UP_BYTES: u32 = N_ROWS * ROW_BYTES * GLU;

@group(0) @binding(1) var<storage, read> weight: array<u32>;

// The unit's 32 values of x for one token: quarter a's 8 values are x[base + 32 a .. + 8) (2 vec4 each).
struct UnitX {
    a0: mat2x4<f32>, a1: mat2x4<f32>, a2: mat2x4<f32>, a3: mat2x4<f32>,
    sums: vec4<f32>,  // sum of each quarter's 8 values
}

fn unit_x(xb: u32) -> UnitX {
    var u: UnitX;
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
fn quarter_dot(low: vec2<u32>, high: vec2<u32>, xq: mat2x4<f32>) -> f32 {
    let q0 = (low.x & 0x0F0F0F0Fu) | ((high.x & 0x03030303u) << 4u);
    let q1 = (low.y & 0x0F0F0F0Fu) | ((high.y & 0x03030303u) << 4u);
    return dot(u8x4_to_f32(q0), xq[0]) + dot(u8x4_to_f32(q1), xq[1]);
}

// sum over the unit's 32 values of W x, the block at byte `block`, half h, l = l0 .. l0 + 7.
fn unit_dot(block: u32, h: u32, l0: u32, u: UnitX) -> f32 {
    let q = q6_k_unit(block, h, l0);
    let qx = vec4<f32>(quarter_dot(q.ql_a, q.qh, u.a0), quarter_dot(q.ql_b, q.qh >> vec2<u32>(2u), u.a1),
                       quarter_dot(q.ql_a >> vec2<u32>(4u), q.qh >> vec2<u32>(4u), u.a2),
                       quarter_dot(q.ql_b >> vec2<u32>(4u), q.qh >> vec2<u32>(6u), u.a3));
    return q.d * dot(q.scales, qx - 32.0 * u.sums);
}

// Called by the entry point before prepare_x; this kernel loads its weights where it uses them (loading them
// a unit ahead, as matvec_q4_k.wgsl does, took the 4B's v 7.3 -> 6.2 us and its head 327 -> 314, but its down
// 18.6 -> 20.5 on an H100; the 4B's decode 281 tok/s without, 280 with).
fn prefetch_row(first_row: u32, slot: u32, lane: u32) {}

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
        for (var t = 0u; t < T_MAX; t++) {
            if (t < n) {
                let xu = unit_x((t * K + block * 256u + 128u * h + l0) / 4u);
                acc[t] += unit_dot(at, h, l0, xu);
                if (GLU == 1u) {
                    acc[min(T_MAX + t, OUTS - 1u)] += unit_dot(at + UP_BYTES, h, l0, xu);
                }
            }
        }
    }
    return acc;
}

#include "matvec/store_${STORE}.wgsl"
