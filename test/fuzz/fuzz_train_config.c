// llmc/train_config.h's command-line parser: the input split at NUL bytes and newlines into
// argv[1..], parsed (train_config_parse) and checked (train_config_check, train_config_steps).
#include "../../llmc/train_config.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    char *buf = (char *)malloc(size + 1);
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *argv[1026];
    int argc = 0;
    argv[argc++] = (char *)"train_gpt";
    char *p = buf;
    for (size_t i = 0; i <= size && argc < 1025; i++) {
        if (buf[i] == '\0' || buf[i] == '\n') {
            buf[i] = '\0';
            argv[argc++] = p;
            p = buf + i + 1;
        }
    }
    argv[argc] = NULL;
    char err[1024];
    TrainConfig c;
    if (train_config_parse(&c, argc, argv, err, sizeof(err)) == 0) {
        const int nproc = 1 + (int)(size % 8);
        if (train_config_check(&c, nproc, err, sizeof(err)) == 0)
            train_config_steps(&c, (int64_t)1000000, 0, err, sizeof(err));
    }
    free(buf);
    return 0;
}
