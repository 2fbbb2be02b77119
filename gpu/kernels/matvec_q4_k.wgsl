// matvec_q4_k: matvec.wgsl for Q4_K weights, reading them in 16-byte loads: y[t, ROW_START + r] =
// sum_k W[FIRST_ROW + r, k] * x[t, k] for N_ROWS rows of one shard and the step's first
// min(n_tokens, T_MAX) tokens (GLU as in matvec.wgsl: gate rows, then up rows N_ROWS further).
//
// Why a kernel of its own: a Q4_K block (144 bytes, see quant/q4_k.wgsl) is 16-byte aligned, and
// its 16-byte header (d, dmin, the twelve scale bytes) and each 16 bytes of its quants are one
// vec4<u32> load. The generic kernel decodes 16 values per call and so loads each quant byte twice
// (low and high nibbles serve two sub-blocks) plus five header words per 16 values; here a unit
// of work is one 16-byte quant load: its low nibbles are 16 values of sub-block 2j, its high
// nibbles 16 values of sub-block 2j + 1 (j = the block's 32-byte chunk), 32 products per two loads.
// The affine form is summed as d*sc * sum(q x) - dmin*m * sum(x), so each sub-block's scale is
// applied once per unit, not per value (f32 rounding differs from dequantise-then-dot by a few ulp
// of the row sum; tests compare with a tolerance).
//
// Work split: as matvec.wgsl, TPR threads per row, ROWS rows per workgroup; lane l of a row takes
// units l, l + TPR, ... (unit u: block u / 8, chunk (u % 8) / 2, half u % 2), so the 8 lanes of a
// block read its 128 quant bytes as one contiguous span. With PAIRS (long rows: row_pairs_shape in
// gpu/ops/matmul.py) a thread also takes the row ROWS further on the same loads of x, 32 values of which
// cost 8 vec4 loads against the weight's one. Entry points:
// matvec/${ENTRY}.wgsl (reduce_subgroup or reduce_workgroup; software adapters use matvec.wgsl's
// whole_rows).
#include "matvec/constants.wgsl"
#include "quant/byte_floats.wgsl"
#include "matmul/gelu_glu.wgsl"
#include "matvec/q4_k_unit_scales.wgsl"
#include "matvec/${ENTRY}.wgsl"
#include "matvec/x_${X_SOURCE}.wgsl"

const BLOCK_WORDS4: u32 = 9u;                     // 144 bytes
const ROW_WORDS4: u32 = K / 256u * BLOCK_WORDS4;
const UNITS_PER_ROW: u32 = K / 32u;               // 16 quant bytes = 32 values each

@group(0) @binding(1) var<storage, read> weight: array<vec4<u32>>;

// The unit's 32 values of x for one token: the low sub-block's 16 (4 vec4 from xb), the high's (8 vec4 on).
struct UnitX {
    lo0: vec4<f32>, lo1: vec4<f32>, lo2: vec4<f32>, lo3: vec4<f32>,
    hi0: vec4<f32>, hi1: vec4<f32>, hi2: vec4<f32>, hi3: vec4<f32>,
    sum_lo: f32, sum_hi: f32,
}

