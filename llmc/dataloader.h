/*
dataloader.h - llm.c-compatible distributed data loader over token shards (llmc/shard.h):
GPT-2 shards (20240520 v1, uint16) and Llama-3 shards (20240801 v7, uint32).

Data order, exactly as llm.c's dataloader.h:
  - the shards are the files matching a glob(3) pattern, in glob's (sorted) order; each is
    validated at init (header, file size, enough tokens);
  - a sample is nproc * B * T consecutive tokens; sample idx of a shard starts at token
    idx * nproc * B * T, and rank r reads the B*T+1 tokens starting r * B * T into it:
    inputs = tokens[0 .. B*T), targets = tokens[1 .. B*T]. A shard with ntok tokens holds
    (ntok - 1) / (nproc * B * T) such samples (the +1 target token may belong to the next
    sample). Byte offsets are computed in 64 bits (dataloader_sample_offset), so shards
    larger than 2 GiB work (llm.c casts the offset to int);
  - with shuffling (train): a mt19937 (llmc/rand.h) seeded 42 + rank; at every reset (init
    and each new epoch) the shard order is permuted with random_permutation (in place, so
    epoch e permutes epoch e-1's order), then each time a shard is opened its samples are
    visited in the order of random_permutation(identity(num_samples)). Without shuffling
    (val) shards and samples go in order. After the last sample of the last shard the
    loader starts a new epoch (reset).

Short evaluation sets: llm.c requires every shard to hold nproc * B * T + 1 tokens. The
default (training) loader keeps that rule and its error says how many full batches the
shard holds. A loader made with allow_partial_batches = 1 (dataloader_init_eval; never
shuffled) also accepts smaller shards: a shard then has ceil((ntok - 1) / (nproc*B*T))
samples, the last one possibly partial. In a partial batch, positions past the end of the
data get input token 0 and target DATALOADER_IGNORE_TARGET (-100, PyTorch's and flce's
default ignore_index), and loader->num_targets says how many targets of this rank's batch
are real. A rank whose part of the last sample lies entirely past the end gets a batch with
num_targets = 0, so every rank runs the same number of batches. Average the eval loss over
real targets (sum of per-token losses / sum of num_targets across batches and ranks), not
over batches.

Vocabulary: dataloader_set_vocab_checked(&l, V) rejects any token id >= V, the model's
vocabulary (the embedding would be read out of bounds): the open shard at once, every other
shard the first time it is opened (one pass for the shard's largest id, not a check per batch).

Resume: DataLoaderState holds what llm.c's state file stores (shard and sample position,
the shard order, the current shard's sample order, the shuffle generator);
dataloader_get_state copies it out, dataloader_set_state_checked validates and restores it.
dataloader_resume(shard, sample) alone (llm.c's call) only moves the position: enough
without shuffling; a shuffled loader refuses to read a shard whose sample order it lacks.

API:
  dataloader_init(&l, pattern, B, T, rank, nproc, shuffle)   llm.c's; exits on error
  dataloader_init_eval(&l, pattern, B, T, rank, nproc)       in order, partial batches
  dataloader_init_checked(..., shuffle, allow_partial, err, len)   0 / -1, never exits
  dataloader_set_vocab_checked(&l, V, err, len)   ids must be < V (see above)
  dataloader_next_batch(&l)   fills l.inputs, l.targets (B*T ints each), l.num_targets
  dataloader_reset(&l), dataloader_resume(&l, shard_idx, sample_idx), dataloader_free(&l)
  l.num_batches, l.num_full_batches, l.num_tokens, l.num_shards   per epoch / in total
  dataloader_get_state / dataloader_set_state_checked / dataloader_state_free
  dataloader_sample_offset, shard_num_full_batches, shard_num_partial_batches   arithmetic

Errors: dataloader_init_checked and the *_checked calls return -1 with a message naming the
file and what is wrong; dataloader_init/_eval/next_batch/reset/resume print it and exit(1).
*/
#ifndef LLMC_DATALOADER_H
#define LLMC_DATALOADER_H

#include "utils.h"  // first: it sets the POSIX feature macros

#include <glob.h>
#include <limits.h>

#include "rand.h"
#include "shard.h"

