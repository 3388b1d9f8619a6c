// llmc/tokenizer.h's llm.c tokenizer file reader (tokenizer_init_checked), then every token decoded.
#include "../../llmc/tokenizer.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write_file("tokenizer.bin", data, size);
    char err[1024];
    Tokenizer t;
    memset(&t, 0, sizeof(t));
    if (tokenizer_init_checked(&t, path, err, sizeof(err)) == 0) {
        FUZZ_CHECK(t.vocab_size >= 1 && t.eot_token < t.vocab_size, "eot %u of %u", t.eot_token, t.vocab_size);
        FUZZ_CHECK((size_t)t.vocab_size <= size, "%u tokens from %zu bytes", t.vocab_size, size);
        unsigned char out[64];
        char esc[256];
        for (uint32_t id = 0; id < t.vocab_size; id++) {
            FUZZ_CHECK(t.offsets[id] <= t.offsets[id + 1], "token %u's offsets decrease", id);
            size_t len = tokenizer_decode_ids(&t, &id, 1, out, sizeof(out));
            if (len != (size_t)-1) token_escape(out, len, esc, sizeof(esc));
        }
        uint32_t bad = t.vocab_size;
        tokenizer_decode_ids(&t, &bad, 1, out, sizeof(out));
    } else {
        FUZZ_CHECK(err[0] != '\0', "a failure without a message");
    }
    tokenizer_free(&t);
    return 0;
}
