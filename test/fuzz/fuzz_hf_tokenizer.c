// data/hf_tokenizer.h's tokenizer.json reader (hft_load_checked), then a short text encoded and
// every id decoded.
#include "../../data/hf_tokenizer.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write_file("tokenizer.json", data, size);
    char err[1024];
    HfTokenizer t;
    if (hft_load_checked(&t, path, err, sizeof(err)) == 0) {
        FUZZ_CHECK(t.vocab_size >= 1, "an empty vocabulary");
        static const char text[] = "Hello world, 123 <|endoftext|>  caf\xc3\xa9\n\n it's  ok";
        BpeIds ids = {NULL, 0, 0};
        for (int special = 0; special < 2; special++) {
            ids.n = 0;
            if (hft_encode(&t, (const unsigned char *)text, sizeof(text) - 1, special, &ids) != 0) continue;
            for (size_t i = 0; i < ids.n; i++)
                FUZZ_CHECK(ids.ids[i] < (uint32_t)t.vocab_size, "id %u of %d", ids.ids[i], t.vocab_size);
            unsigned char out[512];
            hft_decode(&t, ids.ids, ids.n, out, sizeof(out));
        }
        bpe_ids_free(&ids);
        hft_free(&t);
    } else {
        FUZZ_CHECK(err[0] != '\0', "a failure without a message");
    }
    return 0;
}
