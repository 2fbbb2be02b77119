// pool: one embedding per sequence from its token rows, as sentence-transformers' Pooling does:
//   MODE 0 mean   out[b] = sum_t h[t] / n          MODE 1 cls    out[b] = h[first]
//   MODE 2 last   out[b] = h[last]                 MODE 3 max    out[b] = max_t h[t] (per value)
//   MODE 4 mean_sqrt_len   out[b] = sum_t h[t] / sqrt(n)
// over the rows [seqs[b].x, seqs[b].y) of the packed batch (n rows); a sequence slot with no rows
// (past the step's last sequence) gets zeros, so the layers after pooling see finite values.
// Work split: one workgroup of 64 invocations per sequence slot, each taking a strided slice of
// the D values and walking the sequence's rows in order (the same order of additions as a loop).
#include "common/step.wgsl"

override D: u32 = 384u;       // values per row
override B_MAX: u32 = 1u;     // sequence slots (rows of seqs and out)
override MODE: u32 = 0u;      // see above

const WG: u32 = 64u;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> h: array<f32>;            // [T_MAX, D] token rows
@group(0) @binding(2) var<storage, read> seqs: array<vec2<u32>>;   // [B_MAX] (first row, end row)
@group(0) @binding(3) var<storage, read_write> out: array<f32>;    // [B_MAX, D]

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let b = wid.x + wid.y * nwg.x;
    if (b >= B_MAX) {
        return;
    }
    let s = seqs[b];
    let rows = min(s.y, step.n_tokens);
    for (var i = lid; i < D; i += WG) {
        var r = 0.0;
        if (s.x < rows) {
            if (MODE == 1u) {
                r = h[s.x * D + i];
            } else if (MODE == 2u) {
                r = h[(rows - 1u) * D + i];
            } else if (MODE == 3u) {
                r = h[s.x * D + i];
                for (var t = s.x + 1u; t < rows; t++) { r = max(r, h[t * D + i]); }
            } else {
                for (var t = s.x; t < rows; t++) { r += h[t * D + i]; }
                let n = f32(rows - s.x);
                r /= select(n, sqrt(n), MODE == 4u);
            }
        }
        out[b * D + i] = r;
    }
}