#define DATALOADER_IGNORE_TARGET (-100)
#define DATALOADER_SHUFFLE_SEED 42  // + process_rank

typedef struct {
    size_t shard_idx;           // position in the shard order
    size_t sample_idx;          // next sample to read in that shard
    int should_shuffle;
    // the rest only with should_shuffle
    size_t num_shards;
    int *shard_indices;         // [num_shards] the shard order
    size_t shard_num_samples;
    int *intra_shard_indices;   // [shard_num_samples] sample order of the current shard
    mt19937_state shuffle_rng;
} DataLoaderState;

typedef struct {
    // configuration
    int process_rank, num_processes;
    size_t B, T;
    int should_shuffle;
    int allow_partial_batches;
    // the shards
    glob_t glob_result;
    int glob_ok;
    size_t num_shards;
    int64_t num_tokens;          // all shards together
    size_t num_batches;          // batches per epoch for this rank (every rank has the same)
    size_t num_full_batches;     // of which full (no padded positions)
    int vocab_size;              // > 0: every token id must be below it
    unsigned char *shard_ids_ok; // [num_shards] by glob index: checked against vocab_size
    // position
    size_t current_shard_idx, current_sample_idx;
    FILE *tokens_file;
    ShardInfo shard;             // the open shard
    size_t shard_num_samples;
    // shuffling
    int *shard_indices;
    int *intra_shard_indices;
    size_t intra_shard_len;      // entries in intra_shard_indices
    mt19937_state shuffle_rng;
    // the current batch
    unsigned char *buffer;       // (B*T+1) raw tokens
    int *inputs, *targets;       // B*T each
    size_t num_targets;          // targets that are real data (B*T unless partial)
} DataLoader;

// ----------------------------------------------------------------------------
// pure arithmetic (unit-tested past 2^31)

// Byte offset of rank process_rank's B*T+1 tokens of sample sample_idx.
static inline int64_t dataloader_sample_offset(int64_t sample_idx, int num_processes, size_t B,
                                               size_t T, int process_rank, int token_bytes) {
    int64_t batch_tokens = (int64_t)B * (int64_t)T;
    int64_t first_token = sample_idx * (int64_t)num_processes * batch_tokens +
                          (int64_t)process_rank * batch_tokens;
    return (int64_t)SHARD_HEADER_BYTES + first_token * (int64_t)token_bytes;
}

// Full samples (batches for every rank) in a shard of ntok tokens.
static inline size_t shard_num_full_batches(int64_t ntok, size_t B, size_t T, int num_processes) {
    int64_t sample_tokens = (int64_t)num_processes * (int64_t)B * (int64_t)T;
    return ntok < 1 || sample_tokens < 1 ? 0 : (size_t)((ntok - 1) / sample_tokens);
}

// Samples including a last partial one (each needs at least one target somewhere).
static inline size_t shard_num_partial_batches(int64_t ntok, size_t B, size_t T, int num_processes) {
    int64_t sample_tokens = (int64_t)num_processes * (int64_t)B * (int64_t)T;
    return ntok < 2 || sample_tokens < 1 ? 0 : (size_t)((ntok - 1 + sample_tokens - 1) / sample_tokens);
}

static inline const char *dataloader_shard_path(const DataLoader *loader, size_t shard_pos) {
    size_t actual = loader->should_shuffle ? (size_t)loader->shard_indices[shard_pos] : shard_pos;
    return loader->glob_result.gl_pathv[actual];
}

// ----------------------------------------------------------------------------
// internals

static inline size_t dataloader_samples_in_(const DataLoader *loader, int64_t ntok) {
    return loader->allow_partial_batches
               ? shard_num_partial_batches(ntok, loader->B, loader->T, loader->num_processes)
               : shard_num_full_batches(ntok, loader->B, loader->T, loader->num_processes);
}

