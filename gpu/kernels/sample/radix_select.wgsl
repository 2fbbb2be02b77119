// Radix select: the threshold above which lie exactly the k best of a workgroup's candidates.
// A candidate is a 64-bit composite (key, tie): key = order_key of its value, tie = ~index, so
// larger composites are larger values and, among equal values, lower indices; all composites of
// distinct indices differ, which makes "the k best" exact under ties.
// Rounds take 8-bit digits of the composite from the top: each round counts, in a 256-bin
// histogram, the digit of every candidate that matches the digits chosen so far, then picks the
// bin where the running count from the top reaches the number still to choose. It stops as soon
// as the whole picked bin is needed (usually within the 4 key rounds; the tie rounds only resolve
// equal values), so at most 8 rounds. Each round re-reads the candidates (they stay in cache).
// The including kernel has `const WG: u32 = 256u` (one bin per invocation), includes
// reduce_${REDUCE}.wgsl and defines `fn cand_key(n: u32) -> u32` and `fn cand_tie(n: u32) -> u32`
// for its candidates n < count. Call from control flow uniform over the workgroup.
#include "sample/histogram_${REDUCE}.wgsl"

const RADIX_BINS: u32 = 256u;

var<workgroup> hist: array<atomic<u32>, RADIX_BINS>;
var<workgroup> sel_state: vec4<u32>;      // (prefix key, prefix tie, still to choose, done)
var<workgroup> sel_count: atomic<u32>;    // slots taken by select_compact's caller

// Candidates whose top `bits` bits (key then tie) are >= prefix's are selected.
struct Threshold {
    prefix: vec2<u32>,
    bits: u32,
}

fn top_mask(bits: u32) -> vec2<u32> {
    var m = vec2<u32>(0u, 0u);
    if (bits >= 32u) {
        m.x = 0xFFFFFFFFu;
    } else if (bits > 0u) {
        m.x = 0xFFFFFFFFu << (32u - bits);
    }
    if (bits >= 64u) {
        m.y = 0xFFFFFFFFu;
    } else if (bits > 32u) {
        m.y = 0xFFFFFFFFu << (64u - bits);
    }
    return m;
}

// The composite's top `bits` bits, the tie read only where the key alone does not decide.
fn cand_top(n: u32, bits: u32) -> vec2<u32> {
    let mask = top_mask(bits);
    var c = vec2<u32>(cand_key(n) & mask.x, 0u);
    if (bits > 32u) {
        c.y = cand_tie(n) & mask.y;
    }
    return c;
}

fn is_selected(n: u32, t: Threshold) -> bool {
    let key = cand_key(n) & top_mask(t.bits).x;
    if (key != t.prefix.x) {
        return key > t.prefix.x;
    }
    return t.bits <= 32u || (cand_tie(n) & top_mask(t.bits).y) >= t.prefix.y;
}

// The threshold of the k best of candidates 0..count-1 (all of them when count <= k).
fn select_threshold(count: u32, k: u32, lid: u32) -> Threshold {
    if (count <= k) {
        return Threshold(vec2<u32>(0u, 0u), 0u);
    }
    if (lid == 0u) {
        sel_state = vec4<u32>(0u, 0u, k, 0u);
    }
    for (var round = 0u; round < 8u; round++) {
        atomicStore(&hist[lid], 0u);
        let state = workgroupUniformLoad(&sel_state);  // also orders the clearing before the counts
        let fixed = 8u * round;                        // bits already chosen
        let shift = 24u - 8u * (round % 4u);
        for (var base = 0u; base < count; base += WG) {
            let n = base + lid;
            var hit = false;
            var digit = 0u;
            if (n < count) {
                let c = cand_top(n, fixed + 8u);
                hit = all((c & top_mask(fixed)) == state.xy);
                digit = (select(c.x, c.y, round >= 4u) >> shift) & 0xFFu;
            }
            hist_add(digit, hit);
        }
        workgroupBarrier();
        // Invocation at scan place p looks at bin 255 - p: above = candidates in higher bins.
        let bin = RADIX_BINS - 1u - scan_pos;
        let in_bin = atomicLoad(&hist[bin]);
        let through = inclusive_scan(in_bin);
        let above = through - in_bin;
        if (in_bin > 0u && above < state.z && through >= state.z) {
            let rest = state.z - above;
            var prefix = state.xy;
            if (round < 4u) {
                prefix.x |= bin << shift;
            } else {
                prefix.y |= bin << shift;
            }
            sel_state = vec4<u32>(prefix, rest, select(0u, 1u, in_bin == rest));
        }
        let chosen = workgroupUniformLoad(&sel_state);
        if (chosen.w != 0u) {
            return Threshold(chosen.xy, fixed + 8u);
        }
    }
    // Only candidates with equal composites (repeated indices) get here: take all that tie.
    return Threshold(workgroupUniformLoad(&sel_state).xy, 64u);
}
