// sin_exact(x): sin of an f32 argument of any size as a correctly reducing libm computes it (a harmonic source's
// phases reach 1e6 rad, where a GPU's native sin is only specified on [-pi, pi]). x - n * 2pi is formed in
// double-f32 arithmetic (Dekker's exact product), then the native sin runs on the reduced argument.
const TWO_PI_HI: f32 = 6.2831855;          // f32(2 pi)
const TWO_PI_LO: f32 = -1.7484555e-7;      // 2 pi - TWO_PI_HI
const INV_TWO_PI: f32 = 0.15915494;

fn split_hi(a: f32) -> f32 {
    let c = a * 4097.0;
    return c - (c - a);
}

fn sin_exact(x: f32) -> f32 {
    let n = round(x * INV_TWO_PI);
    let p = n * TWO_PI_HI;
    let n_hi = split_hi(n);
    let n_lo = n - n_hi;
    let c_hi = split_hi(TWO_PI_HI);
    let c_lo = TWO_PI_HI - c_hi;
    let err = ((n_hi * c_hi - p) + n_hi * c_lo + n_lo * c_hi) + n_lo * c_lo;  // n * TWO_PI_HI - p, exactly
    let r = ((x - p) - err) - n * TWO_PI_LO;
    return sin(r);
}
