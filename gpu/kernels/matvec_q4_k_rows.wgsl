// matvec_q4_k_rows: y[t, ROW_START + r] = sum_k W[r, k] * x[t, k] for a Q4_K weight shard, on
// software adapters (lavapipe); the same result as kernels/matvec.wgsl, read differently.
//
// Why (as matvec_q8_0_rows.wgsl and matvec_q5_0_rows.wgsl): lavapipe compiles a buffer load with
// lane-varying addresses into a per-lane loop, so the number of loads bounds it. matvec.wgsl's Q4_K
// decoder (quant/q4_k.wgsl) reads a block's 16-byte header and 16 quant bytes as eight u32 loads for
// every 16 values; here a block (144 bytes, 16-byte aligned) is nine vec4 loads: its header once,
// then each 16 quant bytes (a unit, as in matvec_q4_k.wgsl: low nibbles 16 values of sub-block 2j,
// high nibbles 16 of sub-block 2j + 1, j the unit's 32-byte chunk). A thread computes 4 whole rows
// (rows first + j WG, j < 4), so each x value loaded serves 4 rows and no reduction is needed. The
// affine form d sc sum(q x) - dmin m sum(x) applies each sub-block's scale once (f32 rounding differs
// from dequantise-then-dot by a few ulp of the row sum). Quant words become floats inside each token's
// dot, which keeps a thread's registers to words: software adapters run matvecs for one token
// (software_matvec_max_tokens). GLU = 1 (the fused gate-up linear, as in matvec.wgsl): the thread also
// computes its 4 rows' up rows N_ROWS + r and stores act(gate) * up.
#include "common/step.wgsl"
#include "matmul/glu.wgsl"
#include "quant/byte_floats.wgsl"
#include "matvec/q4_k_unit_scales.wgsl"

override K: u32 = 256u;        // values per weight row, a multiple of 256
override N_ROWS: u32 = 1u;     // y columns computed: rows of W (with GLU, gate rows)
override FIRST_ROW: u32 = 0u;  // the shard's row where this dispatch starts
override ROW_START: u32 = 0u;  // y column of the dispatch's first row
override Y_STRIDE: u32 = 1u;   // values per y row
override T_MAX: u32 = 1u;      // rows of x and y: the program's tokens per step
override WG: u32 = 64u;        // threads per workgroup; a workgroup computes 4 WG rows
override GLU: u32 = 0u;        // 1: act(gate) * up, up row r at N_ROWS + r

const ROW_WORDS4: u32 = K / 256u * 9u;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> weight: array<vec4<u32>>;  // Q4_K blocks as stored
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;       // [T_MAX, K]
@group(0) @binding(3) var<storage, read_write> y: array<f32>;       // [T_MAX, Y_STRIDE]

// A unit's 32 values of x for one token: the low sub-block's 16 and the high's, and their sums.
struct UnitX {
    lo: array<vec4<f32>, 4>,
    hi: array<vec4<f32>, 4>,
    sum_lo: f32,
    sum_hi: f32,
}

fn unit_x(xb: u32) -> UnitX {
    var u: UnitX;
    for (var i = 0u; i < 4u; i++) {
        u.lo[i] = x[xb + i];
        u.hi[i] = x[xb + 8u + i];
    }
    let ones = vec4<f32>(1.0);
    u.sum_lo = dot(u.lo[0] + u.lo[1] + u.lo[2] + u.lo[3], ones);
    u.sum_hi = dot(u.hi[0] + u.hi[1] + u.hi[2] + u.hi[3], ones);
    return u;
}

