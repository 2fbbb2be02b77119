// How attention.wgsl divides a row's keys over its SPLITS workgroups, shared with attention_combine.wgsl
// so that both count the parts alike. A part is a whole number of 32-key chunks (attention's KEYS) and
// the parts are as few as SPLITS allows: a short row (decode near the start of a sequence) uses one or
// a few parts, the rest return at once, and the combine merges only the parts used. Needs SPLITS and
// WINDOW (overrides of the including kernel).

const PART_CHUNK: u32 = 32u;

// The row's first visible key for a token at position p: 0, or on sliding-window layers the oldest key
// still in the window (a key j is visible while p - j < WINDOW).
fn first_key(p: u32) -> u32 {
    if (WINDOW > 0u && p + 1u > WINDOW) {
        return p + 1u - WINDOW;
    }
    return 0u;
}

// Keys per part for a row of n keys: n / SPLITS rounded up to whole chunks.
fn part_keys(n: u32) -> u32 {
    let even = (n + SPLITS - 1u) / SPLITS;
    return (even + PART_CHUNK - 1u) / PART_CHUNK * PART_CHUNK;
}

// Parts holding at least one of the row's n keys (at most SPLITS).
fn parts_used(n: u32) -> u32 {
    let per = part_keys(n);
    return (n + per - 1u) / per;
}
