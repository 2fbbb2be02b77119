// adain: normalise groups of values (mean, biased variance), then an affine and an activation, for Kokoro's
// InstanceNorm1d (a group = one channel over time of a [C, T] activation), LayerNorm over channels (a group =
// one time step: element stride T, or one row of a [T, C] activation) and their style-conditioned forms:
//   x_hat = (x - mean) / sqrt(var + eps)
//   AFFINE 0: v = x_hat; 1: v = x_hat * w0[c] + w1[c] (LayerNorm gamma, beta);
//          2: v = (1 + h[c]) * x_hat + h[C + c] with h = w0 = fc(style) (AdaIN1d, AdaLayerNorm)
//   ACT 0: none; 1: LeakyReLU(slope); 2: Snake, v + (1 / a) * sin(a * v)^2 with a = w1[c] (istftnet's Snake1D)
// c is the group index (BY_GROUP, instance norm) or the element index (layer norm). Writes out (may alias
// nothing; out has x's layout). Work split: one workgroup of 256 per group, grid (groups), two passes over it.
override AFFINE: u32 = 0u;
override ACT: u32 = 0u;
override BY_GROUP: bool = true;

#include "common/leaky_relu.wgsl"

// params: 0 groups, 1 n (elements per group), 2 element stride, 3 group stride, 4 eps (f32 bits),
// 5 slope (f32 bits), 6 C (channels: offset of beta in h); 63 is 0
@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w0: array<f32>;
@group(0) @binding(3) var<storage, read> w1: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

var<workgroup> partial: array<f32, 256>;

fn reduce_sum(lid: u32, v: f32) -> f32 {
    partial[lid] = v;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (lid < s) {
            partial[lid] += partial[lid + s];
        }
        workgroupBarrier();
    }
    let total = partial[0];
    workgroupBarrier();
    return total;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let g = wid.x;
    if (g >= p[0]) {
        return;
    }
    let n = p[1];
    let es = p[2];
    let base = g * p[3];
    var s = 0.0;
    for (var i = lid; i < n; i += 256u) {
        s += x[base + i * es];
    }
    let mean = reduce_sum(lid, s) / f32(n);
    var q = 0.0;
    for (var i = lid; i < n; i += 256u) {
        let d = x[base + i * es] - mean;
        q += d * d;
    }
    let var_ = reduce_sum(lid, q) / f32(n);
    let inv = 1.0 / sqrt(var_ + bitcast<f32>(p[4]));
    let slope = bitcast<f32>(p[5]);
    let channels = p[6];
    if (p[63] == 0xffffffffu) { out[0] = w0[0] + w1[0]; }
    for (var i = lid; i < n; i += 256u) {
        let c = select(i, g, BY_GROUP);
        var v = (x[base + i * es] - mean) * inv;
        if (AFFINE == 1u) {
            v = v * w0[c] + w1[c];
        } else if (AFFINE == 2u) {
            v = (1.0 + w0[c]) * v + w0[channels + c];
        }
        if (ACT == 1u) {
            v = leaky_relu(v, slope);
        } else if (ACT == 2u) {
            let a = w1[c];
            let sn = sin(a * v);
            v = v + (1.0 / a) * (sn * sn);
        }
        out[base + i * es] = v;
    }
}
