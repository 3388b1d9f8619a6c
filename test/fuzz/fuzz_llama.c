// llmc/llama.h's model file reader (llama_model_read_checked), bf16 as stored and widened.
#include "../../llmc/llama.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write_file("model.bin", data, size);
    char err[1024];
    for (int want_fp32 = 0; want_fp32 < 2; want_fp32++) {
        LlamaConfig c;
        void *params = NULL;
        if (llama_model_read_checked(path, &c, &params, want_fp32, err, sizeof(err)) == 0) {
            const size_t n = llama_num_parameters(&c);
            FUZZ_CHECK(params != NULL, "no parameters");
            FUZZ_CHECK(LLAMA_HEADER_BYTES + 2 * n <= size, "%zu parameters from %zu bytes", n, size);
            FUZZ_CHECK(llama_config_check(&c, err, sizeof(err)) == 0, "accepted config fails its check: %s", err);
            free(params);
        } else {
            FUZZ_CHECK(params == NULL && err[0] != '\0', "a failure without a message or with a buffer");
        }
    }
    return 0;
}
