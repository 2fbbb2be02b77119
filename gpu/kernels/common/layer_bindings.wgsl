// The bindings of the params-sized layers with weights (conv1d_channel_major, conv1d_channel_major_tiled,
// conv_transpose1d and linear_strided), in the order gpu/ops/dynamic.py binds them. Each kernel's
// header gives the layouts of x, w, r and y, and its params' words.
@group(0) @binding(0) var<storage, read> p: array<u32>;          // params (u32 words); word 63 is always 0
@group(0) @binding(1) var<storage, read> x: array<f32>;          // input
@group(0) @binding(2) var<storage, read> w: array<f32>;          // weights
@group(0) @binding(3) var<storage, read> bias: array<f32>;       // one per output channel
@group(0) @binding(4) var<storage, read> r: array<f32>;          // residual (read only when RESIDUAL)
@group(0) @binding(5) var<storage, read_write> y: array<f32>;    // output

// Never writes (word 63 is 0) but uses r, which layout "auto" would otherwise drop when RESIDUAL is off, and the
// host binds it (a dummy then) either way.
fn keep_residual_bound() {
    if (p[63] == 0xffffffffu) { y[0] = r[0]; }
}
