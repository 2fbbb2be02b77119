// The frame of the software adapters' Q8_0 matvecs (matvec_q8_0_rows.wgsl on f32 x, matvec_q8_0_rows_i8.wgsl on x
// quantised to 8 bits): a thread's 4 whole rows read two blocks at a time, as matvec_q8_0_rows.wgsl describes.
// The including kernel gives x through
//   prepare_x(tid)       from uniform control flow before any x is read (may end with a barrier);
//   struct PairX         64 values of x, one block pair's worth, for one token;
//   pair_x(t, p) -> PairX  those of token t for block pair p;
//   pair_dot(w: Pair, xs: PairX) -> f32  the pair's dot product with them.
//
// Block pair layout (words W0..W16): W0 low half d0, bytes 2..33 q of block 0 (W0 high half ..
// W8 low half), W8 high half d1, W9..W16 q of block 1. value = d * q (int8).
#include "matvec/four_rows.wgsl"

const ROW_WORDS: u32 = K / 64u * 17u;  // u32 words of a row (K a multiple of 64)

// Words o .. o + 3 of the eight words a, b (o < 4, may differ per lane).
fn pick(a: vec4<u32>, b: vec4<u32>, o: u32) -> vec4<u32> {
    let hi = select(vec4<u32>(a.w, b.xyz), vec4<u32>(a.zw, b.xy), o == 2u);
    return select(select(hi, vec4<u32>(a.yzw, b.x), o == 1u), a, o == 0u);
}

// Bytes 2 .. 17 of the eight words a, b: the q of a block whose d is a's low half.
fn after_half(a: vec4<u32>, b: vec4<u32>) -> vec4<u32> {
    return (a >> vec4<u32>(16u)) | (vec4<u32>(a.yzw, b.x) << vec4<u32>(16u));
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

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    prepare_x(lid);  // before any return: it may end with a barrier
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
        // one token: x first, then each row's pair straight into its dot, so that one pair is live at a time
        // rather than four (the registers they hold spilled)
        for (var p = 0u; p < K / 64u; p++) {
            let xs = pair_x(0u, p);
            acc[0] += vec4<f32>(pair_dot(load_pair(w0.x, p), xs), pair_dot(load_pair(w0.y, p), xs),
                                pair_dot(load_pair(w0.z, p), xs), pair_dot(load_pair(w0.w, p), xs));
            if (GLU == 1u) {
                acc_u[0] += vec4<f32>(pair_dot(load_pair(wu.x, p), xs), pair_dot(load_pair(wu.y, p), xs),
                                      pair_dot(load_pair(wu.z, p), xs), pair_dot(load_pair(wu.w, p), xs));
            }
        }
    } else {
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
                    let xs = pair_x(t, p);
                    acc[t] += vec4<f32>(pair_dot(r0, xs), pair_dot(r1, xs), pair_dot(r2, xs), pair_dot(r3, xs));
                    if (GLU == 1u) {
                        acc_u[t] += vec4<f32>(pair_dot(u0, xs), pair_dot(u1, xs), pair_dot(u2, xs),
                                              pair_dot(u3, xs));
                    }
                }
            }
        }
    }
    store_rows(first_row, n, acc, acc_u);
}
