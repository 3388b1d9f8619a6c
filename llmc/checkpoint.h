/*
checkpoint.h - llm.c's checkpoints: the per-rank resume state files, the DONE_ markers, and
the protocol around them (writing a checkpoint, finding the latest complete one, loading it,
clearing an older run's markers). The model file is the model family's (llmc/model.h). Host side only;
every file goes through the atomic writer of llmc/utils.h, every reader checks every header
field and the exact file size and names the file in its error.

Resume state file state_%08d_%05d.bin (llm.c save_state), one per rank:
    int32 header[256]: [0] = 20240527, [1] = 1, [2] = num_processes, [3] = process_rank,
        [4] = use_master_weights, [5] = should_shuffle, [6] = ZeRO stage, [7] = the moments'
        precision (ours, slots llm.c leaves 0 and does not read: [7] is 1 when m and v hold
        bf16 values, the trainer's -bm 1, 0 for fp32), [10] = step,
        [20:22] = u64 rng_state, [22:24] = u64 rng_state_last_update,
        [30:32] = u64 current shard idx, [32:34] = u64 current sample idx, the rest 0
    fp32 m[P], fp32 v[P], fp32 master_weights[P] (only if use_master_weights)
    if should_shuffle: u64 num_shards, int32 shard_indices[num_shards],
        u64 shard_num_samples, int32 intra_shard_indices[shard_num_samples],
        the shuffle generator (llm.c's mt19937_state, 2520 bytes, see llmc/rand.h)
  P (this rank's share of the optimizer state: num_parameters, or with ZeRO-1 the real
  elements of the rank's slice of the flat vector, llmc/zero.h) is not in the header; the
  reader is given it and checks the file size against it. Checked: magic, version,
  0 <= rank < num_processes, the 0/1 flags, the ZeRO stage 0 or 1, step >= 0, the shuffle
  section's sizes, the generator, and the exact file size. A ZeRO-1 state is ours: llm.c
  cuts each tensor into nproc parts instead, so its ZeRO-1 files hold another layout.
  m and v are fp32 in the file whatever the trainer keeps: bf16 moments (-bm 1) are written
  widened (exact) with header[7] = 1, every value then checked on writing and on reading to be
  a bf16 value (a file that says so and holds another is corrupt: refused), so that resuming
  them gives back exactly the bf16 moments of the run: bitwise resume.

A checkpoint of step s in a directory: model_%08d.bin (rank 0), any extra files of rank 0 (the
write's extra hook: the trainer's -hf 1 writes the Hugging Face directory hf_%08d there,
llmc/hf_model.h), state_%08d_%05d.bin (every rank), then an empty DONE_%08d (rank 0) once all of
them are written, so a complete checkpoint has its extras too. Resume reads only the model and
state files. It resumes only with the
process count and ZeRO stage that wrote it (each state file holds one rank's share and data
position): another count or stage is an error naming both, never a fresh start. checkpoint_find_latest()
takes the highest step whose DONE_ marker and files are all present; names that are not
exactly "DONE_" + digits (such as a left-over "DONE_00000020.tmp") are ignored.

The moments' precision may differ between the checkpoint and the run resuming it: the layout
is the same, and both ways are well defined, so checkpoint_moments_for_run converts rather than
refuses (a run moving to a smaller GPU with -bm 1, or back to fp32 moments, does so on
purpose) and says so in a note that the trainer prints once: fp32 moments resumed with -bm 1
are rounded to the nearest bf16 (how many values changed), bf16 moments resumed with -bm 0
continue in fp32 (exact). Only the bitwise continuation of the checkpoint's own setting is
lost, which the note names.

Why the marker comes off first (checkpoint_write_checked): a step can be written twice (a run
resumed from an earlier step passes it again). Were the old marker left in place, a crash
between the new model file and the new state file would leave a "complete" checkpoint of a new
model and an old optimizer state. So the marker is removed before any file is replaced, and
written again only after every file is; at every point in between the step is incomplete and
resume takes the one before. For the same reason a run clears the markers of steps after its
start (checkpoint_clear_stale): they belong to an older run in the same directory.
*/
#ifndef LLMC_CHECKPOINT_H
#define LLMC_CHECKPOINT_H

#include "utils.h"  // first: it sets the POSIX feature macros

#include <dirent.h>
#include <limits.h>
#include <sys/stat.h>

#include "bf16.h"
#include "dataloader.h"
#include "model.h"
#include "rand.h"
#include "zero.h"

#define STATE_MAGIC 20240527
#define STATE_VERSION 1
#define STATE_HEADER_BYTES 1024

// every checkpoint path (with its ".tmp") must fit; checkpoint_dir_check says so up front
#define CHECKPOINT_PATH_MAX 4096

// ----------------------------------------------------------------------------
// resume state file

typedef struct {
    int num_processes, process_rank;
    int use_master_weights;
    int zero_stage;            // 0: m, v, master of every parameter; 1: of this rank's slice
    int bf16_moments;          // header[7]: 1 when m and v hold bf16 values (-bm 1), widened here
    int step;
    uint64_t rng_state, rng_state_last_update;
    size_t num_parameters;     // floats in each of m, v and master_weights (this rank's share)
    float *m, *v;
    float *master_weights;     // NULL unless use_master_weights
    DataLoaderState loader;    // position always; orders and generator when should_shuffle
} TrainingState;

// Frees what state_read_checked allocated.
static inline void state_free(TrainingState *st) {
    free(st->m);
    free(st->v);
    free(st->master_weights);
    dataloader_state_free(&st->loader);
    memset(st, 0, sizeof(*st));
}