fn unit_x(xb: u32) -> UnitX {
    var u: UnitX;
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

// sum over the unit's 32 values of W x: q the 16 quant bytes, s their scales (unit_scales).
fn unit_dot(q: vec4<u32>, s: vec4<f32>, u: UnitX) -> f32 {
    let lo = mat4x4<f32>(u8x4_to_f32(q.x & 0x0F0F0F0Fu), u8x4_to_f32(q.y & 0x0F0F0F0Fu),
                         u8x4_to_f32(q.z & 0x0F0F0F0Fu), u8x4_to_f32(q.w & 0x0F0F0F0Fu));
    let hi = mat4x4<f32>(u8x4_to_f32((q.x >> 4u) & 0x0F0F0F0Fu), u8x4_to_f32((q.y >> 4u) & 0x0F0F0F0Fu),
                         u8x4_to_f32((q.z >> 4u) & 0x0F0F0F0Fu), u8x4_to_f32((q.w >> 4u) & 0x0F0F0F0Fu));
    let qx_lo = dot(lo[0], u.lo0) + dot(lo[1], u.lo1) + dot(lo[2], u.lo2) + dot(lo[3], u.lo3);
    let qx_hi = dot(hi[0], u.hi0) + dot(hi[1], u.hi1) + dot(hi[2], u.hi2) + dot(hi[3], u.hi3);
    return s.x * qx_lo - s.y * u.sum_lo + s.z * qx_hi - s.w * u.sum_hi;
}

// Word offsets of row first_row + slot and of its second row (GLU's up row, or PAIRS' row ROWS further; a pair
// row past the shard reads the last row again, store_row drops its sums).
fn row_bases(first_row: u32, slot: u32) -> vec2<u32> {
    let row = first_row + slot;
    let second_row = select(min(row + ROWS, N_ROWS - 1u), row + N_ROWS, GLU == 1u);
    return vec2<u32>((FIRST_ROW + row) * ROW_WORDS4, (FIRST_ROW + second_row) * ROW_WORDS4);
}

// The weight words of a thread's next unit (quant bytes and block header, and its second row's), loaded one unit
// ahead of the arithmetic: the first before the input's prologue (a normalised input takes two reductions and
// three rounds of loads before any weight is needed), each next one before the current unit's arithmetic.
var<private> next_q: vec4<u32>;
var<private> next_h: vec4<u32>;
var<private> next_q_2: vec4<u32>;
var<private> next_h_2: vec4<u32>;

fn load_unit(bases: vec2<u32>, u: u32) {
    let block = (u / 8u) * BLOCK_WORDS4;
    next_q = weight[bases.x + block + 1u + u % 8u];  // quant bytes 16 + 32 j + 16 (part % 2)
    next_h = weight[bases.x + block];
    if (SECOND == 1u) {
        next_q_2 = weight[bases.y + block + 1u + u % 8u];
        next_h_2 = weight[bases.y + block];
    }
}

// Called by the entry point before prepare_x: this thread's first unit.
fn prefetch_row(first_row: u32, slot: u32, lane: u32) {
    if (first_row + slot < N_ROWS && lane < UNITS_PER_ROW) {
        load_unit(row_bases(first_row, slot), lane);
    }
}

// This thread's share of row first_row + slot: the dot products of its units with each token ([t]; with a
// second row, GLU's up row or PAIRS' row ROWS further, its at [T_MAX + t]: the same x serves both).
fn row_partial(first_row: u32, slot: u32, lane: u32) -> array<f32, OUTS> {
    var acc: array<f32, OUTS>;
    let n = n_tokens();
    if (first_row + slot >= N_ROWS) {
        return acc;
    }
    let bases = row_bases(first_row, slot);
    for (var u = lane; u < UNITS_PER_ROW; u += TPR) {
        let q = next_q;
        let h = next_h;
        let q_2 = next_q_2;
        let h_2 = next_h_2;
        if (u + TPR < UNITS_PER_ROW) {
            load_unit(bases, u + TPR);
        }
        let block = u / 8u;
        let part = u % 8u;
        let j = part / 2u;
        let s = unit_scales(h, j);
        var s_2 = vec4<f32>();
        if (SECOND == 1u) {
            s_2 = unit_scales(h_2, j);
        }
        let first = block * 256u + 64u * j + 16u * (part % 2u);  // the low sub-block's first value
        for (var t = 0u; t < T_MAX; t++) {
            if (t < n) {
                let xu = unit_x((t * K + first) / 4u);
                acc[t] += unit_dot(q, s, xu);
                if (SECOND == 1u) {
                    acc[min(T_MAX + t, OUTS - 1u)] += unit_dot(q_2, s_2, xu);
                }
            }
        }
    }
    return acc;
}

#include "matvec/store_${STORE}.wgsl"
