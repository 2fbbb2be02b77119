// kv_store: append the step's keys and values to a layer's cache at rows step.pos + t.
// The cache holds f32 words, or two f16 values per u32 word (pack2x16float) when KV_F16.
// Work split: one invocation per cache word of the step's rows, 256 per workgroup.
#include "common/step.wgsl"

override WIDTH: u32 = 256u;     // kv_heads * head_dim values per token (even)
override KV_F16: bool = true;

@group(0) @binding(0) var<uniform> step: Step;
@group(0) @binding(1) var<storage, read> k: array<f32>;              // [T_MAX, WIDTH]
@group(0) @binding(2) var<storage, read> v: array<f32>;              // [T_MAX, WIDTH]
@group(0) @binding(3) var<storage, read_write> k_cache: array<u32>;  // [n_ctx, WIDTH] words
@group(0) @binding(4) var<storage, read_write> v_cache: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * 256u + lid;
    if (KV_F16) {
        let words = WIDTH / 2u;
        if (i >= step.n_tokens * words) { return; }
        let dst = step.pos * words + i;
        k_cache[dst] = pack2x16float(vec2<f32>(k[2u * i], k[2u * i + 1u]));
        v_cache[dst] = pack2x16float(vec2<f32>(v[2u * i], v[2u * i + 1u]));
    } else {
        if (i >= step.n_tokens * WIDTH) { return; }
        let dst = step.pos * WIDTH + i;
        k_cache[dst] = bitcast<u32>(k[i]);
        v_cache[dst] = bitcast<u32>(v[i]);
    }
}
