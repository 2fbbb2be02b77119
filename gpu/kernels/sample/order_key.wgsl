// Order keys: f32 bit patterns mapped to u32 so that unsigned comparison orders them as floats
// (-inf < ... < -0 = +0 < ... < +inf), with NaN mapped to the key of -inf. The sampling kernels
// read logits as u32 words and compare keys with integer ops only, because WGSL lets compilers
// assume that floats are finite: a NaN or infinity seen through float ops is indeterminate.
// Key 0 lies below every key of a float (it is the key of no f32) and marks empty slots.

const NEG_INF_KEY: u32 = 0x007FFFFFu;  // order_key(-inf bits), also the key of NaN
const POS_INF_KEY: u32 = 0xFF800000u;  // order_key(+inf bits)
const EMPTY_KEY: u32 = 0u;             // below every float

fn order_key(bits: u32) -> u32 {
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {
        return NEG_INF_KEY;  // NaN counts as -inf
    }
    if (bits == 0x80000000u) {
        return 0x80000000u;  // -0 ties with +0 (the lower index wins, as numpy.argmax)
    }
    if ((bits & 0x80000000u) != 0u) {
        return ~bits;  // negative: larger magnitude, smaller key
    }
    return bits | 0x80000000u;
}

// The f32 bits of a key (the inverse of order_key for non-NaN floats).
fn key_bits(key: u32) -> u32 {
    if ((key & 0x80000000u) != 0u) {
        return key & 0x7FFFFFFFu;
    }
    return ~key;
}

// True for the key of a finite float (neither +-inf nor NaN nor an empty slot).
fn key_is_finite(key: u32) -> bool {
    return key > NEG_INF_KEY && key < POS_INF_KEY;
}

// The better of two (key, index) pairs: the larger key, and on equal keys the lower index.
fn better_pair(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    if (b.x > a.x || (b.x == a.x && b.y < a.y)) {
        return b;
    }
    return a;
}
