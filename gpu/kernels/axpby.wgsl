// axpby: out[o_off + i] = (a * x[x_off + i] + b * y[y_off + i]) / div for i < n: residual sums,
// averages, and (b = 0) copies into a slice of a larger activation (channel concat).
// Work split: one invocation per element, 256 per workgroup, grid spread over x, y.

// params: 0 n, 1 a (f32 bits), 2 b (f32 bits), 3 div (f32 bits), 4 x offset, 5 y offset, 6 out offset; 63 is 0
@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> y: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * 256u + lid;
    if (i >= p[0]) {
        return;
    }
    let a = bitcast<f32>(p[1]);
    let b = bitcast<f32>(p[2]);
    out[p[6] + i] = (a * x[p[4] + i] + b * y[p[5] + i]) / bitcast<f32>(p[3]);
}
