// sigmoid_row_sum: dur[t] = sum_j sigmoid(x[t, j]) / speed over the n values of each of T rows (a duration
// predictor's frames per token before rounding, which the host does).
// Work split: one invocation per row, 64 per workgroup.

// params: 0 T, 1 n (max_dur bins), 2 speed (f32 bits); 63 is 0
@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> dur: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let t = gid.x;
    if (t >= p[0]) {
        return;
    }
    let n = p[1];
    var s = 0.0;
    for (var j = 0u; j < n; j++) {
        s += 1.0 / (1.0 + exp(-x[t * n + j]));
    }
    dur[t] = s / bitcast<f32>(p[2]);
}
