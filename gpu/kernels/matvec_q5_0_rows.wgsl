// matvec_q5_0_rows: y[t, ROW_START + r] = sum_k W[r, k] * x[t, k] for a Q5_0 weight shard, on
// software adapters (lavapipe); the same result as kernels/matvec.wgsl, read differently.
//
// Why (as matvec_q8_0_rows.wgsl): lavapipe compiles a buffer load with lane-varying addresses into a
// per-lane loop, so the number of loads bounds it, and a vec4 load costs about twice a u32 one for four
// times the bytes.
// matvec.wgsl's Q5_0 decoder (quant/q5_0.wgsl) reads a 22-byte block through about sixteen u32 loads;
// here a thread reads four blocks (a quad: 88 bytes, 22 words) in six vec4 loads. K is a multiple of
// 128, so a row holds K / 128 * 22 words, an even number: every quad starts at a word whose place in
// its vec4 is 0 or 2, and six aligned vec4 cover it either way. A thread computes 4 whole rows
// (rows first + j WG, j < 4), so each x value loaded serves 4 rows and no reduction is needed.
// Values are made once per block for all of a step's tokens. GLU = 1 (the fused gate-up linear, as in
// matvec.wgsl): the thread also computes its 4 rows' up rows N_ROWS + r and stores act(gate) * up.
//
// Quad layout (words W0..W21, bytes of ggml's block_q5_0: d f16, qh u32, qs 16 bytes): block 0 d is
// W0's low half, its qh and qs start two bytes into a word; block 1 d is W5's high half, qh W6, qs
// W7..W10; block 2 as block 0 from W11; block 3 as block 1 from W16's high half.
#include "matvec/four_rows.wgsl"
#include "quant/high_bits.wgsl"

const ROW_WORDS: u32 = K / 128u * 22u;  // u32 words of a row (K a multiple of 128)

// A quad's 22 words (W20 and W21 in tail.xy).
struct Quad {
    a0: vec4<u32>,
    a1: vec4<u32>,
    a2: vec4<u32>,
    a3: vec4<u32>,
    a4: vec4<u32>,
    tail: vec2<u32>,
}

// Words k .. k + 3 of the window a, b: from a's first word, or two words on.
fn pick(a: vec4<u32>, b: vec4<u32>, shifted: bool) -> vec4<u32> {
    return select(a, vec4<u32>(a.zw, b.xy), shifted);
}

fn load_quad(w0: u32, p: u32) -> Quad {
    let word = w0 + 22u * p;
    let shifted = (word & 3u) == 2u;
    let q = word >> 2u;
    let v0 = weight[q];
    let v1 = weight[q + 1u];
    let v2 = weight[q + 2u];
    let v3 = weight[q + 3u];
    let v4 = weight[q + 4u];
    let v5 = weight[q + 5u];
    return Quad(pick(v0, v1, shifted), pick(v1, v2, shifted), pick(v2, v3, shifted), pick(v3, v4, shifted),
                pick(v4, v5, shifted), select(v5.xy, v5.zw, shifted));
}

// One block's 32 values as 5-bit unsigned bytes: lo values 0..15, hi values 16..31 (byte i of the
// four words is value 4 word + i), and its scale.
struct Block {
    lo: vec4<u32>,
    hi: vec4<u32>,
    d: f32,
}

fn block(qh: u32, qs: vec4<u32>, d: f32) -> Block {
    return Block((qs & vec4<u32>(0x0F0F0F0Fu)) | high_bits16(qh),
                 ((qs >> vec4<u32>(4u)) & vec4<u32>(0x0F0F0F0Fu)) | high_bits16(qh >> 16u), d);
}

// Block b (0..3) of a quad.
fn quad_block(w: Quad, b: u32) -> Block {
    if (b == 0u) {
        return block((w.a0.x >> 16u) | (w.a0.y << 16u),
                     (vec4<u32>(w.a0.yzw, w.a1.x) >> vec4<u32>(16u)) | (vec4<u32>(w.a0.zw, w.a1.xy) << vec4<u32>(16u)),
                     unpack2x16float(w.a0.x).x);
    }
    if (b == 1u) {
        return block(w.a1.z, vec4<u32>(w.a1.w, w.a2.xyz), unpack2x16float(w.a1.y).y);
    }
    if (b == 2u) {
        return block((w.a2.w >> 16u) | (w.a3.x << 16u),
                     (w.a3 >> vec4<u32>(16u)) | (vec4<u32>(w.a3.yzw, w.a4.x) << vec4<u32>(16u)),
                     unpack2x16float(w.a2.w).x);
    }
    return block(w.a4.y, vec4<u32>(w.a4.zw, w.tail), unpack2x16float(w.a4.x).y);
}

