// llmc/hf_config.h's config.json parser (hf_config_parse_checked on the bytes) and the file
// reader (hf_config_read_checked).
#include "../../llmc/hf_config.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[1024];
    HFConfig c;
    char *text = (char *)malloc(size ? size : 1);  // exactly the input: no terminator to lean on
    memcpy(text, data, size);
    if (hf_config_parse_checked("config.json", text, size, &c, err, sizeof(err)) == 0) {
        FUZZ_CHECK(c.family == HF_FAMILY_GPT2 || c.family == HF_FAMILY_LLAMA, "family %d", c.family);
        if (c.family == HF_FAMILY_LLAMA)
            FUZZ_CHECK(llama_config_check(&c.llama, err, sizeof(err)) == 0, "accepted config fails its check: %s", err);
    } else {
        FUZZ_CHECK(err[0] != '\0', "a failure without a message");
    }
    free(text);
    const char *path = fuzz_write_file("config.json", data, size);
    hf_config_read_checked(path, &c, err, sizeof(err));
    return 0;
}
