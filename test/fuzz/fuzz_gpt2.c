// llmc/gpt2.h's model file reader (model_read_checked), fp32 and bf16 files, widened or not.
#include "../../llmc/gpt2.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write_file("model.bin", data, size);
    char err[1024];
    for (int want_fp32 = 0; want_fp32 < 2; want_fp32++) {
        ModelFileInfo info;
        void *params = NULL;
        if (model_read_checked(path, &info, &params, want_fp32, err, sizeof(err)) == 0) {
            FUZZ_CHECK(info.num_parameters == gpt2_num_parameters(&info.config), "%zu parameters",
                       info.num_parameters);
            FUZZ_CHECK(params != NULL, "no parameters");
            FUZZ_CHECK(MODEL_HEADER_BYTES + info.num_parameters * info.bytes_per_parameter <= (size_t)size,
                       "%zu parameters from %zu bytes", info.num_parameters, size);
            free(params);
        } else {
            FUZZ_CHECK(params == NULL && err[0] != '\0', "a failure without a message or with a buffer");
        }
    }
    return 0;
}
