// Random numbers for sampling: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as
// 1, 2, 3", SC 2011; the generator of cuRAND and PyTorch), a counter-based generator: 4 words
// from a 128-bit counter and a 64-bit key with no state, so any element's noise can be computed
// by any invocation. gumbel_noise turns a word into a standard Gumbel variate.
// WGSL has no 32x32->64 multiply: mul_hi builds the high word from 16-bit halves.

const PHILOX_M0: u32 = 0xD2511F53u;
const PHILOX_M1: u32 = 0xCD9E8D57u;
const PHILOX_W0: u32 = 0x9E3779B9u;  // key schedule increments (golden ratio, sqrt(3) - 1)
const PHILOX_W1: u32 = 0xBB67AE85u;

// The high 32 bits of the 64-bit product a * b.
fn mul_hi(a: u32, b: u32) -> u32 {
    let a0 = a & 0xFFFFu;
    let a1 = a >> 16u;
    let b0 = b & 0xFFFFu;
    let b1 = b >> 16u;
    let cross0 = a1 * b0;
    let cross1 = a0 * b1;
    let mid = ((a0 * b0) >> 16u) + (cross0 & 0xFFFFu) + (cross1 & 0xFFFFu);
    return a1 * b1 + (cross0 >> 16u) + (cross1 >> 16u) + (mid >> 16u);
}

fn philox4x32_10(counter: vec4<u32>, key: vec2<u32>) -> vec4<u32> {
    var c = counter;
    var k = key;
    for (var round = 0u; round < 10u; round++) {
        if (round > 0u) {
            k += vec2<u32>(PHILOX_W0, PHILOX_W1);
        }
        c = vec4<u32>(mul_hi(PHILOX_M1, c.z) ^ c.y ^ k.x, PHILOX_M1 * c.z,
                      mul_hi(PHILOX_M0, c.x) ^ c.w ^ k.y, PHILOX_M0 * c.x);
    }
    return c;
}

// -log(U) for U uniform on the 2^32 points (j + 1/2) / 2^32 and 1 - (j + 1/2) / 2^32, j < 2^31,
// with a relative error below 2e-6 everywhere (given Vulkan's precision of log). The top bit
// picks the half of (0, 1): below 1/2, U itself is formed with full relative precision and log is
// accurate to a few ulps; above, w = 1 - U is formed instead, since U = 1 - w would round away the
// small w that decide the largest Gumbel values (the winners). GPU log is only accurate to 2^-21
// absolute near 1, so -log(1 - w) is summed as a series while w < 1/4 (12 terms: truncation
// < 1e-8 relative).
fn exponential(h: u32) -> f32 {
    if (h >= 0x80000000u) {
        let u = (f32(~h) + 0.5) * 2.3283064365386963e-10;  // 2^-32
        return -log(u);
    }
    let w = (f32(h) + 0.5) * 2.3283064365386963e-10;
    if (w >= 0.25) {
        return -log(1.0 - w);  // >= 0.28, so log's absolute error is < 2e-6 of it
    }
    var p = LOG_SERIES[11];
    for (var n = 10i; n >= 0i; n--) {
        p = LOG_SERIES[n] + w * p;
    }
    return w * p;
}

// 1 / n for n = 1..12: -log(1 - w) = w (1 + w/2 + w^2/3 + ...)
const LOG_SERIES = array<f32, 12>(1.0, 1.0 / 2.0, 1.0 / 3.0, 1.0 / 4.0, 1.0 / 5.0, 1.0 / 6.0, 1.0 / 7.0, 1.0 / 8.0,
                                  1.0 / 9.0, 1.0 / 10.0, 1.0 / 11.0, 1.0 / 12.0);

// A standard Gumbel variate, -log(-log(U)), from one random word.
fn gumbel_noise(h: u32) -> f32 {
    return -log(exponential(h));
}
