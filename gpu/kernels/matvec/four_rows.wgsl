// The frame the software adapters' block matvecs share (matvec_q8_0_rows.wgsl, matvec_q5_0_rows.wgsl,
// matvec_q4_k_rows.wgsl): their constants and bindings, each thread's 4 whole rows (rows first + j WG, j < 4),
// and the store of their sums (act(gate) * up with GLU = 1: the up rows N_ROWS + r). The including kernel
// defines ROW_WORDS, its weight row's length in the words it indexes (u32 or vec4).
#include "common/step.wgsl"
#include "matmul/glu.wgsl"
#include "matvec/x_binding_${X_SOURCE}.wgsl"

override K: u32 = 256u;        // values per weight row, a multiple of the kernel's block group
override N_ROWS: u32 = 1u;     // y columns computed: rows of W (with GLU, gate rows)
override FIRST_ROW: u32 = 0u;  // the shard's row where this dispatch starts
override ROW_START: u32 = 0u;  // y column of the dispatch's first row
override Y_STRIDE: u32 = 1u;   // values per y row
override T_MAX: u32 = 1u;      // rows of x and y: the program's tokens per step
override WG: u32 = 64u;        // threads per workgroup; a workgroup computes 4 WG rows
override GLU: u32 = 0u;        // 1: act(gate) * up, up row r at N_ROWS + r

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> weight: array<vec4<u32>>;  // the blocks as stored
@group(0) @binding(3) var<storage, read_write> y: array<f32>;       // [T_MAX, Y_STRIDE]

// The first of a thread's rows (past N_ROWS: the thread has none).
fn first_row_of(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.x + wid.y * nwg.x) * WG * 4u + lid;
}

// The word offsets of the thread's 4 rows (x..w) and of their up rows (GLU); rows past the shard repeat its last,
// and store_rows drops their sums.
struct RowWords {
    gate: vec4<u32>,
    up: vec4<u32>,
}

fn row_words(first_row: u32) -> RowWords {
    let rows = min(vec4<u32>(first_row) + vec4<u32>(0u, 1u, 2u, 3u) * WG, vec4<u32>(N_ROWS - 1u));
    let gate = (vec4<u32>(FIRST_ROW) + rows) * ROW_WORDS;
    return RowWords(gate, gate + vec4<u32>(N_ROWS * ROW_WORDS * GLU));
}

// y for the step's n tokens: acc[t] the 4 rows' sums, acc_u[t] their up rows' (GLU).
fn store_rows(first_row: u32, n: u32, acc: array<vec4<f32>, T_MAX>, acc_u: array<vec4<f32>, T_MAX>) {
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