// Checks the open shard (at position shard_pos) against vocab_size, once per shard.
static inline int dataloader_check_ids_(DataLoader *loader, size_t shard_pos, char *err, size_t err_len) {
    const size_t actual = loader->should_shuffle ? (size_t)loader->shard_indices[shard_pos] : shard_pos;
    // a uint16 id cannot reach a vocabulary above 65535
    if (loader->vocab_size <= 0 || loader->shard_ids_ok[actual] ||
        (loader->shard.token_bytes == 2 && loader->vocab_size > 0xFFFF))
        return 0;
    const char *path = dataloader_shard_path(loader, shard_pos);
    uint32_t max_id;
    int64_t max_at;
    if (shard_max_token_checked(loader->tokens_file, &loader->shard, path, &max_id, &max_at, err, err_len) != 0)
        return -1;
    if (max_id >= (uint32_t)loader->vocab_size) {
        llmc_set_error(err, err_len, "shard '%s': token %lld has id %u, outside the model's vocabulary "
                       "of %d tokens (ids 0..%d)", path, (long long)max_at, max_id, loader->vocab_size,
                       loader->vocab_size - 1);
        return -1;
    }
    loader->shard_ids_ok[actual] = 1;
    return 0;
}

// Opens the shard at position shard_pos of the shard order.
static inline int dataloader_load_shard_(DataLoader *loader, size_t shard_pos, char *err, size_t err_len) {
    if (shard_pos >= loader->num_shards) {
        llmc_set_error(err, err_len, "data loader: shard position %zu out of range (%zu shards)",
                       shard_pos, loader->num_shards);
        return -1;
    }
    const char *path = dataloader_shard_path(loader, shard_pos);
    if (loader->tokens_file != NULL) {
        fclose(loader->tokens_file);
        loader->tokens_file = NULL;
    }
    if (shard_open_checked(path, &loader->tokens_file, &loader->shard, err, err_len) != 0 ||
        dataloader_check_ids_(loader, shard_pos, err, err_len) != 0)
        return -1;
    loader->shard_num_samples = dataloader_samples_in_(loader, loader->shard.num_tokens);
    if (loader->shard_num_samples == 0) {
        llmc_set_error(err, err_len, "shard '%s' now holds %lld tokens, no batch (it changed "
                       "since the loader was created?)", path, (long long)loader->shard.num_tokens);
        return -1;
    }
    return 0;
}

static inline int dataloader_prepare_intra_shard_indices_(DataLoader *loader, char *err, size_t err_len) {
    free(loader->intra_shard_indices);
    loader->intra_shard_indices = NULL;
    loader->intra_shard_len = 0;
    if (loader->shard_num_samples > (size_t)INT_MAX) {
        llmc_set_error(err, err_len, "data loader: %zu samples in one shard are too many to shuffle",
                       loader->shard_num_samples);
        return -1;
    }
    loader->intra_shard_indices = (int *)malloc(loader->shard_num_samples * sizeof(int));
    if (loader->intra_shard_indices == NULL) {
        llmc_set_error(err, err_len, "data loader: out of memory");
        return -1;
    }
    loader->intra_shard_len = loader->shard_num_samples;
    init_identity_permutation(loader->intra_shard_indices, (int)loader->shard_num_samples);
    random_permutation(loader->intra_shard_indices, (int)loader->shard_num_samples,
                       &loader->shuffle_rng);
    return 0;
}

// ----------------------------------------------------------------------------
// position

static inline int dataloader_reset_checked(DataLoader *loader, char *err, size_t err_len) {
    loader->current_shard_idx = 0;
    loader->current_sample_idx = 0;
    if (loader->should_shuffle)
        random_permutation(loader->shard_indices, (int)loader->num_shards, &loader->shuffle_rng);
    if (dataloader_load_shard_(loader, 0, err, err_len) != 0) return -1;
    if (loader->should_shuffle) return dataloader_prepare_intra_shard_indices_(loader, err, err_len);
    return 0;
}

// Next shard, or a new epoch after the last one.
static inline int dataloader_advance_(DataLoader *loader, char *err, size_t err_len) {
    if (loader->current_shard_idx == loader->num_shards - 1) return dataloader_reset_checked(loader, err, err_len);
    loader->current_shard_idx++;
    loader->current_sample_idx = 0;
    if (dataloader_load_shard_(loader, loader->current_shard_idx, err, err_len) != 0) return -1;
    if (loader->should_shuffle) return dataloader_prepare_intra_shard_indices_(loader, err, err_len);
    return 0;
}

