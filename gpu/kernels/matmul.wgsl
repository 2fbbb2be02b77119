// matmul: y[t, ROW_START + r] = sum_k W[r, k] * x[t, k] for the rows r of one weight shard and the
// step's first min(n_tokens, T_MAX) tokens (prefill). W is read as GGUF stores it
// (quant/${WEIGHT_TYPE}.wgsl decodes 16 values at a time); x and y are f32 rows; sums are f32.
//
// Work split: a workgroup of 256 threads computes a tile of TM = 64 tokens x TN = 128 rows, each
// thread 4 tokens x 8 rows in registers. K is walked in chunks of BK = 32 values: per chunk every
// thread dequantises one 16-value group into the weight tile and copies two vec4 of x into the x
// tile, both in workgroup memory (24 KiB, under lavapipe's 32 KiB) and k-major, so each step of
// the inner loop reads one vec4 of tokens and two vec4 of rows for 32 multiply-adds. Tiles wholly
// past n_tokens or N_ROWS return at once; partial tiles compute on zeros and skip their stores.
//
// Software adapters (WHOLE_ROWS = 1, WG = 64): lavapipe runs a workgroup as a loop over 8-lane SIMD
// slices and compiles every load with lane-varying addresses (workgroup memory included) into a
// per-lane loop of scalar loads, so loads per multiply-add bound it, not arithmetic or barriers.
// There a thread computes 8 rows x 8 tokens straight from the weight and x buffers, no workgroup
// memory: per 16 values of k it dequantises its 8 rows once (held in registers across tokens) and
// loads 16 values of x per token for 128 multiply-adds; a workgroup covers 64 rows x 64 tokens.
#include "common/step.wgsl"
#include "quant/bytes.wgsl"
#include "quant/${WEIGHT_TYPE}.wgsl"

override K: u32 = 256u;        // values per weight row, a multiple of BLOCK_VALUES
override N_ROWS: u32 = 1u;     // rows in this shard
override ROW_START: u32 = 0u;  // y column of the shard's first row
override Y_STRIDE: u32 = 1u;   // values per y row (all rows of the weight)
override T_MAX: u32 = 64u;     // rows of x and y: the program's tokens per step
override WHOLE_ROWS: u32 = 0u; // 1: the software adapters' split (8 rows x 8 tokens per thread)
override WG: u32 = 256u;       // threads per workgroup: 256, or 64 where WHOLE_ROWS = 1

const TM: u32 = 64u;   // tokens per tile
const TN: u32 = 128u;  // weight rows per tile
const BK: u32 = 32u;   // values of k per chunk
const ROW_BYTES: u32 = K / BLOCK_VALUES * BLOCK_BYTES;
const GROUPS_PER_BLOCK: u32 = BLOCK_VALUES / GROUP_VALUES;
const TOKEN_TILES: u32 = (T_MAX + TM - 1u) / TM;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> weight: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;   // [T_MAX, K]
@group(0) @binding(3) var<storage, read_write> y: array<f32>;   // [T_MAX, Y_STRIDE]

var<workgroup> xs: array<vec4<f32>, BK * TM / 4u>;  // [BK][TM / 4]: x[t0 + 4 j + c, k0 + kk] at [kk][j][c]
var<workgroup> ws: array<vec4<f32>, BK * TN / 4u>;  // [BK][TN / 4]: W[r0 + 4 j + c, k0 + kk] at [kk][j][c]

// y[t, r .. r + 3] = v where t < n and each row < N_ROWS.
fn store4(t: u32, r: u32, n: u32, v: vec4<f32>) {
    if (t < n) {
        for (var j = 0u; j < 4u; j++) {
            if (r + j < N_ROWS) {
                y[t * Y_STRIDE + ROW_START + r + j] = v[j];
            }
        }
    }
}

// Products of 16 values of x with 8 dequantised rows: (rows 0..3, rows 4..7).
struct Dot8 {
    lo: vec4<f32>,
    hi: vec4<f32>,
}

fn dot16(w: mat4x4<f32>, x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>) -> f32 {
    return dot(w[0], x0) + dot(w[1], x1) + dot(w[2], x2) + dot(w[3], x3);
}

// The 8 rows' (the w, in row order) dot products with x[t, 16 gi .. 16 gi + 15].
fn dot8(t: u32, gi: u32, w0: mat4x4<f32>, w1: mat4x4<f32>, w2: mat4x4<f32>, w3: mat4x4<f32>,
        w4: mat4x4<f32>, w5: mat4x4<f32>, w6: mat4x4<f32>, w7: mat4x4<f32>) -> Dot8 {
    let xi = (t * K + gi * GROUP_VALUES) / 4u;
    let x0 = x[xi];
    let x1 = x[xi + 1u];
    let x2 = x[xi + 2u];
    let x3 = x[xi + 3u];
    return Dot8(vec4<f32>(dot16(w0, x0, x1, x2, x3), dot16(w1, x0, x1, x2, x3), dot16(w2, x0, x1, x2, x3),
                          dot16(w3, x0, x1, x2, x3)),
                vec4<f32>(dot16(w4, x0, x1, x2, x3), dot16(w5, x0, x1, x2, x3), dot16(w6, x0, x1, x2, x3),
                          dot16(w7, x0, x1, x2, x3)));
}

