// Histogram counting of radix_select.wgsl, subgroup variant: the lanes of a subgroup that count
// the same bin add their counts first and one lane adds the total, so a subgroup makes one atomic
// add per distinct bin rather than one per value. The first radix digit of logits (sign and high
// exponent bits) takes only a handful of values, where one atomic per value would serialise.
// Called from control flow uniform over the subgroup; the loop runs once per distinct bin.

fn hist_add(digit: u32, hit: bool) {
    var pending = hit;
    loop {
        let bin = subgroupMin(select(0xFFFFFFFFu, digit, pending));
        if (bin == 0xFFFFFFFFu) {
            break;
        }
        let mine = pending && digit == bin;
        let lanes = subgroupBallot(mine);
        let writer = subgroupMin(select(0xFFFFFFFFu, red_lane, mine));
        if (red_lane == writer) {
            let n = countOneBits(lanes.x) + countOneBits(lanes.y) + countOneBits(lanes.z) + countOneBits(lanes.w);
            atomicAdd(&hist[bin], n);
        }
        pending = pending && !mine;
    }
}
