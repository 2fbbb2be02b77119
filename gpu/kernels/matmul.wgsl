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
#include "common/step.wgsl"
#include "quant/bytes.wgsl"
#include "quant/${WEIGHT_TYPE}.wgsl"

override K: u32 = 256u;        // values per weight row, a multiple of BLOCK_VALUES
override N_ROWS: u32 = 1u;     // rows in this shard
override ROW_START: u32 = 0u;  // y column of the shard's first row
override Y_STRIDE: u32 = 1u;   // values per y row (all rows of the weight)
override T_MAX: u32 = 64u;     // rows of x and y: the program's tokens per step

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

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let tile = wid.x + wid.y * nwg.x;
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