// The index of the first of x[0..n) that is not a bf16 value (its low 16 bits not 0), or n.
static inline size_t state_first_not_bf16_(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof(u));
        if ((u & 0xffffu) != 0) return i;
    }
    return n;
}

// With bf16 moments: 0 when every value of m and v is a bf16 value, else -1 with a message
// naming path, the buffer, the index and the value (what), e.g. "a corrupt file?".
static inline int state_check_bf16_moments_(const TrainingState *st, const char *path, const char *what, char *err,
                                            size_t err_len) {
    if (!st->bf16_moments) return 0;
    for (int b = 0; b < 2; b++) {
        const float *x = b == 0 ? st->m : st->v;
        const size_t i = state_first_not_bf16_(x, st->num_parameters);
        if (i < st->num_parameters) {
            uint32_t u;
            memcpy(&u, &x[i], sizeof(u));
            llmc_set_error(err, err_len, "state file '%s': the moments are marked bf16 (header[7] = 1), and %s[%zu] "
                           "= %.9g (bits 0x%08x) is not a bf16 value (%s)", path, b == 0 ? "m" : "v", i,
                           (double)x[i], (unsigned)u, what);
            return -1;
        }
    }
    return 0;
}

static inline int state_write_checked(const char *path, const TrainingState *st, int sync, char *err,
                                      size_t err_len) {
    const DataLoaderState *ls = &st->loader;
    if (st->num_processes < 1 || st->process_rank < 0 || st->process_rank >= st->num_processes ||
        st->step < 0 || (st->use_master_weights != 0 && st->use_master_weights != 1) ||
        (ls->should_shuffle != 0 && ls->should_shuffle != 1) || (st->zero_stage != 0 && st->zero_stage != 1) ||
        (st->bf16_moments != 0 && st->bf16_moments != 1)) {
        llmc_set_error(err, err_len, "state file '%s': bad fields num_processes=%d process_rank=%d "
                       "step=%d use_master_weights=%d should_shuffle=%d zero_stage=%d bf16_moments=%d", path,
                       st->num_processes, st->process_rank, st->step, st->use_master_weights, ls->should_shuffle,
                       st->zero_stage, st->bf16_moments);
        return -1;
    }
    if ((st->num_parameters > 0 && (st->m == NULL || st->v == NULL ||
                                    (st->use_master_weights && st->master_weights == NULL))) ||
        (ls->should_shuffle && (ls->shard_indices == NULL || ls->intra_shard_indices == NULL ||
                                ls->num_shards < 1 || ls->num_shards > (size_t)INT_MAX ||
                                ls->shard_num_samples > (size_t)INT_MAX))) {
        llmc_set_error(err, err_len, "state file '%s': missing buffers or bad shuffle sizes", path);
        return -1;
    }
    if (state_check_bf16_moments_(st, path, "not written", err, err_len) != 0) return -1;
    int32_t header[STATE_HEADER_BYTES / 4];
    memset(header, 0, sizeof(header));
    header[0] = STATE_MAGIC;
    header[1] = STATE_VERSION;
    header[2] = st->num_processes;
    header[3] = st->process_rank;
    header[4] = st->use_master_weights;
    header[5] = ls->should_shuffle;
    header[6] = st->zero_stage;
    header[7] = st->bf16_moments;
    header[10] = st->step;
    uint64_t shard_idx = ls->shard_idx, sample_idx = ls->sample_idx;
    memcpy(&header[20], &st->rng_state, 8);
    memcpy(&header[22], &st->rng_state_last_update, 8);
    memcpy(&header[30], &shard_idx, 8);
    memcpy(&header[32], &sample_idx, 8);
    AtomicFile af;
    if (atomic_file_open(&af, path, sync) != 0) {
        llmc_set_error(err, err_len, "%s", af.err);
        return -1;
    }
    size_t nbytes = st->num_parameters * sizeof(float);
    atomic_file_write(&af, header, sizeof(header));
    atomic_file_write(&af, st->m, nbytes);
    atomic_file_write(&af, st->v, nbytes);
    if (st->use_master_weights) atomic_file_write(&af, st->master_weights, nbytes);
    if (ls->should_shuffle) {
        uint64_t num_shards = ls->num_shards, shard_num_samples = ls->shard_num_samples;
        unsigned char rng_bytes[MT19937_SERIALIZED_BYTES];
        mt19937_serialize(&ls->shuffle_rng, rng_bytes);
        atomic_file_write(&af, &num_shards, 8);
        atomic_file_write(&af, ls->shard_indices, ls->num_shards * sizeof(int32_t));
        atomic_file_write(&af, &shard_num_samples, 8);
        atomic_file_write(&af, ls->intra_shard_indices, ls->shard_num_samples * sizeof(int32_t));
        atomic_file_write(&af, rng_bytes, sizeof(rng_bytes));
    }
    if (atomic_file_commit(&af) != 0) {
        llmc_set_error(err, err_len, "%s", af.err);
        return -1;
    }
    return 0;
}