// Continues at sample sample_idx of the shard at position shard_idx (llm.c's resume; with
// shuffling restore the permutations and generator first: dataloader_set_state_checked).
static inline int dataloader_resume_checked(DataLoader *loader, size_t shard_idx, size_t sample_idx,
                                            char *err, size_t err_len) {
    if (shard_idx >= loader->num_shards) {
        llmc_set_error(err, err_len, "data loader: cannot resume at shard %zu, there are %zu",
                       shard_idx, loader->num_shards);
        return -1;
    }
    loader->current_shard_idx = shard_idx;
    loader->current_sample_idx = sample_idx;
    if (dataloader_load_shard_(loader, shard_idx, err, err_len) != 0) return -1;
    if (sample_idx > loader->shard_num_samples) {
        llmc_set_error(err, err_len, "data loader: cannot resume at sample %zu of shard '%s', it "
                       "has %zu", sample_idx, dataloader_shard_path(loader, shard_idx),
                       loader->shard_num_samples);
        return -1;
    }
    return 0;
}

// ----------------------------------------------------------------------------
// init / free

static inline void dataloader_free(DataLoader *loader) {
    if (loader->tokens_file != NULL) fclose(loader->tokens_file);
    if (loader->glob_ok) globfree(&loader->glob_result);
    free(loader->shard_indices);
    free(loader->intra_shard_indices);
    free(loader->shard_ids_ok);
    free(loader->buffer);
    free(loader->inputs);
    free(loader->targets);
    memset(loader, 0, sizeof(*loader));
}

static inline int dataloader_init_checked(DataLoader *loader, const char *filename_pattern, size_t B,
                                          size_t T, int process_rank, int num_processes,
                                          int should_shuffle, int allow_partial_batches, char *err,
                                          size_t err_len) {
    memset(loader, 0, sizeof(*loader));
    if (B < 1 || T < 1 || num_processes < 1 || process_rank < 0 || process_rank >= num_processes ||
        B > (1u << 20) || T > (1u << 24) || (uint64_t)B * T > (1u << 30)) {
        llmc_set_error(err, err_len, "data loader: bad configuration B=%zu T=%zu rank=%d "
                       "processes=%d", B, T, process_rank, num_processes);
        return -1;
    }
    if (should_shuffle && allow_partial_batches) {
        llmc_set_error(err, err_len, "data loader: partial batches are for evaluation and cannot be "
                       "shuffled");
        return -1;
    }
    loader->process_rank = process_rank;
    loader->num_processes = num_processes;
    loader->B = B;
    loader->T = T;
    loader->should_shuffle = should_shuffle;
    loader->allow_partial_batches = allow_partial_batches;

    int glob_status = glob(filename_pattern, 0, NULL, &loader->glob_result);
    loader->glob_ok = 1;  // globfree is valid after any glob call
    if (glob_status != 0 && glob_status != GLOB_NOMATCH) {
        llmc_set_error(err, err_len, "data loader: glob of '%s' failed (%d)", filename_pattern,
                       glob_status);
        dataloader_free(loader);
        return -1;
    }
    if (glob_status == GLOB_NOMATCH || loader->glob_result.gl_pathc == 0) {
        llmc_set_error(err, err_len, "data loader: no files match '%s'", filename_pattern);
        dataloader_free(loader);
        return -1;
    }
    loader->num_shards = loader->glob_result.gl_pathc;
    if (loader->num_shards > (size_t)INT_MAX) {
        llmc_set_error(err, err_len, "data loader: too many shards for '%s'", filename_pattern);
        dataloader_free(loader);
        return -1;
    }

    // validate every shard now, so that a bad one fails at start-up and not hours later
    int64_t sample_tokens = (int64_t)num_processes * (int64_t)B * (int64_t)T;
    for (size_t k = 0; k < loader->num_shards; k++) {
        const char *path = loader->glob_result.gl_pathv[k];
        FILE *fp;
        ShardInfo info;
        if (shard_open_checked(path, &fp, &info, err, err_len) != 0) {
            dataloader_free(loader);
            return -1;
        }
        fclose(fp);
        size_t full = shard_num_full_batches(info.num_tokens, B, T, num_processes);
        size_t samples = dataloader_samples_in_(loader, info.num_tokens);
        if (samples == 0) {
            llmc_set_error(err, err_len, "shard '%s' holds %lld tokens: %zu full batches of "
                           "nproc*B*T+1 = %lld tokens (B=%zu T=%zu processes=%d)%s", path,
                           (long long)info.num_tokens, full, (long long)(sample_tokens + 1), B, T,
                           num_processes, allow_partial_batches ? "" :
                           "; use a smaller B or T, or a partial-batch (eval) loader");
            dataloader_free(loader);
            return -1;
        }
        loader->num_tokens += info.num_tokens;
        loader->num_batches += samples;
        loader->num_full_batches += full;
    }

    size_t bt = B * T;
    loader->buffer = (unsigned char *)malloc((bt + 1) * 4);
    loader->inputs = (int *)malloc(bt * sizeof(int));
    loader->targets = (int *)malloc(bt * sizeof(int));
    if (should_shuffle) loader->shard_indices = (int *)malloc(loader->num_shards * sizeof(int));
    if (loader->buffer == NULL || loader->inputs == NULL || loader->targets == NULL ||
        (should_shuffle && loader->shard_indices == NULL)) {
        llmc_set_error(err, err_len, "data loader: out of memory for B=%zu T=%zu", B, T);
        dataloader_free(loader);
        return -1;
    }
    if (should_shuffle) {
        manual_seed(&loader->shuffle_rng, (uint64_t)(DATALOADER_SHUFFLE_SEED + process_rank));
        init_identity_permutation(loader->shard_indices, (int)loader->num_shards);
    }
    if (dataloader_reset_checked(loader, err, err_len) != 0) {
        dataloader_free(loader);
        return -1;
    }
    return 0;
}