// The software split: rows r0 + 8 j + lid % 8 and tokens t0 + 8 (lid / 8) + i, i, j < 8.
fn whole_rows(tile: u32, lid: u32, n: u32) {
    let r = (tile / ((T_MAX + 63u) / 64u)) * 64u + lid % 8u;
    let t = (tile % ((T_MAX + 63u) / 64u)) * 64u + 8u * (lid / 8u);
    if (r >= N_ROWS || t >= n) {
        return;
    }
    // rows past the shard and tokens past n read the last one; their sums are not stored
    let rows_lo = min(vec4<u32>(r) + vec4<u32>(0u, 8u, 16u, 24u), vec4<u32>(N_ROWS - 1u)) * ROW_BYTES;
    let rows_hi = min(vec4<u32>(r) + vec4<u32>(32u, 40u, 48u, 56u), vec4<u32>(N_ROWS - 1u)) * ROW_BYTES;
    var lo: array<vec4<f32>, 8>;  // [token i]: rows j = 0..3
    var hi: array<vec4<f32>, 8>;  // [token i]: rows j = 4..7
    for (var gi = 0u; gi < K / GROUP_VALUES; gi++) {
        let offset = (gi / GROUPS_PER_BLOCK) * BLOCK_BYTES;
        let g = gi % GROUPS_PER_BLOCK;
        let w0 = dequant16(rows_lo.x + offset, g);
        let w1 = dequant16(rows_lo.y + offset, g);
        let w2 = dequant16(rows_lo.z + offset, g);
        let w3 = dequant16(rows_lo.w + offset, g);
        let w4 = dequant16(rows_hi.x + offset, g);
        let w5 = dequant16(rows_hi.y + offset, g);
        let w6 = dequant16(rows_hi.z + offset, g);
        let w7 = dequant16(rows_hi.w + offset, g);
        for (var i = 0u; i < 8u; i++) {
            let d = dot8(min(t + i, n - 1u), gi, w0, w1, w2, w3, w4, w5, w6, w7);
            lo[i] += d.lo;
            hi[i] += d.hi;
        }
    }
    for (var i = 0u; i < 8u; i++) {
        for (var j = 0u; j < 4u; j++) {
            if (t + i < n && r + 8u * j < N_ROWS) {
                y[(t + i) * Y_STRIDE + ROW_START + r + 8u * j] = lo[i][j];
            }
            if (t + i < n && r + 32u + 8u * j < N_ROWS) {
                y[(t + i) * Y_STRIDE + ROW_START + r + 32u + 8u * j] = hi[i][j];
            }
        }
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let tile = wid.x + wid.y * nwg.x;
    if (WHOLE_ROWS == 1u) {
        whole_rows(tile, lid, min(step.n_tokens, T_MAX));
        return;
    }
    let r0 = (tile / TOKEN_TILES) * TN;  // neighbouring workgroups share weight rows
    let t0 = (tile % TOKEN_TILES) * TM;
    let n = min(step.n_tokens, T_MAX);
    if (r0 >= N_ROWS || t0 >= n) {
        return;
    }
    let tx = lid % 16u;  // rows r0 + 4 tx .. + 3 and r0 + 64 + 4 tx .. + 3
    let ty = lid / 16u;  // tokens t0 + 4 ty .. + 3
    // acc<i>: token t0 + 4 ty + i; lo: rows r0 + 4 tx + (0..3), hi: rows r0 + 64 + 4 tx + (0..3)
    var lo0 = vec4<f32>();
    var lo1 = vec4<f32>();
    var lo2 = vec4<f32>();
    var lo3 = vec4<f32>();
    var hi0 = vec4<f32>();
    var hi1 = vec4<f32>();
    var hi2 = vec4<f32>();
    var hi3 = vec4<f32>();

    // weight tile job: row wr, group wg of the chunk (rows past the shard read its last row)
    let wr = lid % TN;
    let wg = lid / TN;
    let w_base = min(r0 + wr, N_ROWS - 1u) * ROW_BYTES;
    // x tile jobs: token lid % 64 (consecutive threads, consecutive workgroup words), vec4 lid / 64 and + 4
    let xt = lid % TM;
    let xk = lid / TM;
    let x_ok = t0 + xt < n;
    let x_base = min(t0 + xt, n - 1u) * (K / 4u);

    for (var k0 = 0u; k0 < K; k0 += BK) {
        let gi = k0 / GROUP_VALUES + wg;
        let w = dequant16(w_base + (gi / GROUPS_PER_BLOCK) * BLOCK_BYTES, gi % GROUPS_PER_BLOCK);
        for (var c = 0u; c < 4u; c++) {
            for (var e = 0u; e < 4u; e++) {
                ws[(wg * GROUP_VALUES + 4u * c + e) * (TN / 4u) + wr / 4u][wr % 4u] = w[c][e];
            }
        }
        for (var h = 0u; h < BK / 4u; h += 4u) {
            let kq = xk + h;
            let v = select(vec4<f32>(), x[x_base + k0 / 4u + kq], x_ok);
            for (var e = 0u; e < 4u; e++) {
                xs[(4u * kq + e) * (TM / 4u) + xt / 4u][xt % 4u] = v[e];
            }
        }
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk++) {
            let a = xs[kk * (TM / 4u) + ty];
            let b_lo = ws[kk * (TN / 4u) + tx];
            let b_hi = ws[kk * (TN / 4u) + 16u + tx];
            lo0 += a.x * b_lo;
            lo1 += a.y * b_lo;
            lo2 += a.z * b_lo;
            lo3 += a.w * b_lo;
            hi0 += a.x * b_hi;
            hi1 += a.y * b_hi;
            hi2 += a.z * b_hi;
            hi3 += a.w * b_hi;
        }
        workgroupBarrier();
    }

    let t = t0 + 4u * ty;
    let r = r0 + 4u * tx;
    store4(t, r, n, lo0);
    store4(t + 1u, r, n, lo1);
    store4(t + 2u, r, n, lo2);
    store4(t + 3u, r, n, lo3);
    store4(t, r + 64u, n, hi0);
    store4(t + 1u, r + 64u, n, hi1);
    store4(t + 2u, r + 64u, n, hi2);
    store4(t + 3u, r + 64u, n, hi3);
}
