// copy_rows: dst[pairs[r].y, DST_OFFSET + c] = src[pairs[r].x, SRC_OFFSET + c] for c < WIDTH and the first
// n rows of the pair table, n = the step's n_tokens (BY_OUT false: one pair per token row, e.g. storing each
// token's keys and values into its KV-cache row) or the step's n_out (BY_OUT: gathering the rows that reach
// the output head). Row indices are in rows of each tensor (strides SRC_STRIDE and DST_STRIDE values).
// Work split: one invocation per copied value, 256 per workgroup, over a 2-D grid of workgroups.
#include "common/step.wgsl"

override WIDTH: u32 = 384u;       // values copied per row
override SRC_STRIDE: u32 = 1152u; // values per src row
override SRC_OFFSET: u32 = 0u;    // first copied column of a src row
override DST_STRIDE: u32 = 384u;  // values per dst row
override DST_OFFSET: u32 = 0u;    // first written column of a dst row
override BY_OUT: bool = false;    // row count from step.n_out instead of step.n_tokens

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read> pairs: array<vec2<u32>>;  // [rows] (src row, dst row)
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * 256u + lid;
    let rows = select(step.n_tokens, step.n_out, BY_OUT);
    if (i >= rows * WIDTH) {
        return;
    }
    let r = i / WIDTH;
    let c = i % WIDTH;
    let p = pairs[r];
    dst[p.y * DST_STRIDE + DST_OFFSET + c] = src[p.x * SRC_STRIDE + SRC_OFFSET + c];
}