// The header's fields into st (no buffers): 0, or -1 with a message naming path.
static inline int state_parse_header_(const int32_t *header, const char *path, TrainingState *st, char *err,
                                      size_t err_len) {
    if (header[0] != STATE_MAGIC) {
        llmc_set_error(err, err_len, "state file '%s': bad magic %d (expected %d)", path, (int)header[0], STATE_MAGIC);
        return -1;
    }
    if (header[1] != STATE_VERSION) {
        llmc_set_error(err, err_len, "state file '%s': bad version %d (expected %d)", path, (int)header[1], STATE_VERSION);
        return -1;
    }
    st->num_processes = header[2];
    st->process_rank = header[3];
    st->use_master_weights = header[4];
    st->loader.should_shuffle = header[5];
    st->zero_stage = header[6];
    st->bf16_moments = header[7];
    st->step = header[10];
    if (st->num_processes < 1 || st->process_rank < 0 || st->process_rank >= st->num_processes) {
        llmc_set_error(err, err_len, "state file '%s': bad process_rank %d / num_processes %d", path,
                       st->process_rank, st->num_processes);
        return -1;
    }
    if ((st->use_master_weights != 0 && st->use_master_weights != 1) ||
        (st->loader.should_shuffle != 0 && st->loader.should_shuffle != 1)) {
        llmc_set_error(err, err_len, "state file '%s': bad flags use_master_weights=%d should_shuffle=%d (must be 0 or 1)",
                       path, st->use_master_weights, st->loader.should_shuffle);
        return -1;
    }
    if (st->zero_stage != 0 && st->zero_stage != 1) {
        llmc_set_error(err, err_len, "state file '%s': bad ZeRO stage %d (0 or 1)", path, st->zero_stage);
        return -1;
    }
    if (st->bf16_moments != 0 && st->bf16_moments != 1) {
        llmc_set_error(err, err_len, "state file '%s': bad moment precision %d in header[7] (0 fp32, 1 bf16)", path,
                       st->bf16_moments);
        return -1;
    }
    if (st->step < 0) {
        llmc_set_error(err, err_len, "state file '%s': bad step %d", path, st->step);
        return -1;
    }
    uint64_t shard_idx, sample_idx;
    memcpy(&st->rng_state, &header[20], 8);
    memcpy(&st->rng_state_last_update, &header[22], 8);
    memcpy(&shard_idx, &header[30], 8);
    memcpy(&sample_idx, &header[32], 8);
    if (shard_idx > (uint64_t)INT_MAX || sample_idx > (uint64_t)INT_MAX) {
        llmc_set_error(err, err_len, "state file '%s': bad data position shard %llu sample %llu", path,
                       (unsigned long long)shard_idx, (unsigned long long)sample_idx);
        return -1;
    }
    st->loader.shard_idx = (size_t)shard_idx;
    st->loader.sample_idx = (size_t)sample_idx;
    return 0;
}

// The header at the start of fp (the file path, named in messages) and the file's size. 0, or -1.
static inline int state_read_header_(FILE *fp, const char *path, int32_t *header, int64_t *file_bytes, char *err,
                                     size_t err_len) {
    *file_bytes = 0;
    if (llmc_file_size(fp, file_bytes) != 0 || *file_bytes < STATE_HEADER_BYTES ||
        llmc_read_exact(fp, header, STATE_HEADER_BYTES) != 0) {
        llmc_set_error(err, err_len, "state file '%s': truncated header (file is %lld bytes, the "
                       "header alone is %d)", path, (long long)*file_bytes, STATE_HEADER_BYTES);
        return -1;
    }
    return 0;
}

// The header of a state file alone (st's fields; no buffers to free): who wrote it, with which
// ZeRO stage, at which step. 0, or -1 with a message.
static inline int state_peek_checked(const char *path, TrainingState *st, char *err, size_t err_len) {
    memset(st, 0, sizeof(*st));
    FILE *fp = llmc_fopen_read_checked(path, "state file", err, err_len);
    if (fp == NULL) return -1;
    int32_t header[STATE_HEADER_BYTES / 4];
    int64_t file_bytes = 0;
    const int rc = state_read_header_(fp, path, header, &file_bytes, err, err_len) == 0 &&
                   state_parse_header_(header, path, st, err, err_len) == 0 ? 0 : -1;
    fclose(fp);
    if (rc != 0) memset(st, 0, sizeof(*st));
    return rc;
}

