// The epilogue of the fused gate-up linears (matvec.wgsl, matmul.wgsl with GLU = 1) and of glu_mul.wgsl:
// act(g) * u, act by GLU_ACT: 0 gelu_tanh (Gemma's GeGLU, common/gelu_tanh.wgsl), 1 silu (SwiGLU: Llama, Qwen,
// Mistral, Phi). One definition, so every kernel computes the same bits for a row.

#include "common/gelu_tanh.wgsl"

override GLU_ACT: u32 = 0u;

// silu(v) = v / (1 + exp(-v)), PyTorch's F.silu; exp(-v) overflows to inf for v < -88, giving the limit 0.
fn silu(v: f32) -> f32 {
    return v / (1.0 + exp(-v));
}

fn glu(g: f32, u: f32) -> f32 {
    if (GLU_ACT == 1u) {
        return silu(g) * u;
    }
    return gelu_tanh(g) * u;
}

fn glu4(g: vec4<f32>, u: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(glu(g.x, u.x), glu(g.y, u.y), glu(g.z, u.z), glu(g.w, u.w));
}
