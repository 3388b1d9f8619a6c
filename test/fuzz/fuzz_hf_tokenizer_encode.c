// data/hf_tokenizer.h's encoder on arbitrary bytes: the first byte picks one of the tokenizer.json
// fixtures of test/fixtures/hf_tokenizers (loaded once) and whether special tokens are matched,
// the rest is the text. Every id must be in the vocabulary. Run from the repository root.
#include "../../data/hf_tokenizer.h"
#include "fuzz_common.h"

static const char *const files[3] = {"test/fixtures/hf_tokenizers/gpt2.json", "test/fixtures/hf_tokenizers/llama3.json",
                                     "test/fixtures/hf_tokenizers/qwen2.json"};
static HfTokenizer toks[3];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    char err[1024];
    for (int k = 0; k < 3; k++)
        if (hft_load_checked(&toks[k], files[k], err, sizeof(err)) != 0) {
            fprintf(stderr, "fuzz_hf_tokenizer_encode: %s (run from the repository root)\n", err);
            exit(1);
        }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    HfTokenizer *t = &toks[data[0] % 3];
    const int special = (data[0] / 3) & 1;
    BpeIds ids = {NULL, 0, 0};
    if (hft_encode(t, data + 1, size - 1, special, &ids) == 0) {
        for (size_t i = 0; i < ids.n; i++)
            FUZZ_CHECK(ids.ids[i] < (uint32_t)t->vocab_size, "id %u of %d", ids.ids[i], t->vocab_size);
        unsigned char *out = (unsigned char *)malloc(4 * size + 16);
        hft_decode(t, ids.ids, ids.n, out, 4 * size + 16);
        free(out);
    }
    bpe_ids_free(&ids);
    return 0;
}