// Reads a state file whose m/v/master buffers hold num_parameters floats each.
static inline int state_read_checked(const char *path, size_t num_parameters, TrainingState *st,
                                     char *err, size_t err_len) {
    memset(st, 0, sizeof(*st));
    FILE *fp = llmc_fopen_read_checked(path, "state file", err, err_len);
    if (fp == NULL) return -1;
    int32_t header[STATE_HEADER_BYTES / 4];
    int64_t file_bytes = 0;
    if (state_read_header_(fp, path, header, &file_bytes, err, err_len) != 0 ||
        state_parse_header_(header, path, st, err, err_len) != 0) {
        fclose(fp);
        memset(st, 0, sizeof(*st));
        return -1;
    }
#define STATE_FAIL_(...) do { llmc_set_error(err, err_len, __VA_ARGS__); fclose(fp); state_free(st); return -1; } while (0)

    // sizes before allocating: the optimizer buffers, then the shuffle section
    int nbuf = st->use_master_weights ? 3 : 2;
    uint64_t buffer_bytes;
    if (llmc_mul_u64((uint64_t)num_parameters, 4 * (uint64_t)nbuf, &buffer_bytes) != 0 ||
        buffer_bytes > (uint64_t)(file_bytes - STATE_HEADER_BYTES))
        STATE_FAIL_("state file '%s': file is %lld bytes, too short for %d buffers of %zu floats "
                    "(truncated, or a different model / process count?)", path,
                    (long long)file_bytes, nbuf, num_parameters);
    int64_t rest = file_bytes - STATE_HEADER_BYTES - (int64_t)buffer_bytes;
    if (!st->loader.should_shuffle && rest != 0)
        STATE_FAIL_("state file '%s': file is %lld bytes but %d buffers of %zu floats need %lld "
                    "(%s)", path, (long long)file_bytes, nbuf, num_parameters,
                    (long long)(file_bytes - rest), rest < 0 ? "truncated" : "trailing bytes");
    st->num_parameters = num_parameters;
    size_t nbytes = num_parameters * sizeof(float);
    st->m = (float *)malloc(nbytes ? nbytes : 1);
    st->v = (float *)malloc(nbytes ? nbytes : 1);
    if (st->use_master_weights) st->master_weights = (float *)malloc(nbytes ? nbytes : 1);
    if (st->m == NULL || st->v == NULL || (st->use_master_weights && st->master_weights == NULL))
        STATE_FAIL_("state file '%s': out of memory for %zu floats", path, num_parameters);
    if (llmc_read_exact(fp, st->m, nbytes) != 0 || llmc_read_exact(fp, st->v, nbytes) != 0 ||
        (st->use_master_weights && llmc_read_exact(fp, st->master_weights, nbytes) != 0))
        STATE_FAIL_("state file '%s': read error in the optimizer state", path);
    if (state_check_bf16_moments_(st, path, "a corrupt file?", err, err_len) != 0) {
        fclose(fp);
        state_free(st);
        return -1;
    }

    if (st->loader.should_shuffle) {
        DataLoaderState *ls = &st->loader;
        uint64_t num_shards = 0, shard_num_samples = 0;
        unsigned char rng_bytes[MT19937_SERIALIZED_BYTES];
        if (rest < 8 || llmc_read_exact(fp, &num_shards, 8) != 0 || num_shards < 1 ||
            num_shards > (uint64_t)INT_MAX || (int64_t)(8 + 4 * num_shards + 8) > rest)
            STATE_FAIL_("state file '%s': bad or truncated shuffle section (num_shards %llu, %lld "
                        "bytes left)", path, (unsigned long long)num_shards, (long long)rest);
        rest -= 8 + 4 * (int64_t)num_shards;
        ls->num_shards = (size_t)num_shards;
        ls->shard_indices = (int *)malloc(ls->num_shards * sizeof(int));
        if (ls->shard_indices == NULL) STATE_FAIL_("state file '%s': out of memory", path);
        if (llmc_read_exact(fp, ls->shard_indices, ls->num_shards * sizeof(int32_t)) != 0 ||
            llmc_read_exact(fp, &shard_num_samples, 8) != 0 || shard_num_samples < 1 ||
            shard_num_samples > (uint64_t)INT_MAX)
            STATE_FAIL_("state file '%s': bad or truncated shuffle section (shard_num_samples %llu)",
                        path, (unsigned long long)shard_num_samples);
        rest -= 8;
        int64_t expected_rest = 4 * (int64_t)shard_num_samples + MT19937_SERIALIZED_BYTES;
        if (rest != expected_rest)
            STATE_FAIL_("state file '%s': the shuffle section needs %lld more bytes for %llu samples "
                        "and the generator, the file has %lld (%s)", path, (long long)expected_rest,
                        (unsigned long long)shard_num_samples, (long long)rest,
                        rest < expected_rest ? "truncated" : "trailing bytes");
        ls->shard_num_samples = (size_t)shard_num_samples;
        ls->intra_shard_indices = (int *)malloc(ls->shard_num_samples * sizeof(int));
        if (ls->intra_shard_indices == NULL) STATE_FAIL_("state file '%s': out of memory", path);
        if (llmc_read_exact(fp, ls->intra_shard_indices, ls->shard_num_samples * sizeof(int32_t)) != 0 ||
            llmc_read_exact(fp, rng_bytes, sizeof(rng_bytes)) != 0)
            STATE_FAIL_("state file '%s': read error in the shuffle section", path);
        if (!dataloader_is_permutation_(ls->shard_indices, ls->num_shards) ||
            !dataloader_is_permutation_(ls->intra_shard_indices, ls->shard_num_samples))
            STATE_FAIL_("state file '%s': the saved shard or sample order is not a permutation", path);
        if (ls->shard_idx >= ls->num_shards || ls->sample_idx > ls->shard_num_samples)
            STATE_FAIL_("state file '%s': data position shard %zu sample %zu outside %zu shards / %zu "
                        "samples", path, ls->shard_idx, ls->sample_idx, ls->num_shards,
                        ls->shard_num_samples);
        if (mt19937_deserialize(&ls->shuffle_rng, rng_bytes) != 0)
            STATE_FAIL_("state file '%s': the saved shuffle generator is invalid", path);
    }
#undef STATE_FAIL_
    fclose(fp);
    return 0;
}

// ----------------------------------------------------------------------------
// checkpoint directory: file names, DONE markers, latest complete step, deletion

