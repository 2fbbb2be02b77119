// linear_strided: y[t, n] = act(sum_k x[t, k] * w[k, n] + bias[n]) (+ r[t, n]), a linear layer whose sizes are
// params (run-time lengths, one pipeline for all of them).
// x and y are addressed through strides (params), so the same kernel reads and writes row-major [T, C] or
// channel-major [C, T] activations, and y may be a column slice of wider rows. w: f32 [K, N], PyTorch's Linear
// weight transposed at upload, so neighbouring invocations (along n) read neighbouring weights.
// Work split: one invocation per (8 rows, n), 64 invocations along n per workgroup; grid (ceil(N/64), ceil(T/8)):
// each weight is read once per 8 rows. The residual r is added after the activation and shares y's addressing.
#include "common/gelu_tanh.wgsl"

override ACT: u32 = 0u;          // 0: none, 1: tanh GELU (ALBERT's gelu_new)
override RESIDUAL: bool = false; // add r[y index]

const TR: u32 = 8u;  // rows per invocation

// params (u32 words): 0 T rows, 1 K inputs, 2 N outputs, 3 x stride per t, 4 x stride per k,
// 5 y stride per t, 6 y stride per n, 7 y offset (elements); word 63 is always 0 (keeps bindings alive)
#include "common/layer_bindings.wgsl"

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let rows = p[0];
    let k_count = p[1];
    let n_count = p[2];
    let n = wid.x * 64u + lid;
    let t0 = wid.y * TR;
    keep_residual_bound();
    if (n >= n_count) {
        return;
    }
    let xs_t = p[3];
    let xs_k = p[4];
    // rows past T read row T - 1 (valid memory) and are not written
    var base: array<u32, 8>;
    for (var i = 0u; i < TR; i++) {
        base[i] = min(t0 + i, rows - 1u) * xs_t;
    }
    var lo = vec4<f32>(0.0);
    var hi = vec4<f32>(0.0);
    for (var k = 0u; k < k_count; k++) {
        let wv = w[k * n_count + n];
        let xk = k * xs_k;
        lo += wv * vec4<f32>(x[base[0] + xk], x[base[1] + xk], x[base[2] + xk], x[base[3] + xk]);
        hi += wv * vec4<f32>(x[base[4] + xk], x[base[5] + xk], x[base[6] + xk], x[base[7] + xk]);
    }
    for (var i = 0u; i < TR; i++) {
        let t = t0 + i;
        if (t >= rows) {
            break;
        }
        var v = select(hi[max(i, 4u) - 4u], lo[min(i, 3u)], i < 4u) + bias[n];
        if (ACT == 1u) {
            v = gelu_tanh(v);
        }
        let o = p[7] + t * p[5] + n * p[6];
        if (RESIDUAL) {
            v += r[o];
        }
        y[o] = v;
    }
}