// The four bytes of w as floats less 16 (exact: each byte in the mantissa of 2^23, see quant/bytes.wgsl).
fn centred4(w: u32) -> vec4<f32> {
    let b = (vec4<u32>(w) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xFFu);
    return bitcast<vec4<f32>>(b | vec4<u32>(0x4B000000u)) - vec4<f32>(8388624.0);
}

// 32 values of x (one block's worth) for one token.
struct X32 {
    v: array<vec4<f32>, 8>,
}

fn block_dot(w: Block, xs: X32) -> f32 {
    let lo = dot(centred4(w.lo.x), xs.v[0]) + dot(centred4(w.lo.y), xs.v[1]) + dot(centred4(w.lo.z), xs.v[2])
        + dot(centred4(w.lo.w), xs.v[3]);
    let hi = dot(centred4(w.hi.x), xs.v[4]) + dot(centred4(w.hi.y), xs.v[5]) + dot(centred4(w.hi.z), xs.v[6])
        + dot(centred4(w.hi.w), xs.v[7]);
    // d * sum((q - 16) x) rather than sum((d (q - 16)) x): the same sum up to f32 rounding
    return w.d * (lo + hi);
}

// One token's sums of four rows (word offsets w).
fn one_token_rows(w: vec4<u32>) -> vec4<f32> {
    var acc = vec4<f32>(0.0);
    for (var p = 0u; p < K / 128u; p++) {
        let r0 = load_quad(w.x, p);
        let r1 = load_quad(w.y, p);
        let r2 = load_quad(w.z, p);
        let r3 = load_quad(w.w, p);
        for (var b = 0u; b < 4u; b++) {
            var xs: X32;
            for (var i = 0u; i < 8u; i++) {
                xs.v[i] = x[32u * p + 8u * b + i];
            }
            acc += vec4<f32>(block_dot(quad_block(r0, b), xs), block_dot(quad_block(r1, b), xs),
                             block_dot(quad_block(r2, b), xs), block_dot(quad_block(r3, b), xs));
        }
    }
    return acc;
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
    if (T_MAX == 1u) {
        // one token: the gate rows, then the up rows, so that four quads are live at a time rather than eight
        acc[0] = one_token_rows(w0);
        if (GLU == 1u) {
            acc_u[0] = one_token_rows(wu);
        }
        store_rows(first_row, n, acc, acc_u);
        return;
    }
    for (var p = 0u; p < K / 128u; p++) {
        let r0 = load_quad(w0.x, p);
        let r1 = load_quad(w0.y, p);
        let r2 = load_quad(w0.z, p);
        let r3 = load_quad(w0.w, p);
        var u0 = Quad();
        var u1 = Quad();
        var u2 = Quad();
        var u3 = Quad();
        if (GLU == 1u) {
            u0 = load_quad(wu.x, p);
            u1 = load_quad(wu.y, p);
            u2 = load_quad(wu.z, p);
            u3 = load_quad(wu.w, p);
        }
        for (var b = 0u; b < 4u; b++) {
            // the block's values of the thread's rows, made once for all of the step's tokens
            let b0 = quad_block(r0, b);
            let b1 = quad_block(r1, b);
            let b2 = quad_block(r2, b);
            let b3 = quad_block(r3, b);
            var c0 = Block();
            var c1 = Block();
            var c2 = Block();
            var c3 = Block();
            if (GLU == 1u) {
                c0 = quad_block(u0, b);
                c1 = quad_block(u1, b);
                c2 = quad_block(u2, b);
                c3 = quad_block(u3, b);
            }
            for (var t = 0u; t < T_MAX; t++) {
                if (t < n) {
                    var xs: X32;
                    for (var i = 0u; i < 8u; i++) {
                        xs.v[i] = x[(t * K) / 4u + 32u * p + 8u * b + i];
                    }
                    acc[t] += vec4<f32>(block_dot(b0, xs), block_dot(b1, xs), block_dot(b2, xs), block_dot(b3, xs));
                    if (GLU == 1u) {
                        acc_u[t] += vec4<f32>(block_dot(c0, xs), block_dot(c1, xs), block_dot(c2, xs),
                                              block_dot(c3, xs));
                    }
                }
            }
        }
    }
    store_rows(first_row, n, acc, acc_u);
}
