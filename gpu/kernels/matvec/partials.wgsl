// The matvec entry points' (matvec/reduce_subgroup.wgsl, matvec/reduce_workgroup.wgsl) meeting place for a row's
// sums: each lane's OUTS sums go to workgroup memory, written by literal indices (matvec/constants.wgsl says why),
// and the row's totals are read from there by matvec/store_${STORE}.wgsl (row_total), by index.

var<workgroup> partial: array<f32, WG * OUTS>;  // [OUTS, WG]: a thread's (or a subgroup segment's) sums

fn keep_partial(acc: array<f32, OUTS>, t: u32, tid: u32) {
    if (t < OUTS) {
        partial[t * WG + tid] = acc[t];
    }
}

// partial[t WG + tid] = acc[t] for each t < OUTS (at most 16: 8 tokens, two rows).
fn keep_partials(acc: array<f32, OUTS>, tid: u32) {
    keep_partial(acc, 0u, tid);
    keep_partial(acc, 1u, tid);
    keep_partial(acc, 2u, tid);
    keep_partial(acc, 3u, tid);
    keep_partial(acc, 4u, tid);
    keep_partial(acc, 5u, tid);
    keep_partial(acc, 6u, tid);
    keep_partial(acc, 7u, tid);
    keep_partial(acc, 8u, tid);
    keep_partial(acc, 9u, tid);
    keep_partial(acc, 10u, tid);
    keep_partial(acc, 11u, tid);
    keep_partial(acc, 12u, tid);
    keep_partial(acc, 13u, tid);
    keep_partial(acc, 14u, tid);
    keep_partial(acc, 15u, tid);
}

// Sum t (< OUTS) of the row whose lane 0 is thread tid, its sums kept by lanes 0, stride, ... < TPR (lane j at
// thread tid + j INTERLEAVE: constants.wgsl thread_slot), times its token's factor from the input
// (matvec/x_${X_SOURCE}.wgsl x_scale: 1, or the rms norm of a prenormed input).
fn row_total(t: u32, tid: u32, stride: u32) -> f32 {
    var total = 0.0;
    for (var i = 0u; i < TPR; i += stride) {
        total += partial[t * WG + tid + i * INTERLEAVE];
    }
    return total * x_scale(t % T_MAX);
}
