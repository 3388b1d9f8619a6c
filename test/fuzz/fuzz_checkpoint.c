// llmc/checkpoint.h's state file reader: state_peek_checked (the header alone) and
// state_read_checked for FUZZ_STATE_PARAMS parameters (what test/fuzz/gen_corpus.c writes).
#include "../../llmc/checkpoint.h"
#include "fuzz_common.h"

#define FUZZ_STATE_PARAMS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write_file("state.bin", data, size);
    char err[1024];
    TrainingState st;
    if (state_peek_checked(path, &st, err, sizeof(err)) == 0) state_free(&st);
    const size_t params[2] = {FUZZ_STATE_PARAMS, 0};
    for (int k = 0; k < 2; k++) {
        if (state_read_checked(path, params[k], &st, err, sizeof(err)) == 0) {
            FUZZ_CHECK(st.num_parameters == params[k], "%zu parameters", st.num_parameters);
            FUZZ_CHECK(params[k] == 0 || (st.m != NULL && st.v != NULL), "no moments");
            FUZZ_CHECK(!st.use_master_weights || params[k] == 0 || st.master_weights != NULL, "no master weights");
            if (st.loader.should_shuffle) {
                for (size_t i = 0; i < st.loader.num_shards; i++)
                    FUZZ_CHECK(st.loader.shard_indices[i] >= 0 && (size_t)st.loader.shard_indices[i] < st.loader.num_shards,
                               "shard index %d of %zu", st.loader.shard_indices[i], st.loader.num_shards);
                for (size_t i = 0; i < st.loader.shard_num_samples; i++)
                    FUZZ_CHECK(st.loader.intra_shard_indices[i] >= 0 &&
                               (size_t)st.loader.intra_shard_indices[i] < st.loader.shard_num_samples,
                               "sample index %d of %zu", st.loader.intra_shard_indices[i], st.loader.shard_num_samples);
            }
            state_free(&st);
        } else {
            FUZZ_CHECK(err[0] != '\0', "a failure without a message");
        }
    }
    return 0;
}