// snprintf into buf; 0, or -1 if it did not fit
static inline int checkpoint_model_path(char *buf, size_t len, const char *dir, int step) {
    int n = snprintf(buf, len, "%s/model_%08d.bin", dir, step);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

static inline int checkpoint_state_path(char *buf, size_t len, const char *dir, int step, int rank) {
    int n = snprintf(buf, len, "%s/state_%08d_%05d.bin", dir, step, rank);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

static inline int checkpoint_done_path(char *buf, size_t len, const char *dir, int step) {
    int n = snprintf(buf, len, "%s/DONE_%08d", dir, step);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

// 0 if every checkpoint file name in dir fits CHECKPOINT_PATH_MAX (checked once, up front, so
// that no write can fail on a long name after hours of training); -1 with a message.
static inline int checkpoint_dir_check(const char *dir, int num_processes, char *err, size_t err_len) {
    char path[CHECKPOINT_PATH_MAX];
    // the longest: the last rank's state file at the largest step, as a temporary (".tmp")
    if (dir[0] == 0 || checkpoint_state_path(path, sizeof(path) - 4, dir, INT_MAX, num_processes - 1) != 0) {
        llmc_set_error(err, err_len, "output directory '%.64s%s' (%zu characters): checkpoint file names "
                       "in it would not fit %d bytes", dir, strlen(dir) > 64 ? "..." : "", strlen(dir),
                       CHECKPOINT_PATH_MAX);
        return -1;
    }
    return 0;
}

// Creates dir (one level, as llm.c does) when it is missing; 0 when it is a directory in which
// every checkpoint name fits, -1 with a message.
static inline int checkpoint_dir_prepare(const char *dir, int num_processes, char *err, size_t err_len) {
    if (checkpoint_dir_check(dir, num_processes, err, err_len) != 0) return -1;
    struct stat sb;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        llmc_set_error(err, err_len, "cannot create the output directory '%s': %s", dir, strerror(errno));
        return -1;
    }
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        llmc_set_error(err, err_len, "output directory '%s' is not a directory", dir);
        return -1;
    }
    return 0;
}

// Writes the empty DONE_%08d marker (atomically): call after every file of the step exists.
static inline int done_marker_write_checked(const char *dir, int step, int sync, char *err, size_t err_len) {
    char path[CHECKPOINT_PATH_MAX];
    if (step < 0 || checkpoint_done_path(path, sizeof(path), dir, step) != 0) {
        llmc_set_error(err, err_len, "bad DONE marker step %d or directory too long", step);
        return -1;
    }
    return atomic_write_file(path, "", 0, sync, err, err_len);
}

// The step of a marker name "DONE_<digits>", or -1 for any other name.
static inline int checkpoint_parse_done_name(const char *name) {
    if (strncmp(name, "DONE_", 5) != 0 || name[5] == 0) return -1;
    long long step = 0;
    for (const char *p = name + 5; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        step = step * 10 + (*p - '0');
        if (step > INT_MAX) return -1;
    }
    return (int)step;
}

// Highest step with a DONE_ marker in dir (llm.c's find_max_step), or -1.
static inline int find_max_step(const char *dir) {
    if (dir == NULL) return -1;
    DIR *d = opendir(dir);
    if (d == NULL) return -1;
    int max_step = -1;
    struct dirent *entry;
    while ((entry = readdir(d)) != NULL) {
        int step = checkpoint_parse_done_name(entry->d_name);
        if (step > max_step) max_step = step;
    }
    closedir(d);
    return max_step;
}

static inline int checkpoint_file_exists_(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

// 1 if step's DONE marker, model file and the state files of ranks 0..num_processes-1 all
// exist (num_processes = 0: marker and model only, e.g. without a shared filesystem);
// otherwise 0 with the first missing file in err.
static inline int checkpoint_is_complete(const char *dir, int step, int num_processes, char *err,
                                         size_t err_len) {
    char path[CHECKPOINT_PATH_MAX];
    if (checkpoint_done_path(path, sizeof(path), dir, step) != 0 || !checkpoint_file_exists_(path) ||
        checkpoint_model_path(path, sizeof(path), dir, step) != 0 || !checkpoint_file_exists_(path)) {
        llmc_set_error(err, err_len, "checkpoint %d in '%s': missing '%s'", step, dir, path);
        return 0;
    }
    for (int r = 0; r < num_processes; r++) {
        if (checkpoint_state_path(path, sizeof(path), dir, step, r) != 0 || !checkpoint_file_exists_(path)) {
            llmc_set_error(err, err_len, "checkpoint %d in '%s': missing '%s'", step, dir, path);
            return 0;
        }
    }
    return 1;
}

// The highest step that checkpoint_is_complete, or -1 (err says why: no directory, no
// markers, or the newest marker's missing file).
static inline int checkpoint_find_latest(const char *dir, int num_processes, char *err, size_t err_len) {
    DIR *d = dir != NULL ? opendir(dir) : NULL;
    if (d == NULL) {
        llmc_set_error(err, err_len, "cannot open checkpoint directory '%s'", dir ? dir : "(null)");
        return -1;
    }
    // collect the marker steps, then try them from the newest down
    size_t n = 0, cap = 16;
    int *steps = (int *)malloc(cap * sizeof(int));
    struct dirent *entry;
    while (steps != NULL && (entry = readdir(d)) != NULL) {
        int step = checkpoint_parse_done_name(entry->d_name);
        if (step < 0) continue;
        if (n == cap) {
            int *grown = (int *)realloc(steps, 2 * cap * sizeof(int));
            if (grown == NULL) { free(steps); steps = NULL; break; }
            steps = grown;
            cap *= 2;
        }
        steps[n++] = step;
    }
    closedir(d);
    if (steps == NULL) {
        llmc_set_error(err, err_len, "out of memory scanning '%s'", dir);
        return -1;
    }
    int latest = -1;
    char first_problem[1024] = "";
    while (n > 0 && latest < 0) {
        size_t best = 0;
        for (size_t i = 1; i < n; i++) if (steps[i] > steps[best]) best = i;
        char why[1024];
        if (checkpoint_is_complete(dir, steps[best], num_processes, why, sizeof(why)))
            latest = steps[best];
        else if (first_problem[0] == 0)
            llmc_set_error(first_problem, sizeof(first_problem), "%s", why);
        steps[best] = steps[--n];
    }
    free(steps);
    if (latest < 0)
        llmc_set_error(err, err_len, "no complete checkpoint in '%s'%s%s", dir,
                       first_problem[0] ? ": " : " (no DONE_ markers)", first_problem);
    else if (first_problem[0])
        llmc_set_error(err, err_len, "skipped an incomplete newer checkpoint: %s", first_problem);
    else
        llmc_set_error(err, err_len, "%s", "");
    return latest;
}

// Removes a checkpoint, DONE marker first so that a half-deleted one is never "complete".
// Missing files are fine; returns 0, or -1 if a file exists but cannot be removed.
static inline int checkpoint_delete(const char *dir, int step, int num_processes, char *err,
                                    size_t err_len) {
    char path[CHECKPOINT_PATH_MAX];
    int rc = 0;
    for (int k = -2; k < num_processes; k++) {
        int bad = k == -2 ? checkpoint_done_path(path, sizeof(path), dir, step)
                : k == -1 ? checkpoint_model_path(path, sizeof(path), dir, step)
                          : checkpoint_state_path(path, sizeof(path), dir, step, k);
        if (bad != 0) continue;
        if (remove(path) != 0 && errno != ENOENT) {
            llmc_set_error(err, err_len, "cannot remove '%s': %s", path, strerror(errno));
            rc = -1;
        }
    }
    return rc;
}

// ----------------------------------------------------------------------------
// the protocol: stale markers, writing, loading

// 1 for the temporary of a checkpoint file ("model_", "state_" or "DONE_" ... ".tmp"), which a
// write that died leaves behind
static inline int checkpoint_is_tmp_name_(const char *name) {
    const size_t n = strlen(name);
    return n > 4 && strcmp(name + n - 4, ".tmp") == 0 &&
           (strncmp(name, "model_", 6) == 0 || strncmp(name, "state_", 6) == 0 || strncmp(name, "DONE_", 5) == 0);
}

// 1 for what an interrupted Hugging Face directory write leaves (llmc/hf_model.h): a directory
// "hf_<digits>.tmp-<pid>" or "hf_<digits>.old-<pid>"
static inline int checkpoint_is_hf_tmp_name_(const char *name) {
    if (strncmp(name, "hf_", 3) != 0) return 0;
    const char *p = name + 3;
    while (*p >= '0' && *p <= '9') p++;
    if (p == name + 3 || (strncmp(p, ".tmp-", 5) != 0 && strncmp(p, ".old-", 5) != 0) || p[5] == 0) return 0;
    for (p += 5; *p; p++)
        if (*p < '0' || *p > '9') return 0;
    return 1;
}

// Removes a directory of files (no subdirectories); 0, or -1
static inline int checkpoint_remove_flat_dir_(const char *dir) {
    DIR *d = opendir(dir);
    if (d == NULL) return -1;
    struct dirent *e;
    char path[CHECKPOINT_PATH_MAX];
    int rc = 0;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        const int n = snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (n < 0 || (size_t)n >= sizeof(path) || unlink(path) != 0) rc = -1;
    }
    closedir(d);
    return rc == 0 && rmdir(dir) == 0 ? 0 : -1;
}

// Readies dir for a run that starts after step after_step (-1: a fresh run): removes the
// DONE_ markers of later steps, which an older run left (resume would otherwise pick its
// checkpoints up), and the temporaries of interrupted writes (files, and the Hugging Face
// writer's .tmp-/.old- directories). Model and state files and hf_ directories stay: no
// marker, no resume. Returns how many markers it removed, or -1.
static inline int checkpoint_clear_stale(const char *dir, int after_step, char *err, size_t err_len) {
    DIR *d = opendir(dir);
    if (d == NULL) {
        llmc_set_error(err, err_len, "cannot open checkpoint directory '%s': %s", dir, strerror(errno));
        return -1;
    }
    int removed = 0, rc = 0;
    struct dirent *entry;
    char path[CHECKPOINT_PATH_MAX];
    while ((entry = readdir(d)) != NULL) {
        const int step = checkpoint_parse_done_name(entry->d_name);
        const int hf_tmp = checkpoint_is_hf_tmp_name_(entry->d_name);
        if (step <= after_step && !checkpoint_is_tmp_name_(entry->d_name) && !hf_tmp) continue;
        int n = snprintf(path, sizeof(path), "%s/%s", dir, entry->d_name);
        if (n < 0 || (size_t)n >= sizeof(path) ||
            (hf_tmp ? checkpoint_remove_flat_dir_(path) != 0 : (remove(path) != 0 && errno != ENOENT))) {
            llmc_set_error(err, err_len, "cannot remove '%s/%s': %s", dir, entry->d_name, strerror(errno));
            rc = -1;
            break;
        }
        removed += step > after_step;
    }
    closedir(d);
    if (rc == 0 && removed > 0 && llmc_fsync_dir(dir) != 0) {
        llmc_set_error(err, err_len, "fsync of '%s' failed: %s", dir, strerror(errno));
        rc = -1;
    }
    return rc == 0 ? removed : -1;
}

// One rank's part of writing a checkpoint (checkpoint_write_checked).
typedef struct CheckpointWrite CheckpointWrite;
struct CheckpointWrite {
    const char *dir;
    const ModelSpec *model;       // rank 0: the model, whose family writes its file
    const uint16_t *params;       // rank 0: the bf16 parameters
    const TrainingState *state;   // this rank's state file: its step, rank and process count
    int sync;                     // fsync files and directory: durable against a power cut
    void (*barrier)(void *ctx);   // returns when every rank has called it (NULL: one process)
    void *barrier_ctx;
    int stop_after;               // tests: stop after this stage, as a crash would (0: never)
    // rank 0: more files of the step, written after the model file and before the marker (the
    // trainer's Hugging Face directory); 0, or -1 with a message. NULL: none
    int (*extra)(const CheckpointWrite *w, char *err, size_t err_len);
    const void *extra_ctx;        // the hook's own (NULL if it needs none)
};

// the stages of a write, in order
enum { CHECKPOINT_UNMARKED = 1, CHECKPOINT_MODEL_WRITTEN, CHECKPOINT_STATE_WRITTEN, CHECKPOINT_MARKED };

// Writes the checkpoint of w->state->step (see the top of this file for the order). 0 when it
// is complete, 1 when stopped by stop_after, -1 with a message.
static inline int checkpoint_write_checked(const CheckpointWrite *w, char *err, size_t err_len) {
    const TrainingState *st = w->state;
    const int rank = st->process_rank;
    char path[CHECKPOINT_PATH_MAX];
    if (checkpoint_dir_check(w->dir, st->num_processes, err, err_len) != 0) return -1;
    if (rank == 0) {
        checkpoint_done_path(path, sizeof(path), w->dir, st->step);
        if (remove(path) != 0 && errno != ENOENT) {
            llmc_set_error(err, err_len, "cannot remove '%s': %s", path, strerror(errno));
            return -1;
        }
        if (w->sync && llmc_fsync_dir(w->dir) != 0) {
            llmc_set_error(err, err_len, "fsync of '%s' failed: %s", w->dir, strerror(errno));
            return -1;
        }
    }
    if (w->stop_after == CHECKPOINT_UNMARKED) return 1;
    if (w->barrier) w->barrier(w->barrier_ctx);  // no rank replaces a file under the old marker
    if (rank == 0) {
        checkpoint_model_path(path, sizeof(path), w->dir, st->step);
        if (w->model->family->write_file(path, w->model, w->params, w->sync, err, err_len) != 0) return -1;
        if (w->extra != NULL && w->extra(w, err, err_len) != 0) return -1;
    }
    if (w->stop_after == CHECKPOINT_MODEL_WRITTEN) return 1;
    checkpoint_state_path(path, sizeof(path), w->dir, st->step, rank);
    if (state_write_checked(path, st, w->sync, err, err_len) != 0) return -1;
    if (w->stop_after == CHECKPOINT_STATE_WRITTEN) return 1;
    if (w->barrier) w->barrier(w->barrier_ctx);  // every rank's files are in place
    if (rank == 0 && done_marker_write_checked(w->dir, st->step, w->sync, err, err_len) != 0) return -1;
    return w->stop_after == CHECKPOINT_MARKED ? 1 : 0;
}

// A checkpoint loaded for one rank.
typedef struct {
    int step;
    size_t num_parameters;
    ZeroLayout zero;        // this rank's share: master, state.m and state.v hold zero.opt_count
                            // floats, those of parameters [zero.opt_lo, zero.opt_lo + opt_count)
    uint16_t *params;       // the model file's bf16 parameters (all of them)
    float *master;          // fp32 master weights (the share): the state file's or, for a state
                            // written without them (llm.c -w 0), the parameters widened, so that
                            // AdamW continues from the loaded model and not from an initial one
    TrainingState state;    // this rank's m, v and data position
} Checkpoint;

static inline void checkpoint_free(Checkpoint *ck) {
    free(ck->params);
    free(ck->master);
    state_free(&ck->state);
    memset(ck, 0, sizeof(*ck));
}

// 0 when the newest checkpoint in dir that rank 0 finished (its marker, model and rank 0's state
// file; none at all is fine) was written by num_processes processes at ZeRO stage zero_stage;
// -1 with a message naming both values otherwise, or for an unreadable state header. A run
// of another shape must not skip to an older checkpoint or start fresh: it is an error.
static inline int checkpoint_check_shape(const char *dir, int num_processes, int zero_stage, char *err,
                                         size_t err_len) {
    char path[CHECKPOINT_PATH_MAX], why[1024];
    const int newest = checkpoint_find_latest(dir, 1, why, sizeof(why));
    if (newest < 0) return 0;
    checkpoint_state_path(path, sizeof(path), dir, newest, 0);
    TrainingState head;
    if (state_peek_checked(path, &head, err, err_len) != 0) return -1;
    if (head.num_processes == num_processes && head.zero_stage == zero_stage) return 0;
    char procs[256] = "", stage[256] = "";
    if (head.num_processes != num_processes)
        snprintf(procs, sizeof(procs), "written by %d process%s, this run has %d (each process resumes its own state "
                 "file: run %d)", head.num_processes, head.num_processes == 1 ? "" : "es", num_processes,
                 head.num_processes);
    if (head.zero_stage != zero_stage)
        snprintf(stage, sizeof(stage), "written with -z %d (ZeRO stage %d), this run has -z %d (the optimizer "
                 "state's layout differs: resume with -z %d)", head.zero_stage, head.zero_stage, zero_stage,
                 head.zero_stage);
    llmc_set_error(err, err_len, "cannot resume checkpoint %d in '%s': %s%s%s", newest, dir, procs,
                   procs[0] && stage[0] ? "; " : "", stage);
    return -1;
}

// Loads the latest complete checkpoint in dir for rank of num_processes at ZeRO stage
// zero_stage (the share of the optimizer state: llmc/zero.h), for the model *spec, and
// moves loader (if not NULL) to its data position. 1 when loaded, 0 when dir has none (err
// says why), -1 when it has one that does not fit this run (another model, process count or
// ZeRO stage) or a bad file.
static inline int checkpoint_load_checked(const char *dir, const ModelSpec *spec, int rank, int num_processes,
                                          int zero_stage, DataLoader *loader, Checkpoint *ck, char *err,
                                          size_t err_len) {
    memset(ck, 0, sizeof(*ck));
    char path[CHECKPOINT_PATH_MAX], why[1024];
    if (checkpoint_check_shape(dir, num_processes, zero_stage, err, err_len) != 0) return -1;
    const int step = checkpoint_find_latest(dir, num_processes, err, err_len);
    if (step < 0) return 0;
    ModelSpec file;
    checkpoint_model_path(path, sizeof(path), dir, step);
    if (spec->family->read_file(path, &file, &ck->params, err, err_len) != 0) return -1;
    ck->step = step;
    ck->num_parameters = file.num_parameters;
    if (model_spec_compare(&file, spec, why, sizeof(why)) != 0) {
        llmc_set_error(err, err_len, "checkpoint '%s' is another model than this run's: %s (checkpoint vs run)",
                       path, why);
        checkpoint_free(ck);
        return -1;
    }
    if (zero_layout(&ck->zero, ck->num_parameters, num_processes, rank, zero_stage, err, err_len) != 0) {
        checkpoint_free(ck);
        return -1;
    }
    const size_t share = ck->zero.opt_count;
    checkpoint_state_path(path, sizeof(path), dir, step, rank);
    if (state_read_checked(path, share, &ck->state, err, err_len) != 0) {
        checkpoint_free(ck);
        return -1;
    }
    const TrainingState *st = &ck->state;
    if (st->num_processes != num_processes || st->process_rank != rank || st->step != step ||
        st->zero_stage != zero_stage) {
        llmc_set_error(err, err_len, "state file '%s' holds step %d of rank %d of %d processes at -z %d; this is "
                       "step %d of rank %d of %d at -z %d", path, st->step, st->process_rank, st->num_processes,
                       st->zero_stage, step, rank, num_processes, zero_stage);
        checkpoint_free(ck);
        return -1;
    }
    if (st->use_master_weights) {
        ck->master = ck->state.master_weights;
        ck->state.master_weights = NULL;
    } else {
        ck->master = (float *)malloc((share ? share : 1) * sizeof(float));
        if (ck->master == NULL) {
            llmc_set_error(err, err_len, "out of host memory for %zu master weights", share);
            checkpoint_free(ck);
            return -1;
        }
        bf16_to_floats(ck->params + ck->zero.opt_lo, ck->master, share);
    }
    if (loader != NULL && dataloader_set_state_checked(loader, &st->loader, why, sizeof(why)) != 0) {
        llmc_set_error(err, err_len, "resuming the data loader from '%s': %s", path, why);
        checkpoint_free(ck);
        return -1;
    }
    return 1;
}

// A loaded checkpoint's AdamW moments for a run that keeps them in bf16 (bf16_moments 1: -bm 1)
// or in fp32 (0): ck->state.m and v become the values the run starts from, and
// ck->state.bf16_moments the run's setting. Moments of the run's own precision stay as written
// (bf16 ones are then exactly the bf16 moments of the run that wrote them). Moments of the
// other precision are converted (see the top of this file): fp32 ones rounded to the nearest
// bf16 (deterministic), bf16 ones kept as they are for fp32 (exact). Returns 1 with a note in
// note saying which and, for the rounding, how many of this rank's values it changed; 0 with
// note "" when nothing was converted.
static inline int checkpoint_moments_for_run(Checkpoint *ck, int bf16_moments, char *note, size_t note_len) {
    TrainingState *st = &ck->state;
    const int was = st->bf16_moments;
    st->bf16_moments = bf16_moments ? 1 : 0;
    llmc_set_error(note, note_len, "%s", "");
    if (was == st->bf16_moments) return 0;
    if (!st->bf16_moments) {
        llmc_set_error(note, note_len, "checkpoint %d's AdamW m, v were kept in bf16 (written with -bm 1): this run "
                       "(-bm 0) goes on with them in fp32 (exact), not bitwise as a -bm 1 run would", ck->step);
        return 1;
    }
    size_t changed = 0;
    for (int b = 0; b < 2; b++) {
        float *x = b == 0 ? st->m : st->v;
        for (size_t i = 0; i < st->num_parameters; i++) {
            const float r = float_from_bf16(bf16_from_float(x[i]));
            if (memcmp(&r, &x[i], sizeof(r)) != 0) changed++;
            x[i] = r;
        }
    }
    llmc_set_error(note, note_len, "checkpoint %d's AdamW m, v are fp32 (written without -bm 1): rounded to the "
                   "nearest bf16 for -bm 1 (%zu of this rank's %zu values changed); the run goes on with bf16 moments, "
                   "not bitwise as a -bm 0 run would", ck->step, changed, 2 * st->num_parameters);
    return 1;
}

#endif // LLMC_CHECKPOINT_H
