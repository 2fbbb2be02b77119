// The Q4_K matvec's f32 row work with a row's lanes along each block's quant words (matvec_q4_k.wgsl with
// LANE_WORDS = 1: steps of several tokens). Lane l of a row's TPR (a multiple of 32) takes quant word w = l % 32
// of blocks l / 32, l / 32 + TPR / 32, ...: bytes 16 + 4 w of the block, whose low nibbles are values
// 64 j + 4 i .. 64 j + 4 i + 3 (j = w / 8, i = w % 8; sub-block 2 j) and high nibbles the same 32 values on
// (sub-block 2 j + 1). So eight neighbouring lanes read 32 neighbouring values of x for a token, one 128-byte
// line, where with lanes along 16-byte units (matvec/q4_k_rows.wgsl) each lane's 16 values of a sub-block are
// 64 bytes of its own and eight lanes' loads touch four lines; the loads of x (one vec4 for 4 values of each
// token, against a word of the weight for 8 values of all tokens) are most of a step's memory operations.
// Faster from 4 tokens a step (q4_word_lanes_min_tokens in gpu/ops/matmul_tuning.py).
// A block's 8 values of the lane are dequantised once for all tokens (d sc q - dmin m) and dotted with each
// token's x. Needs the including kernel's K, TPR, T_MAX, OUTS, SECOND, x_vec, n_tokens, unit_scales, one_bits,
// q4_weight, row_bases' word offsets and matvec/q4_k_rows.wgsl's Q4_BLOCK_WORDS4, q4_low_nibbles,
// q4_high_nibbles and q4_nibble_scales.

const Q4W_BLOCKS: u32 = K / 256u;   // blocks per row
const Q4W_BLOCK_STEP: u32 = max(TPR / 32u, 1u);
const_assert LANE_WORDS == 0u || TPR % 32u == 0u;

// The next block's words of a thread (its quant word and the block's header, and its second row's), loaded one
// block ahead of the arithmetic.
var<private> q4w_next_q: u32;
var<private> q4w_next_h: vec4<u32>;
var<private> q4w_next_q_2: u32;
var<private> q4w_next_h_2: vec4<u32>;

fn q4w_load(bases: vec2<u32>, block: u32, w: u32) {
    let at = block * Q4_BLOCK_WORDS4;
    q4w_next_q = q4_weight[bases.x + at + 1u + w / 4u][w % 4u];
    q4w_next_h = q4_weight[bases.x + at];
    if (SECOND == 1u) {
        q4w_next_q_2 = q4_weight[bases.y + at + 1u + w / 4u][w % 4u];
        q4w_next_h_2 = q4_weight[bases.y + at];
    }
}

fn q4w_prefetch(bases: vec2<u32>, lane: u32) {
    if (lane / 32u < Q4W_BLOCKS) {
        q4w_load(bases, lane / 32u, lane % 32u);
    }
}

// A lane's 8 values of one block, made once for all tokens: lo the low nibbles' (sub-block 2 j), hi the high
// nibbles' (sub-block 2 j + 1); s = unit_scales(header, j). Each nibble becomes 1 + q / 16 in a mantissa, as
// matvec/q4_k_rows.wgsl's units make them, and one multiply-add with q4_nibble_scales' scales makes d sc q - dmin m.
struct Q4WordValues {
    lo: vec4<f32>,
    hi: vec4<f32>,
}

fn q4w_values(q: u32, s: vec4<f32>) -> Q4WordValues {
    let one = one_bits();
    let n = q4_nibble_scales(s);
    return Q4WordValues(q4_low_nibbles(q, one) * n.x - n.y, q4_high_nibbles(q, one) * n.z - n.w);
}

struct Q4Word {
    v: Q4WordValues,
    v_2: Q4WordValues,
    xb: u32,  // vec4 index of the low values' x in token 0's row
}

// acc + the block's products with token t (a literal: see matvec/constants.wgsl) where computes_token.
fn q4w_token(acc: array<f32, OUTS>, t: u32, n: u32, w: Q4Word) -> array<f32, OUTS> {
    var sums = acc;
    if (computes_token(t, n)) {
        let lo = x_vec(t * (K / 4u) + w.xb);
        let hi = x_vec(t * (K / 4u) + w.xb + 8u);
        sums[t] += dot(w.v.lo, lo) + dot(w.v.hi, hi);
        if (SECOND == 1u) {
            sums[min(T_MAX + t, OUTS - 1u)] += dot(w.v_2.lo, lo) + dot(w.v_2.hi, hi);
        }
    }
    return sums;
}

// This thread's share of the row at word offset bases.x ([t]; with SECOND, the row at bases.y's at [T_MAX + t]).
// q4w_prefetch came first.
fn q4w_row_partial(bases: vec2<u32>, lane: u32) -> array<f32, OUTS> {
    var acc: array<f32, OUTS>;
    let n = n_tokens();
    let w = lane % 32u;
    let j = w / 8u;
    for (var block = lane / 32u; block < Q4W_BLOCKS; block += Q4W_BLOCK_STEP) {
        let q = q4w_next_q;
        let h = q4w_next_h;
        let q_2 = q4w_next_q_2;
        let h_2 = q4w_next_h_2;
        if (block + Q4W_BLOCK_STEP < Q4W_BLOCKS) {
            q4w_load(bases, block + Q4W_BLOCK_STEP, w);
        }
        var v_2 = Q4WordValues();
        if (SECOND == 1u) {
            v_2 = q4w_values(q_2, unit_scales(h_2, j));
        }
        let word = Q4Word(q4w_values(q, unit_scales(h, j)), v_2, block * 64u + 16u * j + w % 8u);
        acc = q4w_token(acc, 0u, n, word);
        acc = q4w_token(acc, 1u, n, word);
        acc = q4w_token(acc, 2u, n, word);
        acc = q4w_token(acc, 3u, n, word);
        acc = q4w_token(acc, 4u, n, word);
        acc = q4w_token(acc, 5u, n, word);
        acc = q4w_token(acc, 6u, n, word);
        acc = q4w_token(acc, 7u, n, word);
    }
    return acc;
}