// sum over a unit's 32 values of W x: q its quant words, s its scales (unit_scales).
fn unit_dot(q: vec4<u32>, s: vec4<f32>, u: UnitX) -> f32 {
    let lo = q & vec4<u32>(0x0F0F0F0Fu);
    let hi = (q >> vec4<u32>(4u)) & vec4<u32>(0x0F0F0F0Fu);
    let qx_lo = dot(u8x4_to_f32(lo.x), u.lo[0]) + dot(u8x4_to_f32(lo.y), u.lo[1]) + dot(u8x4_to_f32(lo.z), u.lo[2])
        + dot(u8x4_to_f32(lo.w), u.lo[3]);
    let qx_hi = dot(u8x4_to_f32(hi.x), u.hi[0]) + dot(u8x4_to_f32(hi.y), u.hi[1]) + dot(u8x4_to_f32(hi.z), u.hi[2])
        + dot(u8x4_to_f32(hi.w), u.hi[3]);
    return s.x * qx_lo - s.y * u.sum_lo + s.z * qx_hi - s.w * u.sum_hi;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let first_row = (wid.x + wid.y * nwg.x) * WG * 4u + lid;
    let n = min(step.n_tokens, T_MAX);
    if (first_row >= N_ROWS) {
        return;
    }
    // rows past the shard repeat its last; their sums are not stored
    let rows = min(vec4<u32>(first_row) + vec4<u32>(0u, 1u, 2u, 3u) * WG, vec4<u32>(N_ROWS - 1u));
    let w0 = (vec4<u32>(FIRST_ROW) + rows) * ROW_WORDS4;
    let wu = w0 + vec4<u32>(N_ROWS * ROW_WORDS4 * GLU);  // their up rows
    var acc: array<vec4<f32>, T_MAX>;  // [token]: rows j = 0..3
    var acc_u: array<vec4<f32>, T_MAX>;  // [token]: up rows (GLU)
    for (var b = 0u; b < K / 256u; b++) {
        let block = 9u * b;
        let h0 = weight[w0.x + block];
        let h1 = weight[w0.y + block];
        let h2 = weight[w0.z + block];
        let h3 = weight[w0.w + block];
        var g0 = vec4<u32>();
        var g1 = vec4<u32>();
        var g2 = vec4<u32>();
        var g3 = vec4<u32>();
        if (GLU == 1u) {
            g0 = weight[wu.x + block];
            g1 = weight[wu.y + block];
            g2 = weight[wu.z + block];
            g3 = weight[wu.w + block];
        }
        for (var j = 0u; j < 4u; j++) {
            let s0 = unit_scales(h0, j);
            let s1 = unit_scales(h1, j);
            let s2 = unit_scales(h2, j);
            let s3 = unit_scales(h3, j);
            var z0 = vec4<f32>();
            var z1 = vec4<f32>();
            var z2 = vec4<f32>();
            var z3 = vec4<f32>();
            if (GLU == 1u) {
                z0 = unit_scales(g0, j);
                z1 = unit_scales(g1, j);
                z2 = unit_scales(g2, j);
                z3 = unit_scales(g3, j);
            }
            for (var part = 0u; part < 2u; part++) {
                let unit = block + 1u + 2u * j + part;  // the unit's quant words
                let q0 = weight[w0.x + unit];
                let q1 = weight[w0.y + unit];
                let q2 = weight[w0.z + unit];
                let q3 = weight[w0.w + unit];
                var p0 = vec4<u32>();
                var p1 = vec4<u32>();
                var p2 = vec4<u32>();
                var p3 = vec4<u32>();
                if (GLU == 1u) {
                    p0 = weight[wu.x + unit];
                    p1 = weight[wu.y + unit];
                    p2 = weight[wu.z + unit];
                    p3 = weight[wu.w + unit];
                }
                for (var t = 0u; t < T_MAX; t++) {
                    if (t < n) {
                        // the low sub-block's first value: block b, chunk j, 16 values a part
                        let u = unit_x((t * K + 256u * b + 64u * j + 16u * part) / 4u);
                        acc[t] += vec4<f32>(unit_dot(q0, s0, u), unit_dot(q1, s1, u), unit_dot(q2, s2, u),
                                            unit_dot(q3, s3, u));
                        if (GLU == 1u) {
                            acc_u[t] += vec4<f32>(unit_dot(p0, z0, u), unit_dot(p1, z1, u), unit_dot(p2, z2, u),
                                                  unit_dot(p3, z3, u));
                        }
                    }
                }
            }
        }
    }
    for (var t = 0u; t < n; t++) {
        for (var j = 0u; j < 4u; j++) {
            if (first_row + j * WG < N_ROWS) {
                var v = acc[t][j];
                if (GLU == 1u) {
                    v = glu(v, acc_u[t][j]);
                }
                y[t * Y_STRIDE + ROW_START + first_row + j * WG] = v;
            }
        }
    }
}
