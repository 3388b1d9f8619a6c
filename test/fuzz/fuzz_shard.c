// llmc/shard.h (shard_read_checked) and llmc/dataloader.h on the shard: init (with and without
// shuffling), the vocabulary check, a few batches, a resume.
#include "../../llmc/dataloader.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write_file("shard_000000.bin", data, size);
    char err[1024];
    uint32_t *ids = NULL;
    size_t n = 0;
    ShardInfo info;
    if (shard_read_checked(path, &ids, &n, &info, err, sizeof(err)) == 0) {
        FUZZ_CHECK(n == (size_t)info.num_tokens, "%zu ids, %lld in the header", n, (long long)info.num_tokens);
        FUZZ_CHECK(n * (size_t)info.token_bytes <= size, "%zu tokens from %zu bytes", n, size);
        free(ids);
    } else {
        FUZZ_CHECK(ids == NULL && err[0] != '\0', "a failure without a message or with a buffer");
    }
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        DataLoader l;
        if (dataloader_init_checked(&l, path, 2, 4, 0, 1, shuffle, !shuffle, err, sizeof(err)) != 0) continue;
        int ok = dataloader_set_vocab_checked(&l, 50257, err, sizeof(err)) == 0;
        for (int b = 0; ok && b < 4; b++) {
            ok = dataloader_next_batch_checked(&l, err, sizeof(err)) == 0;
            if (ok)
                for (size_t i = 0; i < l.B * l.T; i++)
                    FUZZ_CHECK(l.inputs[i] >= 0 && l.inputs[i] < 50257 && (l.targets[i] == DATALOADER_IGNORE_TARGET || (l.targets[i] >= 0 && l.targets[i] < 50257)), "token %d / target %d outside the vocabulary",
                               l.inputs[i], l.targets[i]);
        }
        if (ok) dataloader_resume_checked(&l, 0, 1, err, sizeof(err));
        dataloader_free(&l);
    }
    return 0;
}
