// Per-step values, written once per step into one 16-byte uniform buffer.
// Mirrored by gpu.program.StepParams (tests/gpu/test_program.py checks the sizes agree).
struct Step {
    n_tokens: u32,  // tokens processed in this step: rows of the activations (1 in decode)
    pos: u32,       // sequence position of the step's first token
    kv_len: u32,    // keys in the cache once this step has run: pos + n_tokens
    seed: u32,      // reserved for sampling on the GPU
}
