// matvec input whose rms norm is applied to the row sums (X_SOURCE = "prenormed"). The matvec that added the
// block's output to the residual r wrote x = r * w_next and, per workgroup of its rows, the sums of r^2
// (matvec/store_residual.wgsl); here the prologue adds each token's PARTS sums, and each row sum is scaled by
// 1 / rms(r[t]) as it is stored (row_total): W (r / rms(r) * w_next) = (W x) / rms(r). So the residual norm
// between two matvecs takes no dispatch of its own, and each workgroup reads PARTS values a token where
// matvec/x_normed.wgsl reads four rows of K (which cost more than a dispatch on wide models).

#include "matvec/x_binding_direct.wgsl"

@group(0) @binding(4) var<storage, read> square_sums: array<f32>;  // [T_MAX, PARTS]: sums of r^2 by row groups

override PARTS: u32 = 1u;   // the residual's row groups (store_residual's workgroups)
override EPS: f32 = 1e-6;

var<workgroup> inv_rms: array<f32, T_MAX>;  // 1 / sqrt(mean(r[t]^2) + EPS) of the step's tokens

// From uniform control flow, before any x_vec; ends with a barrier: inv_rms is ready to read.
fn prepare_x(tid: u32, workgroup: u32, lanes_of_8: bool) {
    for (var t = 0u; t < n_tokens(); t++) {
        var s = 0.0;
        for (var i = tid; i < PARTS; i += WG) {
            s += square_sums[t * PARTS + i];
        }
        let total = workgroup_sum(s);
        if (tid == 0u) {
            inv_rms[t] = inverseSqrt(total / f32(K) + EPS);
        }
    }
    workgroupBarrier();
}

fn x_vec(i: u32) -> vec4<f32> {
    return x[i];
}

// Token t's factor on its row sums (t < n_tokens: the sums of the rows past it are never stored).
fn x_scale(t: u32) -> f32 {
    return inv_rms[min(t, T_MAX - 1u)];
}
