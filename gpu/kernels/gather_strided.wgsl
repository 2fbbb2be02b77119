// gather_strided: out[f, c] = src[ids[f], c] for f < rows, c < C, written through strides and an offset, so it
// serves embedding lookups (ids = tokens), repeating rows by index (output channel-major [C, F]) and broadcasting
// one row into a column slice (ids all 0).
// Work split: one invocation per output value, 256 per workgroup, grid (ceil(rows * C / 256)) spread over x, y.

// params: 0 rows, 1 C, 2 out stride per row, 3 out stride per channel, 4 out offset, 5 src row stride; 63 is 0
@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read> src: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * 256u + lid;
    let channels = p[1];
    if (i >= p[0] * channels) {
        return;
    }
    let f = i / channels;
    let c = i % channels;
    out[p[4] + f * p[2] + c * p[3]] = src[ids[f] * p[5] + c];
}
