// How a split row's keys are cut into parts: shared by attention.wgsl, which walks a part, and
// attention_combine.wgsl, which reads only the parts that can hold keys. The including kernel declares
// WINDOW, SPLITS and MIN_PART_KEYS.
// The token at position p sees keys [lo, hi] (lo = p + 1 - WINDOW on sliding-window layers once p has
// passed the window; hi = p, or the last row of its image: common/rows.wgsl's later keys). They go to `parts` parts of per_part keys each (the last may be shorter): at
// least MIN_PART_KEYS keys a part, so a short row uses fewer parts than SPLITS; parts past `parts`
// are empty.

struct KeyParts {
    lo: u32,
    parts: u32,
    per_part: u32,
}

fn key_parts(p: u32, hi: u32) -> KeyParts {
    var lo = 0u;
    if (WINDOW > 0u && p + 1u > WINDOW) {
        lo = p + 1u - WINDOW;
    }
    let n_keys = hi + 1u - lo;
    let parts = min(SPLITS, (n_keys + MIN_PART_KEYS - 1u) / MIN_PART_KEYS);
    return KeyParts(lo, parts, (n_keys + parts - 1u) / parts);
}
