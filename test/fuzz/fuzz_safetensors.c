// llmc/safetensors.h: the header and data checks (safetensors_parse_checked_ on exactly the input
// bytes, so a read past them is a sanitizer report), every tensor read as F32 and BF16; and the
// file reader (safetensors_open_checked, mmap).
#include "../../llmc/safetensors.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[1024];
    unsigned char *bytes = (unsigned char *)malloc(size ? size : 1);
    memcpy(bytes, data, size);
    SafeTensorsFile f;
    memset(&f, 0, sizeof(f));
    f.path = safetensors_strdup_("model.safetensors");
    if (safetensors_parse_checked_(&f, bytes, size, err, sizeof(err)) == 0) {
        for (int i = 0; i < f.num_tensors; i++) {
            const SafeTensor *t = &f.tensors[i];
            FUZZ_CHECK(t->begin <= t->end && t->end <= f.data_bytes && f.data_bytes <= size, "tensor %s [%llu, %llu)",
                       t->name, (unsigned long long)t->begin, (unsigned long long)t->end);
            FUZZ_CHECK(t->numel <= t->end - t->begin, "tensor %s: %llu values in %llu bytes", t->name,
                       (unsigned long long)t->numel, (unsigned long long)(t->end - t->begin));
            FUZZ_CHECK(safetensors_find(&f, t->name) == t, "tensor %s not found by name", t->name);
            void *out = malloc(t->numel * 4 + 1);
            safetensors_read_checked(&f, t, ST_F32, out, err, sizeof(err));
            safetensors_read_checked(&f, t, ST_BF16, out, err, sizeof(err));
            free(out);
        }
        safetensors_metadata_get(&f, "format");
    } else {
        FUZZ_CHECK(err[0] != '\0', "a failure without a message");
    }
    safetensors_close(&f);
    free(bytes);
    const char *path = fuzz_write_file("model.safetensors", data, size);
    if (safetensors_open_checked(&f, path, err, sizeof(err)) == 0) safetensors_close(&f);
    return 0;
}
