// rope: rotary position embedding in place on the heads of rows of x, NeoX pairing (HF's rotate_half):
//   (x[t, h, i], x[t, h, i + D/2]) rotate by the angle of pair i at position positions[t].
// The (cos, sin) of every position and pair come from a host table, so the GPU's sin/cos accuracy never matters,
// a partial rotary embedding is pairs whose entries are (1, 0), and an interleaved (GPT-J) layout is the loader's
// permutation of the q/k weight rows (dims 2i, 2i + 1 to i, i + D/2), under which attention scores do not change.
// Work split: one invocation per (row, head, pair), 256 per workgroup, over a 2-D grid of workgroups.
#include "common/step.wgsl"

override D: u32 = 64u;       // head dimension (even)
override HEADS: u32 = 1u;    // heads rotated per row
override STRIDE: u32 = 64u;  // row width of x, in elements
override OFFSET: u32 = 0u;   // column of head 0's first element

const HALF: u32 = D / 2u;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;      // [T_MAX, STRIDE]
@group(0) @binding(2) var<storage, read> rope: array<vec2<f32>>;   // [n_positions, D/2] (cos, sin)
@group(0) @binding(3) var<storage, read> positions: array<u32>;    // [T_MAX] position of each row

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * 256u + lid;
    let pair = i % HALF;
    let head = (i / HALF) % HEADS;
    let row = i / (HALF * HEADS);
    if (row >= step.n_tokens) {
        return;
    }
    let base = row * STRIDE + OFFSET + head * D;
    let cs = rope[positions[row] * HALF + pair];
    let a = x[base + pair];
    let b = x[base + pair + HALF];
    x[base + pair] = a * cs.x - b * cs.y;
    x[base + pair + HALF] = b * cs.x + a * cs.y;
}
