// kokoro_linear: y[t, n] = act(sum_k x[t, k] * w[n, k] + bias[n]) (+ r[t, n]) for Kokoro's dynamic-length layers.
// x and y are addressed through strides (params), so the same kernel reads and writes row-major [T, C] or
// channel-major [C, T] activations, and y may be a column slice of wider rows. w: f32 [N, K] (PyTorch's Linear).
// Work split: one invocation per output (t, n), 64 invocations along n per workgroup; grid (ceil(N/64), T).
// The residual r is added after the activation and shares y's addressing.
#include "common/gelu_tanh.wgsl"

override ACT: u32 = 0u;          // 0: none, 1: tanh GELU (ALBERT's gelu_new)
override RESIDUAL: bool = false; // add r[y index]

// params (u32 words): 0 T rows, 1 K inputs, 2 N outputs, 3 x stride per t, 4 x stride per k,
// 5 y stride per t, 6 y stride per n, 7 y offset (elements); word 63 is always 0 (keeps bindings alive)
@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read> r: array<f32>;
@group(0) @binding(5) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = wid.y;
    let n = wid.x * 64u + lid;
    let k_count = p[1];
    if (p[63] == 0xffffffffu) { y[0] = r[0]; }
    if (t >= p[0] || n >= p[2]) {
        return;
    }
    let xs_t = p[3];
    let xs_k = p[4];
    var acc = 0.0;
    for (var k = 0u; k < k_count; k++) {
        acc += x[t * xs_t + k * xs_k] * w[n * k_count + k];
    }
    var v = acc + bias[n];
    if (ACT == 1u) {
        v = gelu_tanh(v);
    }
    let o = p[7] + t * p[5] + n * p[6];
    if (RESIDUAL) {
        v += r[o];
    }
    y[o] = v;
}
