// The matvec kernels' (matvec.wgsl, matvec_q4_k.wgsl, matvec_q6_k.wgsl and their _i8 variants) shape of one
// dispatch, the step binding, and the step's token count.
#include "common/step.wgsl"

override K: u32 = 256u;        // values per weight row, a multiple of the type's block (the host checks)
override N_ROWS: u32 = 1u;     // y columns computed: rows of W (with GLU, gate rows)
override FIRST_ROW: u32 = 0u;  // the shard's row where this dispatch starts
override ROW_START: u32 = 0u;  // y column of the dispatch's first row
override Y_STRIDE: u32 = 1u;   // values per y row
override T_MAX: u32 = 1u;      // rows of x and y: the program's tokens per step
override TPR: u32 = 32u;       // threads per row, a power of two
override ROWS: u32 = 8u;       // rows per workgroup
override GLU: u32 = 0u;        // 1: gelu_tanh(gate) * up, up row r at N_ROWS + r
override PAIRS: u32 = 0u;      // 1 (not with GLU): a thread also takes the row ROWS further, on the same x
override INTERLEAVE: u32 = 1u; // rows whose lanes alternate thread by thread (a power of two dividing ROWS)
override EVERY_ROW: u32 = 0u;  // 1: sums for each of the T_MAX rows of x, past the step's tokens too (computes_token)

const WG: u32 = TPR * ROWS;
const ROW_SPAN: u32 = ROWS * (1u + PAIRS);   // rows per workgroup
const SECOND: u32 = GLU + PAIRS;             // 1: a thread's units have a second row (up, or pair)
const OUTS: u32 = T_MAX * (1u + SECOND);     // sums per row: [token] (gate), then [token] of the second row

// A thread's OUTS sums live in an array indexed only by literals: each loop over tokens is written out as one call
// per token t = 0 .. 7 (`if (t < T_MAX)` drops the calls past the step's rows), so the sums stay in registers.
// Indexed by a loop counter, NVIDIA's compiler kept the loop and picked each sum by a chain of compares and moves
// (H100 SASS, 8 tokens: about 210 instructions a token for a Q5_0 group, 50 of them compares), or spilled them.
const_assert T_MAX <= 8u;
const_assert ROWS % INTERLEAVE == 0u;

// The row slot (x) and lane (y) of the workgroup's thread tid (the entry point's numbering: subgroup by subgroup
// where it can). With INTERLEAVE = 1 a row's TPR lanes are consecutive threads; with INTERLEAVE = R, each block of R
// TPR threads holds R rows, thread i of the block lane i / R of row i % R: the R neighbouring threads of one lane
// index read the same x, so a row's lanes along units that load one cache line of x together serve R rows rather
// than touch R lines (steps of several tokens, where x's loads outnumber the weight's; the host picks R). Lane j of
// a row sits INTERLEAVE threads after lane j - 1, which the entry points' reductions and row_total follow.
fn thread_slot(tid: u32) -> vec2<u32> {
    let i = tid % (TPR * INTERLEAVE);
    return vec2<u32>((tid / (TPR * INTERLEAVE)) * INTERLEAVE + i % INTERLEAVE, i / INTERLEAVE);
}

@group(0) @binding(0) var<uniform> step: Step;

// Whether a thread computes token t's sums (t a literal): the step's tokens (t < n), or with EVERY_ROW all T_MAX
// rows, whose x is in bounds and whose sums past n are never stored. Without a branch on n between one token's
// products and the next's, the compiler issues every token's loads of x together rather than wait on each in turn.
fn computes_token(t: u32, n: u32) -> bool {
    return t < T_MAX && (EVERY_ROW == 1u || t < n);
}

// Tokens of this step (x rows past it may hold anything).
fn n_tokens() -> u32 {
    return min(step.n_tokens, T_MAX);
}

// 1.0's bits, as a value the shader compiler cannot fold (n_tokens never reaches 2^32 - 1): the quant decoders' OR of
// it into a masked field (matvec/q4_k_rows.wgsl, matvec/q6_k_rows.wgsl) then takes one LOP3 with it in a register,
// where with a literal it took two (a LOP3 holds one immediate).
fn one_bits() -> u32 {
    return select(0x3F800000u, 0u, step.n_tokens == 0xFFFFFFFFu);
}