// llm.c's dataloader_init: full batches only; prints the error and exits on failure.
static inline void dataloader_init(DataLoader *loader, const char *filename_pattern, size_t B,
                                   size_t T, int process_rank, int num_processes, int should_shuffle) {
    char err[1024];
    if (dataloader_init_checked(loader, filename_pattern, B, T, process_rank, num_processes,
                                should_shuffle, 0, err, sizeof(err)) != 0) {
        fprintf(stderr, "Error: %s\n", err);
        exit(EXIT_FAILURE);
    }
}

// Evaluation loader: in order, no shuffling, a shard smaller than a batch is allowed (see
// the top of this file for the padded final batch).
static inline void dataloader_init_eval(DataLoader *loader, const char *filename_pattern, size_t B,
                                        size_t T, int process_rank, int num_processes) {
    char err[1024];
    if (dataloader_init_checked(loader, filename_pattern, B, T, process_rank, num_processes, 0, 1,
                                err, sizeof(err)) != 0) {
        fprintf(stderr, "Error: %s\n", err);
        exit(EXIT_FAILURE);
    }
}

// Every token id must be below vocab_size (>= 1) from now on; the open shard is checked now.
static inline int dataloader_set_vocab_checked(DataLoader *loader, int vocab_size, char *err, size_t err_len) {
    if (vocab_size < 1) {
        llmc_set_error(err, err_len, "data loader: bad vocabulary size %d", vocab_size);
        return -1;
    }
    free(loader->shard_ids_ok);
    loader->shard_ids_ok = (unsigned char *)calloc(loader->num_shards, 1);
    if (loader->shard_ids_ok == NULL) {
        llmc_set_error(err, err_len, "data loader: out of memory");
        return -1;
    }
    loader->vocab_size = vocab_size;
    return dataloader_check_ids_(loader, loader->current_shard_idx, err, err_len);
}

// ----------------------------------------------------------------------------
// batches

