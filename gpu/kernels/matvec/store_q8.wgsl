// The matvec kernels' last step, quantised (STORE = "q8"): the rows' values (with GLU, gelu_tanh(gate) * up)
// quantised per 32 columns as kernels/quantize_q8.wgsl does (common/q8_block.wgsl), for an int8 matvec to read
// (matvec/x_q8_buffer.wgsl) without a quantize_q8 dispatch: a Gemma gate-up writes its output so for the down
// projection. Row t of y is Y_STRIDE / 4 words of q (four int8 a word), then Y_STRIDE / 32 pairs (d, exact sum)
// as f32 bits. A workgroup's rows must be whole 32-column blocks: ROWS, ROW_START, N_ROWS and Y_STRIDE multiples
// of 32 (Y_STRIDE of 64), which the host checks. Needs the kernel's N_ROWS, ROWS, T_MAX, OUTS, GLU, Y_STRIDE,
// ROW_START and n_tokens.
#include "common/q8_block.wgsl"
#include "matvec/partials.wgsl"

@group(0) @binding(3) var<storage, read_write> y: array<u32>;   // [T_MAX, Y_STRIDE * 5 / 16]

const Y_ROW_WORDS: u32 = Y_STRIDE * 5u / 16u;

var<workgroup> row_values: array<f32, T_MAX * ROWS>;  // [token, slot]
var<workgroup> row_stats: array<vec2<f32>, T_MAX * ROWS / 4u>;  // quad_stats of each 4 slots

// Row first_row + slot's sums, from the thread tid's (matvec/partials.wgsl row_total).
fn store_row(first_row: u32, slot: u32, tid: u32, stride: u32) {
    if (first_row + slot >= N_ROWS) {
        return;
    }
    for (var t = 0u; t < n_tokens(); t++) {
        var v = row_total(t, tid, stride);
        if (GLU == 1u) {
            v = glu(v, row_total(T_MAX + t, tid, stride));
        }
        row_values[t * ROWS + slot] = v;
    }
}

// Called by the entry point from uniform control flow after every store_row: the rows' quads, 8 a block,
// quantised by as many invocations (common/q8_block.wgsl's two phases).
fn finish_rows(first_row: u32, tid: u32) {
    workgroupBarrier();
    let quads = T_MAX * ROWS / 4u;
    for (var i = tid; i < quads; i += WG) {
        let at = 4u * i;
        row_stats[i] = quad_stats(vec4<f32>(row_values[at], row_values[at + 1u], row_values[at + 2u],
                                            row_values[at + 3u]));
    }
    workgroupBarrier();
    for (var i = tid; i < quads; i += WG) {
        let t = 4u * i / ROWS;
        let slot = 4u * i - t * ROWS;  // the quad's first slot
        if (t >= n_tokens() || first_row + slot >= N_ROWS) {
            continue;
        }
        let first = i & ~7u;  // the block's first quad
        var amax = 0.0;
        var sum = 0.0;
        for (var j = 0u; j < 8u; j++) {
            let s = row_stats[first + j];
            amax = max(amax, s.x);
            sum += s.y;
        }
        let scale = q8_quad_scale(amax, sum);
        let at = 4u * i;
        let column = ROW_START + first_row + slot;
        y[t * Y_ROW_WORDS + column / 4u] = q8_quad_word(vec4<f32>(row_values[at], row_values[at + 1u],
                                                                  row_values[at + 2u], row_values[at + 3u]), scale.x);
        if ((i & 7u) == 0u) {
            let scale_at = t * Y_ROW_WORDS + Y_STRIDE / 4u + column / 16u;  // pair column / 32
            y[scale_at] = bitcast<u32>(scale.x);
            y[scale_at + 1u] = bitcast<u32>(scale.y);
        }
    }
}
