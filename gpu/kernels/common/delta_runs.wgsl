// What the gated delta rule's kernels (gated_delta_rule, gated_delta_chunk, gated_delta_scan) share: how a step's
// rows form runs, and the decay and update-rate gates. The including kernel declares `rows: array<vec4<u32>>`.

const QK_EPS: f32 = 1e-6;           // added to the sum of squares (FLA's and transformers' l2norm)
const SOFTPLUS_LINEAR: f32 = 20.0;  // torch's softplus threshold: softplus(x) = x above it

fn softplus(x: f32) -> f32 {
    return select(log(1.0 + exp(x)), x, x > SOFTPLUS_LINEAR);
}

// Whether row t continues the sequence of row t - 1 in the step (the same slot, the next position).
fn continues(t: u32) -> bool {
    return t > 0u && rows[t - 1u].y == rows[t].y && rows[t - 1u].x + 1u == rows[t].x;
}
