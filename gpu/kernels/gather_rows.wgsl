// gather_rows: dst[r, :] = src[out_rows[r], :] for the step's output rows r < n_out (each sequence's last
// token), and dst[r, :] = src[r, :] for the rows after them up to dst's ROWS, so every dst row holds a valid
// row. Rows are WIDTH 32-bit words of any type (f32 activations, the u32 row table). Gemma 4's KV-shared
// layers write no cache, so after the first of them a prompt chunk needs only its output rows.
// Work split: one invocation per word of dst, 256 per workgroup.
#include "common/step.wgsl"

override WIDTH: u32 = 1536u;    // words per row
override ROWS: u32 = 1u;        // rows of dst

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> src: array<u32>;            // [T_MAX, WIDTH]
@group(0) @binding(2) var<storage, read> out_rows: array<u32>;       // [R_MAX] token rows of the outputs
@group(0) @binding(3) var<storage, read_write> dst: array<u32>;      // [ROWS, WIDTH]

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * 256u + lid;
    let r = i / WIDTH;
    if (r >= ROWS) {
        return;
    }
    var src_row = min(r, max(step.n_tokens, 1u) - 1u);
    if (r < step.n_out) {
        src_row = out_rows[r];
    }
    dst[i] = src[src_row * WIDTH + i % WIDTH];
}
