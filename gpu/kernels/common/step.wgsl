// Per-step values, written once per step into one 16-byte uniform buffer.
// Mirrored by gpu.program.StepParams (tests/gpu/test_program.py checks the sizes agree).
// Where each token sits (its sequence, position and KV pages) is not here but in the row table
// (common/rows.wgsl): one step may carry tokens of several sequences.
struct Step {
    n_tokens: u32,   // token rows processed in this step (rows of the activations)
    n_out: u32,      // rows that reach the output head: the last token of each sequence in the step
    iteration: u32,  // index of this step among the decode steps of one submission
    seed: u32,       // sampling counter: different for every step of a sequence
}
