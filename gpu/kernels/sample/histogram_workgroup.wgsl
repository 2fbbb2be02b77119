// Histogram counting of radix_select.wgsl, portable variant: one atomic add per counted value.
// Values that share a bin contend for it; the subgroup variant adds them up first.

fn hist_add(digit: u32, hit: bool) {
    if (hit) {
        atomicAdd(&hist[digit], 1u);
    }
}
