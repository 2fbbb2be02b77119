// A step's rows of one sequence and its conv state, shared by the causal short convolution's kernels.
//
// Rows of one sequence in a step are consecutive, at consecutive positions (a prompt chunk; decode rows are one per
// sequence), so a row finds its sequence's earlier rows of the step by walking back the row table. The input
// `back` positions before row t's is then (position p = rows[t].x, run = its sequence's rows before it, up to K - 1):
//   back > p:     before the sequence's start: zero (the state is not read, so a slot's old state never leaks)
//   back <= run:  row t - back of this step
//   otherwise:    the slot's conv state, which holds the K - 1 inputs before the step's first row of the sequence,
//                 oldest first: index K - 1 + run - back
// The including kernel declares `step`, `rows: array<vec4<u32>>`, `bcx`, `state`, and the overrides C, K, STRIDE,
// GATED, B_COL, X_COL.

// The convolution's input of row t, channel c: B * x where GATED (LFM2), else x.
fn gated_input(t: u32, c: u32) -> f32 {
    let base = t * STRIDE;
    if (GATED) {
        return bcx[base + B_COL + c] * bcx[base + X_COL + c];
    }
    return bcx[base + X_COL + c];
}

// How many rows right before row t (at most K - 1) belong to its sequence.
fn run_before(t: u32) -> u32 {
    let row = rows[t];
    var run = 0u;
    loop {
        if (run >= K - 1u || run >= t) {
            break;
        }
        let earlier = rows[t - run - 1u];
        if (earlier.y != row.y || earlier.x + run + 1u != row.x) {
            break;
        }
        run += 1u;
    }
    return run;
}

// The gated input `back` positions before row t's, channel c (see above).
fn input_back(t: u32, c: u32, back: u32, run: u32) -> f32 {
    let row = rows[t];
    if (back > row.x) {
        return 0.0;
    }
    if (back <= run) {
        return gated_input(t - back, c);
    }
    return state[(row.y * (K - 1u) + K - 1u + run - back) * C + c];
}
