// A matvec input normalised in the prologue (matvec/x_normed.wgsl, matvec/x_q8_normed.wgsl): Gemma's
// post-norm residual add and the next pre-norm (residual_norm.wgsl) folded into the matvec that consumes
// their output:
//   r[t] = residual[t] + block_out[t] / rms(block_out[t]) * w_post   (rms(v) = sqrt(mean(v^2) + EPS))
//   x[t] = r[t] / rms(r[t]) * w_next
// Every workgroup computes x for the step's tokens into workgroup memory (K is a model width: a few
// KiB a token), and workgroup 0 of the dispatch also writes r to residual_out, a buffer other than
// residual, since the other workgroups still read residual. Worth it because a decode step is a chain
// of small dependent dispatches, each costing a few microseconds of launch and drain whatever its
// size; this prologue reads 4 K floats per token from L2 and takes 2 reductions (workgroup_sum, which
// the entry point includes: common/workgroup_sum_subgroup.wgsl or its tree variant). Without POST_NORM (a
// plain residual add) r[t] = residual[t] + block_out[t] and w_post is not read.

@group(0) @binding(2) var<storage, read> block_out: array<vec4<f32>>;       // [T_MAX, K]
@group(0) @binding(4) var<storage, read> residual: array<vec4<f32>>;        // [T_MAX, K]
@group(0) @binding(5) var<storage, read> w_post: array<vec4<f32>>;          // [K]
@group(0) @binding(6) var<storage, read> w_next: array<vec4<f32>>;          // [K]
@group(0) @binding(7) var<storage, read_write> residual_out: array<vec4<f32>>;  // [T_MAX, K]

override EPS: f32 = 1e-6;
override POST_NORM: bool = true;

var<workgroup> xs: array<vec4<f32>, T_MAX * K / 4u>;

// From uniform control flow; tid: the invocation's index in the workgroup (any numbering), workgroup: its
// linear id. Ends with a barrier: xs is ready to read.
fn normalise_input(tid: u32, workgroup: u32) {
    let n = min(step.n_tokens, T_MAX);
    let quads = K / 4u;
    for (var t = 0u; t < n; t++) {
        let base = t * quads;
        var inv_y = 1.0;
        if (POST_NORM) {
            var sum_y = 0.0;
            for (var i = tid; i < quads; i += WG) {
                let v = block_out[base + i];
                sum_y += dot(v, v);
            }
            inv_y = inverseSqrt(workgroup_sum(sum_y) / f32(K) + EPS);
        }
        var sum_r = 0.0;
        for (var i = tid; i < quads; i += WG) {
            var r = residual[base + i] + block_out[base + i];
            if (POST_NORM) {
                r = residual[base + i] + block_out[base + i] * inv_y * w_post[i];
            }
            xs[base + i] = r;
            sum_r += dot(r, r);
            if (workgroup == 0u) {
                residual_out[base + i] = r;
            }
        }
        let inv_r = inverseSqrt(workgroup_sum(sum_r) / f32(K) + EPS);
        for (var i = tid; i < quads; i += WG) {  // each invocation rescales the entries it wrote
            xs[base + i] = xs[base + i] * inv_r * w_next[i];
        }
    }
    workgroupBarrier();
}
