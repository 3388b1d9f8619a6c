// data/bpe.h's GPT-2 encoder on arbitrary bytes (bpe_encode with data/gpt2/, loaded once); the
// ids must decode back to the input (byte-level BPE is lossless). Run from the repository root.
#include "../../data/bpe.h"
#include "fuzz_common.h"

static BpeEncoder enc;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    if (bpe_load(&enc, "data/gpt2/encoder.json", "data/gpt2/vocab.bpe") != 0) {
        fprintf(stderr, "fuzz_bpe: cannot load data/gpt2 (run from the repository root)\n");
        exit(1);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    BpeIds ids = {NULL, 0, 0};
    if (bpe_encode(&enc, data, size, &ids) == 0) {
        size_t at = 0;
        for (size_t i = 0; i < ids.n; i++) {
            FUZZ_CHECK(ids.ids[i] < (uint32_t)enc.n_mergeable, "id %u is not a mergeable token", ids.ids[i]);
            size_t len = 0;
            const unsigned char *p = bpe_token_bytes(&enc, (int)ids.ids[i], &len);
            FUZZ_CHECK(len > 0 && at + len <= size && memcmp(p, data + at, len) == 0,
                       "id %zu (%u) does not decode to the input at byte %zu", i, ids.ids[i], at);
            at += len;
        }
        FUZZ_CHECK(at == size, "the ids decode to %zu of %zu bytes", at, size);
    }
    bpe_ids_free(&ids);
    return 0;
}
