// llama.cpp's own outputs on a fixture GGUF, for scripts/check_family_fixtures.py (how to build: its docstring).
//   lcheck logits MODEL < ids     float32 [T, V]: the logits of every position, binary on stdout
//   lcheck embed MODEL < ids      float32 [D]: the pooled embedding (the model's pooling type), not normalised
//   lcheck tokenize MODEL < text  the ids llama.cpp gives the text (special tokens parsed, none added), one line
// K and V are cached in F32 and flash attention is off, so F32 files can be compared at ~1e-5.
#include "llama.h"

#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

static void quiet(ggml_log_level, const char *, void *) {}

int main(int argc, char ** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: lcheck logits|embed|tokenize MODEL < input\n");
        return 2;
    }
    const std::string mode = argv[1];
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model * model = llama_model_load_from_file(argv[2], llama_model_default_params());
    if (!model) {
        fprintf(stderr, "loading %s failed\n", argv[2]);
        return 1;
    }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    if (mode == "tokenize") {
        const std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
        std::vector<llama_token> ids(text.size() + 16);
        const int n = llama_tokenize(vocab, text.data(), text.size(), ids.data(), ids.size(), false, true);
        for (int i = 0; i < n; i++) printf("%d ", ids[i]);
        printf("\n");
        return 0;
    }
    std::vector<llama_token> ids;
    for (int x; std::cin >> x;) ids.push_back(x);
    llama_context_params cp = llama_context_default_params();  // n_ctx from the model (phi3: > original -> long)
    cp.n_batch = cp.n_ubatch = 512;
    cp.n_threads = cp.n_threads_batch = 2;
    cp.embeddings = mode == "embed";
    cp.type_k = cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    llama_context * ctx = llama_init_from_model(model, cp);
    llama_batch batch = llama_batch_init(ids.size(), 0, 1);
    for (size_t i = 0; i < ids.size(); i++) {
        batch.token[i] = ids[i];
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = true;
    }
    batch.n_tokens = ids.size();
    if (llama_decode(ctx, batch) != 0) {
        fprintf(stderr, "decode failed\n");
        return 1;
    }
    if (mode == "logits") {
        const int n_vocab = llama_vocab_n_tokens(vocab);
        for (size_t i = 0; i < ids.size(); i++) fwrite(llama_get_logits_ith(ctx, i), sizeof(float), n_vocab, stdout);
    } else {
        fwrite(llama_get_embeddings_seq(ctx, 0), sizeof(float), llama_model_n_embd(model), stdout);
    }
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
