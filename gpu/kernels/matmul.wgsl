// matmul: y[t, ROW_START + r] = sum_k W[r, k] * x[t, k] for the rows r of one weight shard and the
// step's first min(n_tokens, T_MAX) tokens (prefill). W is read as GGUF stores it
// (quant/${WEIGHT_TYPE}.wgsl decodes 16 values at a time); x and y are f32 rows; sums are f32.
//
// Work split: a workgroup of 256 threads computes a tile of TM = 64 tokens x TN = 64 rows, each
// thread 4 tokens x 4 rows in registers. K is walked in chunks of BK = 32 values: per chunk half
// the threads dequantise one 16-value group each into the weight tile and all threads copy the x
// tile, both into workgroup memory (16 KiB, under lavapipe's 32 KiB) and both k-major, so the
// inner loop reads one vec4 of tokens and one vec4 of rows per k. Tiles wholly past n_tokens or
// N_ROWS return at once; partial tiles compute on zeros and skip their stores.
#include "common/step.wgsl"
#include "quant/bytes.wgsl"
#include "quant/${WEIGHT_TYPE}.wgsl"

override K: u32 = 256u;        // values per weight row, a multiple of BLOCK_VALUES
override N_ROWS: u32 = 1u;     // rows in this shard
override ROW_START: u32 = 0u;  // y column of the shard's first row
override Y_STRIDE: u32 = 1u;   // values per y row (all rows of the weight)
override T_MAX: u32 = 64u;     // rows of x and y: the program's tokens per step

const TM: u32 = 64u;  // tokens per tile
const TN: u32 = 64u;  // weight rows per tile
const BK: u32 = 32u;  // values of k per chunk
const ROW_BYTES: u32 = K / BLOCK_VALUES * BLOCK_BYTES;
const GROUPS_PER_BLOCK: u32 = BLOCK_VALUES / GROUP_VALUES;
const TOKEN_TILES: u32 = (T_MAX + TM - 1u) / TM;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> weight: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;   // [T_MAX, K]
@group(0) @binding(3) var<storage, read_write> y: array<f32>;   // [T_MAX, Y_STRIDE]

var<workgroup> xs: array<vec4<f32>, BK * TM / 4u>;  // [BK][TM / 4]: x[t0 + 4 j + c, k0 + kk] at [kk][j][c]
var<workgroup> ws: array<vec4<f32>, BK * TN / 4u>;  // [BK][TN / 4]: W[r0 + 4 j + c, k0 + kk] at [kk][j][c]

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
    let tx = lid % 16u;  // rows r0 + 4 tx .. + 3
    let ty = lid / 16u;  // tokens t0 + 4 ty .. + 3
    var acc: array<vec4<f32>, 4>;  // acc[i][j]: token t0 + 4 ty + i, row r0 + 4 tx + j

    // weight tile job (threads 0..127): row wr, group wg of the chunk
    let wr = lid % TN;
    let wg = lid / TN;
    let w_row = r0 + wr;
    // x tile jobs: token lid / 8 and lid / 8 + 32, vec4 lid % 8 of the chunk
    let xk = lid % 8u;
    let xt = lid / 8u;

    for (var k0 = 0u; k0 < K; k0 += BK) {
        if (wg < BK / GROUP_VALUES) {
            var w = mat4x4<f32>();
            if (w_row < N_ROWS) {
                let gi = k0 / GROUP_VALUES + wg;
                w = dequant16(w_row * ROW_BYTES + (gi / GROUPS_PER_BLOCK) * BLOCK_BYTES, gi % GROUPS_PER_BLOCK);
            }
            for (var c = 0u; c < 4u; c++) {
                for (var e = 0u; e < 4u; e++) {
                    ws[(wg * GROUP_VALUES + 4u * c + e) * (TN / 4u) + wr / 4u][wr % 4u] = w[c][e];
                }
            }
        }
        for (var h = 0u; h < TM; h += 32u) {
            let t = xt + h;
            var v = vec4<f32>();
            if (t0 + t < n) {
                v = x[((t0 + t) * K + k0) / 4u + xk];
            }
            for (var e = 0u; e < 4u; e++) {
                xs[(4u * xk + e) * (TM / 4u) + t / 4u][t % 4u] = v[e];
            }
        }
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk++) {
            let a = xs[kk * (TM / 4u) + ty];
            let b = ws[kk * (TN / 4u) + tx];
            acc[0] += a.x * b;
            acc[1] += a.y * b;
            acc[2] += a.z * b;
            acc[3] += a.w * b;
        }
        workgroupBarrier();
    }

    for (var i = 0u; i < 4u; i++) {
        let t = t0 + 4u * ty + i;
        for (var j = 0u; j < 4u; j++) {
            let r = r0 + 4u * tx + j;
            if (t < n && r < N_ROWS) {
                y[t * Y_STRIDE + ROW_START + r] = acc[i][j];
            }
        }
    }
}