// Reads the current sample into inputs/targets (does not move the position).
static inline int dataloader_load_batch_checked(DataLoader *loader, char *err, size_t err_len) {
    const char *path = dataloader_shard_path(loader, loader->current_shard_idx);
    if (loader->current_sample_idx >= loader->shard_num_samples) {
        llmc_set_error(err, err_len, "data loader: sample %zu out of range in '%s'",
                       loader->current_sample_idx, path);
        return -1;
    }
    if (loader->should_shuffle && (loader->intra_shard_indices == NULL ||
                                   loader->intra_shard_len != loader->shard_num_samples)) {
        // resume() moved to a shard with another sample count without its saved order
        llmc_set_error(err, err_len, "data loader: no sample order for shard '%s' (%zu samples); "
                       "restore a shuffled loader with dataloader_set_state_checked", path,
                       loader->shard_num_samples);
        return -1;
    }
    size_t idx = loader->should_shuffle ? (size_t)loader->intra_shard_indices[loader->current_sample_idx]
                                        : loader->current_sample_idx;
    size_t bt = loader->B * loader->T;
    int token_bytes = loader->shard.token_bytes;
    int64_t offset = dataloader_sample_offset((int64_t)idx, loader->num_processes, loader->B,
                                              loader->T, loader->process_rank, token_bytes);
    int64_t first_token = (offset - SHARD_HEADER_BYTES) / token_bytes;
    int64_t available = loader->shard.num_tokens - first_token;  // tokens from first_token on
    size_t count = bt + 1;
    if (available < (int64_t)count) count = available > 0 ? (size_t)available : 0;
    if (count < bt + 1 && !loader->allow_partial_batches) {
        llmc_set_error(err, err_len, "data loader: sample %zu of '%s' runs past the end", idx, path);
        return -1;
    }
    if (count > 0) {
        if (fseeko(loader->tokens_file, (off_t)offset, SEEK_SET) != 0) {
            llmc_set_error(err, err_len, "data loader: seek to byte %lld of '%s' failed: %s",
                           (long long)offset, path, strerror(errno));
            return -1;
        }
        if (llmc_read_exact(loader->tokens_file, loader->buffer, count * (size_t)token_bytes) != 0) {
            llmc_set_error(err, err_len, "data loader: reading %zu tokens at byte %lld of '%s' "
                           "failed (file changed?)", count, (long long)offset, path);
            return -1;
        }
    }
    for (size_t i = 0; i < bt; i++) {
        int64_t in = 0, tgt = DATALOADER_IGNORE_TARGET;
        for (int which = 0; which < 2; which++) {
            size_t k = i + (size_t)which;
            if (k >= count) break;
            const unsigned char *p = loader->buffer + k * (size_t)token_bytes;
            uint32_t v = token_bytes == 2 ? (uint32_t)(p[0] | (p[1] << 8)) : llmc_get_u32(p);
            if (v > (uint32_t)INT_MAX) {
                llmc_set_error(err, err_len, "data loader: token %lld of '%s' has id %u (corrupt "
                               "shard?)", (long long)(first_token + (int64_t)k), path, v);
                return -1;
            }
            if (which == 0) in = v; else tgt = v;
        }
        loader->inputs[i] = (int)in;
        loader->targets[i] = (int)tgt;
    }
    loader->num_targets = count > 0 ? count - 1 : 0;
    return 0;
}

static inline int dataloader_next_batch_checked(DataLoader *loader, char *err, size_t err_len) {
    if (loader->current_sample_idx >= loader->shard_num_samples &&
        dataloader_advance_(loader, err, err_len) != 0)
        return -1;
    if (dataloader_load_batch_checked(loader, err, err_len) != 0) return -1;
    loader->current_sample_idx++;
    return 0;
}

static inline void dataloader_exit_on_error_(int rc, const char *err) {
    if (rc != 0) {
        fprintf(stderr, "Error: %s\n", err);
        exit(EXIT_FAILURE);
    }
}

static inline void dataloader_next_batch(DataLoader *loader) {
    char err[1024];
    dataloader_exit_on_error_(dataloader_next_batch_checked(loader, err, sizeof(err)), err);
}

static inline void dataloader_reset(DataLoader *loader) {
    char err[1024];
    dataloader_exit_on_error_(dataloader_reset_checked(loader, err, sizeof(err)), err);
}

static inline void dataloader_resume(DataLoader *loader, size_t shard_idx, size_t sample_idx) {
    char err[1024];
    dataloader_exit_on_error_(dataloader_resume_checked(loader, shard_idx, sample_idx, err, sizeof(err)), err);
}

// ----------------------------------------------------------------------------
// resume state

static inline void dataloader_state_free(DataLoaderState *st) {
    free(st->shard_indices);
    free(st->intra_shard_indices);
    memset(st, 0, sizeof(*st));
}

