// The shared ends of the GPU matmul tiles (matmul/tiles.wgsl, matmul/tiles_i8.wgsl): where a workgroup's
// tile lies, which weight row a tile row reads, and the stores of a thread's 4 tokens x RR rows of sums
// (RR = 8: quads r and r + BR / 2 of the tile's columns; with GLU, gate sums in the first and up sums in
// the second). Needs BT, BR, RR and SPLIT from the including entry.

const COLS: u32 = BR / (1u + GLU);  // y columns per tile
const TOKEN_TILES: u32 = (T_MAX + BT - 1u) / BT;
const ROW_TILES: u32 = (N_ROWS + COLS - 1u) / COLS;

// Workgroup `id`'s split part, first y column and first token: the id runs over the token tiles first,
// so that neighbouring workgroups share weight rows, then the row tiles, then the parts.
struct TilePlace {
    part: u32,
    r0: u32,
    t0: u32,
}

fn tile_place(id: u32) -> TilePlace {
    let tile = id % (ROW_TILES * TOKEN_TILES);
    return TilePlace(id / (ROW_TILES * TOKEN_TILES), (tile / TOKEN_TILES) * COLS, (tile % TOKEN_TILES) * BT);
}

// Byte offset of the weight row that tile row rho (of the tile at column r0) reads; rows past the
// shard read its last row (their sums are not stored).
fn tile_row_byte(r0: u32, rho: u32) -> u32 {
    let up = GLU == 1u && rho >= COLS;
    let col = min(r0 + rho - select(0u, COLS, up), N_ROWS - 1u);
    return row_byte(col + select(0u, N_ROWS, up));
}

// Store 4 columns from r of token t (t < n).
fn store4(t: u32, r: u32, n: u32, v: vec4<f32>) {
    store(t, r, n, v.x);
    store(t, r + 1u, n, v.y);
    store(t, r + 2u, n, v.z);
    store(t, r + 3u, n, v.w);
}

// The raw sums of a split: y[s T_MAX + t, offset + c .. + 3] for columns c < N_ROWS (Y_STRIDE = the
// parts' width).
// Each element by a constant index, as store4 does: a loop indexing v at run time compiles to a loop choosing
// each element by predicated moves.
fn store_part(s: u32, t: u32, c: u32, offset: u32, n: u32, v: vec4<f32>) {
    if (t < n) {
        let at = (s * T_MAX + t) * Y_STRIDE + offset + c;
        if (c < N_ROWS) {
            y[at] = v.x;
        }
        if (c + 1u < N_ROWS) {
            y[at + 1u] = v.y;
        }
        if (c + 2u < N_ROWS) {
            y[at + 2u] = v.z;
        }
        if (c + 3u < N_ROWS) {
            y[at + 3u] = v.w;
        }
    }
}

// The epilogue: the sums a<i> (token t + i, columns r .. r + 3) and b<i> (RR = 8: columns r + BR / 2
// .. + 3, or with GLU the up sums of columns r .. r + 3) of split part s: raw sums into the parts
// scratch where SPLIT > 1 (kernels/matmul_reduce.wgsl adds them), else the finished values.
fn store_tile(s: u32, t: u32, r: u32, n: u32, a0: vec4<f32>, a1: vec4<f32>, a2: vec4<f32>, a3: vec4<f32>,
              b0: vec4<f32>, b1: vec4<f32>, b2: vec4<f32>, b3: vec4<f32>) {
    if (SPLIT > 1u) {
        // raw sums; with GLU the up sums N_ROWS columns further
        store_part(s, t, r, 0u, n, a0);
        store_part(s, t + 1u, r, 0u, n, a1);
        store_part(s, t + 2u, r, 0u, n, a2);
        store_part(s, t + 3u, r, 0u, n, a3);
        if (RR == 8u) {
            let cb = select(r + BR / 2u, r, GLU == 1u);
            let offset = select(0u, N_ROWS, GLU == 1u);
            store_part(s, t, cb, offset, n, b0);
            store_part(s, t + 1u, cb, offset, n, b1);
            store_part(s, t + 2u, cb, offset, n, b2);
            store_part(s, t + 3u, cb, offset, n, b3);
        }
    } else if (GLU == 1u) {
        store4(t, r, n, glu4(a0, b0));
        store4(t + 1u, r, n, glu4(a1, b1));
        store4(t + 2u, r, n, glu4(a2, b2));
        store4(t + 3u, r, n, glu4(a3, b3));
    } else {
        store4(t, r, n, a0);
        store4(t + 1u, r, n, a1);
        store4(t + 2u, r, n, a2);
        store4(t + 3u, r, n, a3);
        if (RR == 8u) {
            store4(t, r + BR / 2u, n, b0);
            store4(t + 1u, r + BR / 2u, n, b1);
            store4(t + 2u, r + BR / 2u, n, b2);
            store4(t + 3u, r + BR / 2u, n, b3);
        }
    }
}
