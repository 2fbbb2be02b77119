// matvec_q8_0_rows: y[t, ROW_START + r] = sum_k W[r, k] * x[t, k] for a Q8_0 weight shard, on
// software adapters (lavapipe); the same result as kernels/matvec.wgsl, read differently.
//
// lavapipe runs a workgroup as a loop over 8-lane SIMD slices and compiles every buffer load with
// lane-varying addresses into a per-lane loop of scalar loads, so the number of loads bounds it.
// Two things cut them: (1) a thread computes 4 whole rows (rows first + j WG, j < 4), so each x
// value loaded serves 4 rows and no reduction is needed; (2) the weight is bound as vec4 words and
// read two blocks at a time: a pair of Q8_0 blocks is 68 bytes = 17 words at a 4-byte aligned
// offset (K is a multiple of 64, so every row and pair starts at a word), which five aligned vec4
// loads cover whatever the word's place in its vec4; selects pick the 17 words out of the 20.
// Measured on lavapipe, 640 x 32768: 2-3x faster than matvec.wgsl's split rows. A pair's words are read
// once for all of a step's tokens: read again for each, 8 tokens cost 12x one token's time. (Steps of several
// tokens take the whole-row matmul by default: software_matvec_max_tokens in gpu/ops/matmul_tuning.py.)
// GLU = 1 (the fused gate-up linear, as in matvec.wgsl): the thread also computes its 4 rows' up
// rows N_ROWS + r and stores gelu_tanh(gate) * up.
//
// Block pair layout (words W0..W16): W0 low half d0, bytes 2..33 q of block 0 (W0 high half ..
// W8 low half), W8 high half d1, W9..W16 q of block 1. value = d * q (int8).
#include "matvec/four_rows.wgsl"

const ROW_WORDS: u32 = K / 64u * 17u;  // u32 words of a row (K a multiple of 64)

// 64 values of x (one block pair's worth) for one token.
struct X64 {
    v: array<vec4<f32>, 16>,
}

// The four int8 of w as f32 (sign bits flipped to bias them unsigned; see quant/bytes.wgsl).
fn i8x4(w: u32) -> vec4<f32> {
    let b = (vec4<u32>(w ^ 0x80808080u) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xFFu);
    return bitcast<vec4<f32>>(b | vec4<u32>(0x4B000000u)) - vec4<f32>(8388736.0);
}

// Words o .. o + 3 of the eight words a, b (o < 4, may differ per lane).
fn pick(a: vec4<u32>, b: vec4<u32>, o: u32) -> vec4<u32> {
    let hi = select(vec4<u32>(a.w, b.xyz), vec4<u32>(a.zw, b.xy), o == 2u);
    return select(select(hi, vec4<u32>(a.yzw, b.x), o == 1u), a, o == 0u);
}

// Bytes 2 .. 17 of the eight words a, b: the q of a block whose d is a's low half.
fn after_half(a: vec4<u32>, b: vec4<u32>) -> vec4<u32> {
    return (a >> vec4<u32>(16u)) | (vec4<u32>(a.yzw, b.x) << vec4<u32>(16u));
}

// sum over 16 int8 q (four words) times x[i .. i + 15]
fn dot16(q: vec4<u32>, xs: X64, i: u32) -> f32 {
    return dot(i8x4(q.x), xs.v[i]) + dot(i8x4(q.y), xs.v[i + 1u]) + dot(i8x4(q.z), xs.v[i + 2u])
        + dot(i8x4(q.w), xs.v[i + 3u]);
}

// Block pair p of the row at word w0: its four words of quants per block as q0 .. q3 (16 int8 each) and the
// two blocks' scales, read once for all of a step's tokens.
struct Pair {
    q0: vec4<u32>,
    q1: vec4<u32>,
    q2: vec4<u32>,
    q3: vec4<u32>,
    d0: f32,
    d1: f32,
}

fn load_pair(w0: u32, p: u32) -> Pair {
    let word = w0 + 17u * p;
    let o = word & 3u;
    let q = word >> 2u;
    let v0 = weight[q];
    let v1 = weight[q + 1u];
    let v2 = weight[q + 2u];
    let v3 = weight[q + 3u];
    let v4 = weight[q + 4u];
    let a0 = pick(v0, v1, o);  // W0 .. W3
    let a1 = pick(v1, v2, o);  // W4 .. W7
    let a2 = pick(v2, v3, o);  // W8 .. W11
    let a3 = pick(v3, v4, o);  // W12 .. W15
    let w16 = pick(v4, v4, o).x;
    return Pair(after_half(a0, a1), after_half(a1, a2), vec4<u32>(a2.yzw, a3.x), vec4<u32>(a3.yzw, w16),
                unpack2x16float(a0.x).x, unpack2x16float(a2.x).y);
}

// The dot product of a block pair with x.
fn pair_dot(w: Pair, xs: X64) -> f32 {
    let s0 = dot16(w.q0, xs, 0u) + dot16(w.q1, xs, 4u);
    let s1 = dot16(w.q2, xs, 8u) + dot16(w.q3, xs, 12u);
    // d * sum(q x) rather than sum((d q) x): the same sum up to f32 rounding of the sum
    return w.d0 * s0 + w.d1 * s1;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let first_row = first_row_of(wid, nwg, lid);
    let n = min(step.n_tokens, T_MAX);
    if (first_row >= N_ROWS) {
        return;
    }
    let words = row_words(first_row);
    let w0 = words.gate;
    let wu = words.up;
    var acc: array<vec4<f32>, T_MAX>;  // [token]: rows j = 0..3
    var acc_u: array<vec4<f32>, T_MAX>;  // [token]: up rows (GLU)
    for (var p = 0u; p < K / 64u; p++) {
        // the pair's weight words of the thread's rows, read once for all of the step's tokens
        let r0 = load_pair(w0.x, p);
        let r1 = load_pair(w0.y, p);
        let r2 = load_pair(w0.z, p);
        let r3 = load_pair(w0.w, p);
        var u0 = Pair();
        var u1 = Pair();
        var u2 = Pair();
        var u3 = Pair();
        if (GLU == 1u) {
            u0 = load_pair(wu.x, p);
            u1 = load_pair(wu.y, p);
            u2 = load_pair(wu.z, p);
            u3 = load_pair(wu.w, p);
        }
        for (var t = 0u; t < T_MAX; t++) {
            if (t < n) {
                var xs: X64;
                for (var i = 0u; i < 16u; i++) {
                    xs.v[i] = x[(t * K) / 4u + 16u * p + i];
                }
                acc[t] += vec4<f32>(pair_dot(r0, xs), pair_dot(r1, xs), pair_dot(r2, xs), pair_dot(r3, xs));
                if (GLU == 1u) {
                    acc_u[t] += vec4<f32>(pair_dot(u0, xs), pair_dot(u1, xs), pair_dot(u2, xs), pair_dot(u3, xs));
                }
            }
        }
    }
    store_rows(first_row, n, acc, acc_u);
}