// Copies the loader's position and shuffle state (the arrays are malloc'd: free with
// dataloader_state_free). 0 on success, -1 when out of memory.
static inline int dataloader_get_state(const DataLoader *loader, DataLoaderState *st) {
    memset(st, 0, sizeof(*st));
    st->shard_idx = loader->current_shard_idx;
    st->sample_idx = loader->current_sample_idx;
    st->should_shuffle = loader->should_shuffle;
    if (!loader->should_shuffle) return 0;
    st->num_shards = loader->num_shards;
    st->shard_num_samples = loader->shard_num_samples;
    st->shard_indices = (int *)malloc(st->num_shards * sizeof(int));
    st->intra_shard_indices = (int *)malloc((st->shard_num_samples ? st->shard_num_samples : 1) * sizeof(int));
    if (st->shard_indices == NULL || st->intra_shard_indices == NULL) {
        dataloader_state_free(st);
        return -1;
    }
    memcpy(st->shard_indices, loader->shard_indices, st->num_shards * sizeof(int));
    memcpy(st->intra_shard_indices, loader->intra_shard_indices, st->shard_num_samples * sizeof(int));
    st->shuffle_rng = loader->shuffle_rng;
    return 0;
}

// 1 if p[0..n) holds each of 0..n-1 exactly once
static inline int dataloader_is_permutation_(const int *p, size_t n) {
    unsigned char *seen = (unsigned char *)calloc(n ? n : 1, 1);
    if (seen == NULL) return 0;
    int ok = 1;
    for (size_t i = 0; i < n && ok; i++) {
        if (p[i] < 0 || (size_t)p[i] >= n || seen[p[i]]) ok = 0;
        else seen[p[i]] = 1;
    }
    free(seen);
    return ok;
}

// Restores a saved state into a loader made with the same shards, B, T, rank and shuffling.
static inline int dataloader_set_state_checked(DataLoader *loader, const DataLoaderState *st,
                                               char *err, size_t err_len) {
    if (st->should_shuffle != loader->should_shuffle) {
        llmc_set_error(err, err_len, "data loader state: saved with shuffling %s, the loader has it %s",
                       st->should_shuffle ? "on" : "off", loader->should_shuffle ? "on" : "off");
        return -1;
    }
    if (loader->should_shuffle) {
        if (st->num_shards != loader->num_shards) {
            llmc_set_error(err, err_len, "data loader state: saved with %zu shards, the pattern now "
                           "matches %zu", st->num_shards, loader->num_shards);
            return -1;
        }
        if (!dataloader_is_permutation_(st->shard_indices, st->num_shards)) {
            llmc_set_error(err, err_len, "data loader state: the shard order is not a permutation "
                           "of 0..%zu", st->num_shards - 1);
            return -1;
        }
        if (st->shard_idx >= loader->num_shards) {
            llmc_set_error(err, err_len, "data loader state: shard position %zu out of range (%zu "
                           "shards)", st->shard_idx, loader->num_shards);
            return -1;
        }
        memcpy(loader->shard_indices, st->shard_indices, st->num_shards * sizeof(int));
    }
    if (dataloader_resume_checked(loader, st->shard_idx, st->sample_idx, err, err_len) != 0) return -1;
    if (loader->should_shuffle) {
        if (st->shard_num_samples != loader->shard_num_samples ||
            !dataloader_is_permutation_(st->intra_shard_indices, st->shard_num_samples)) {
            llmc_set_error(err, err_len, "data loader state: the sample order (%zu samples) does not "
                           "fit shard '%s' (%zu samples)", st->shard_num_samples,
                           dataloader_shard_path(loader, st->shard_idx), loader->shard_num_samples);
            return -1;
        }
        free(loader->intra_shard_indices);
        loader->intra_shard_indices = (int *)malloc(st->shard_num_samples * sizeof(int));
        loader->intra_shard_len = 0;
        if (loader->intra_shard_indices == NULL) {
            llmc_set_error(err, err_len, "data loader state: out of memory");
            return -1;
        }
        memcpy(loader->intra_shard_indices, st->intra_shard_indices, st->shard_num_samples * sizeof(int));
        loader->intra_shard_len = st->shard_num_samples;
        loader->shuffle_rng = st->shuffle_rng;
    }
    return 0;
}

#endif // LLMC_DATALOADER_H
