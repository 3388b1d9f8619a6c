/*
checkpoint.h - llm.c's checkpoint files: the GPT-2 model file, the per-rank resume state
files, the DONE_ markers, and finding the latest complete checkpoint. Host side only; every
writer goes through the atomic writer of llmc/utils.h, every reader checks every header
field and the exact file size and names the file in its error.

Model file (llm.c gpt2_write_to_checkpoint / write_model in train_gpt2.py):
    int32 header[256]: [0] = 20240326, [1] = 3 (fp32) or 5 (bf16, layernorms included),
        [2] = max_seq_len, [3] = vocab_size, [4] = num_layers, [5] = num_heads,
        [6] = channels, [7] = padded_vocab_size, the rest 0
    then the 16 parameter tensors below, contiguous, in fp32 or bf16
  Checked: magic, version, all six sizes >= 1, padded_vocab_size >= vocab_size,
  channels % num_heads == 0, file size == 1024 + num_parameters * (4 or 2).

Resume state file state_%08d_%05d.bin (llm.c save_state), one per rank:
    int32 header[256]: [0] = 20240527, [1] = 1, [2] = num_processes, [3] = process_rank,
        [4] = use_master_weights, [5] = should_shuffle, [10] = step,
        [20:22] = u64 rng_state, [22:24] = u64 rng_state_last_update,
        [30:32] = u64 current shard idx, [32:34] = u64 current sample idx, the rest 0
    fp32 m[P], fp32 v[P], fp32 master_weights[P] (only if use_master_weights)
    if should_shuffle: u64 num_shards, int32 shard_indices[num_shards],
        u64 shard_num_samples, int32 intra_shard_indices[shard_num_samples],
        the shuffle generator (llm.c's mt19937_state, 2520 bytes, see llmc/rand.h)
  P (this rank's share of the optimizer state: num_parameters, or num_parameters / nproc
  with ZeRO-1) is not in the header; the reader is given it and checks the file size
  against it. Checked: magic, version, 0 <= rank < num_processes, the 0/1 flags,
  step >= 0, the shuffle section's sizes, the generator, and the exact file size.

Markers: after model_%08d.bin (rank 0) and every rank's state file are written, rank 0
writes an empty DONE_%08d. checkpoint_find_latest() takes the highest step whose DONE_
marker and files are all present; names that are not exactly "DONE_" + digits (such as a
left-over "DONE_00000020.tmp") are ignored.
*/
#ifndef LLMC_CHECKPOINT_H
#define LLMC_CHECKPOINT_H

#include <dirent.h>
#include <limits.h>
#include <sys/stat.h>

#include "dataloader.h"
#include "rand.h"
#include "utils.h"

#define MODEL_MAGIC 20240326
#define MODEL_VERSION_FP32 3
#define MODEL_VERSION_BF16 5
#define MODEL_HEADER_INTS 256
#define MODEL_HEADER_BYTES (MODEL_HEADER_INTS * 4)
#define NUM_PARAMETER_TENSORS 16

#define STATE_MAGIC 20240527
#define STATE_VERSION 1
#define STATE_HEADER_BYTES 1024

// ----------------------------------------------------------------------------
// bf16 on the host (round to nearest even; NaN stays a quiet NaN of the same sign)

static inline uint16_t bf16_from_float(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float float_from_bf16(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static inline void floats_to_bf16(const float *in, uint16_t *out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = bf16_from_float(in[i]);
}

static inline void bf16_to_floats(const uint16_t *in, float *out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = float_from_bf16(in[i]);
}

// ----------------------------------------------------------------------------
// GPT-2 configuration and the parameter table

typedef struct {
    int max_seq_len;        // maxT
    int vocab_size;         // V
    int padded_vocab_size;  // Vp >= V (llm.c rounds up to a multiple of 128)
    int num_layers;         // L
    int num_heads;          // NH
    int channels;           // C
} GPT2Config;

typedef struct {
    const char *name;
    int ndim;
    size_t shape[3];
    size_t numel;
    size_t offset;        // elements before this tensor in the flat parameter buffer
    int weight_decay;     // llm.c's AdamW decays only the 2-D matrices
} ParameterTensor;

// Checks sizes and that the parameter count fits; 0 or -1 with a message.
static inline int gpt2_config_check(const GPT2Config *c, char *err, size_t err_len) {
    if (c->max_seq_len < 1 || c->vocab_size < 1 || c->padded_vocab_size < 1 || c->num_layers < 1 ||
        c->num_heads < 1 || c->channels < 1) {
        llmc_set_error(err, err_len, "bad sizes max_seq_len=%d vocab_size=%d padded_vocab_size=%d "
                       "num_layers=%d num_heads=%d channels=%d (all must be >= 1)", c->max_seq_len,
                       c->vocab_size, c->padded_vocab_size, c->num_layers, c->num_heads, c->channels);
        return -1;
    }
    if (c->padded_vocab_size < c->vocab_size) {
        llmc_set_error(err, err_len, "padded_vocab_size %d is smaller than vocab_size %d",
                       c->padded_vocab_size, c->vocab_size);
        return -1;
    }
    if (c->channels % c->num_heads != 0) {
        llmc_set_error(err, err_len, "channels %d is not a multiple of num_heads %d", c->channels,
                       c->num_heads);
        return -1;
    }
    // parameter count in 64 bits: Vp*C + maxT*C + L*(12*C*C + 13*C) + 2*C, which must leave
    // room for 4-byte elements in an int64 file size
    uint64_t C = (uint64_t)c->channels, cc, per_layer, l_total, total;
    if (llmc_mul_u64(C, C, &cc) != 0 || llmc_mul_u64(cc, 12, &per_layer) != 0 ||
        per_layer + 13 * C < per_layer ||
        llmc_mul_u64(per_layer + 13 * C, (uint64_t)c->num_layers, &l_total) != 0 ||
        (total = l_total + ((uint64_t)c->padded_vocab_size + (uint64_t)c->max_seq_len + 2) * C) < l_total ||
        total > ((uint64_t)INT64_MAX - MODEL_HEADER_BYTES) / 4) {
        llmc_set_error(err, err_len, "sizes give too many parameters (channels=%d num_layers=%d)",
                       c->channels, c->num_layers);
        return -1;
    }
    return 0;
}

// Fills the 16 tensors in llm.c's order (config must pass gpt2_config_check).
static inline void gpt2_parameter_tensors(const GPT2Config *c, ParameterTensor t[NUM_PARAMETER_TENSORS]) {
    size_t Vp = (size_t)c->padded_vocab_size, maxT = (size_t)c->max_seq_len;
    size_t L = (size_t)c->num_layers, C = (size_t)c->channels;
    const struct { const char *name; int ndim; size_t d0, d1, d2; int decay; } spec[NUM_PARAMETER_TENSORS] = {
        {"wte", 2, Vp, C, 0, 1},
        {"wpe", 2, maxT, C, 0, 1},
        {"ln1w", 2, L, C, 0, 0},
        {"ln1b", 2, L, C, 0, 0},
        {"qkvw", 3, L, 3 * C, C, 1},
        {"qkvb", 2, L, 3 * C, 0, 0},
        {"attprojw", 3, L, C, C, 1},
        {"attprojb", 2, L, C, 0, 0},
        {"ln2w", 2, L, C, 0, 0},
        {"ln2b", 2, L, C, 0, 0},
        {"fcw", 3, L, 4 * C, C, 1},
        {"fcb", 2, L, 4 * C, 0, 0},
        {"fcprojw", 3, L, C, 4 * C, 1},
        {"fcprojb", 2, L, C, 0, 0},
        {"lnfw", 1, C, 0, 0, 0},
        {"lnfb", 1, C, 0, 0, 0},
    };
    size_t offset = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        t[i].name = spec[i].name;
        t[i].ndim = spec[i].ndim;
        t[i].shape[0] = spec[i].d0;
        t[i].shape[1] = spec[i].d1;
        t[i].shape[2] = spec[i].d2;
        t[i].numel = 1;
        for (int d = 0; d < spec[i].ndim; d++) t[i].numel *= t[i].shape[d];
        t[i].offset = offset;
        t[i].weight_decay = spec[i].decay;
        offset += t[i].numel;
    }
}

static inline size_t gpt2_num_parameters(const GPT2Config *c) {
    ParameterTensor t[NUM_PARAMETER_TENSORS];
    gpt2_parameter_tensors(c, t);
    return t[NUM_PARAMETER_TENSORS - 1].offset + t[NUM_PARAMETER_TENSORS - 1].numel;
}

// ----------------------------------------------------------------------------
// model file

typedef struct {
    GPT2Config config;
    int version;                 // 3 or 5
    size_t num_parameters;
    size_t bytes_per_parameter;  // 4 or 2
} ModelFileInfo;

static inline int model_check_header(const int32_t header[MODEL_HEADER_INTS], int64_t file_bytes,
                                     const char *path, ModelFileInfo *info, char *err, size_t err_len) {
    if (header[0] != MODEL_MAGIC) {
        llmc_set_error(err, err_len, "model file '%s': bad magic %d (expected %d)", path,
                       (int)header[0], MODEL_MAGIC);
        return -1;
    }
    if (header[1] != MODEL_VERSION_FP32 && header[1] != MODEL_VERSION_BF16) {
        llmc_set_error(err, err_len, "model file '%s': bad version %d (expected %d for fp32 or %d "
                       "for bf16)", path, (int)header[1], MODEL_VERSION_FP32, MODEL_VERSION_BF16);
        return -1;
    }
    GPT2Config c;
    c.max_seq_len = header[2];
    c.vocab_size = header[3];
    c.num_layers = header[4];
    c.num_heads = header[5];
    c.channels = header[6];
    c.padded_vocab_size = header[7];
    char why[256];
    if (gpt2_config_check(&c, why, sizeof(why)) != 0) {
        llmc_set_error(err, err_len, "model file '%s': %s", path, why);
        return -1;
    }
    size_t nparams = gpt2_num_parameters(&c), bpp = header[1] == MODEL_VERSION_FP32 ? 4 : 2;
    int64_t expected = MODEL_HEADER_BYTES + (int64_t)nparams * (int64_t)bpp;
    if (file_bytes != expected) {
        llmc_set_error(err, err_len, "model file '%s': file is %lld bytes but the header's %zu "
                       "parameters of %zu bytes need %lld (%s)", path, (long long)file_bytes,
                       nparams, bpp, (long long)expected,
                       file_bytes < expected ? "truncated" : "trailing bytes");
        return -1;
    }
    info->config = c;
    info->version = header[1];
    info->num_parameters = nparams;
    info->bytes_per_parameter = bpp;
    return 0;
}

// Opens and validates a model file; on success *fp is positioned at the parameters.
static inline int model_open_checked(const char *path, FILE **fp_out, ModelFileInfo *info, char *err,
                                     size_t err_len) {
    *fp_out = NULL;
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) {
        llmc_set_error(err, err_len, "cannot open model file '%s': %s", path, strerror(errno));
        return -1;
    }
    int32_t header[MODEL_HEADER_INTS];
    int64_t file_bytes = 0;
    if (llmc_file_size(fp, &file_bytes) != 0 || file_bytes < MODEL_HEADER_BYTES ||
        llmc_read_exact(fp, header, sizeof(header)) != 0) {
        llmc_set_error(err, err_len, "model file '%s': truncated header (file is %lld bytes, the "
                       "header alone is %d)", path, (long long)file_bytes, MODEL_HEADER_BYTES);
        fclose(fp);
        return -1;
    }
    if (model_check_header(header, file_bytes, path, info, err, err_len) != 0) {
        fclose(fp);
        return -1;
    }
    *fp_out = fp;
    return 0;
}

// Reads the parameters as stored (float for version 3, bf16 bits for 5) into a malloc'd
// buffer; with want_fp32 != 0 a bf16 file is widened to float.
static inline int model_read_checked(const char *path, ModelFileInfo *info, void **params,
                                     int want_fp32, char *err, size_t err_len) {
    *params = NULL;
    FILE *fp;
    if (model_open_checked(path, &fp, info, err, err_len) != 0) return -1;
    size_t n = info->num_parameters, nbytes = n * info->bytes_per_parameter;
    int widen = want_fp32 && info->version == MODEL_VERSION_BF16;
    void *raw = malloc(nbytes ? nbytes : 1);
    float *wide = widen ? (float *)malloc(n * sizeof(float)) : NULL;
    if (raw == NULL || (widen && wide == NULL)) {
        llmc_set_error(err, err_len, "model file '%s': out of memory for %zu parameters", path, n);
        free(raw);
        free(wide);
        fclose(fp);
        return -1;
    }
    int rc = llmc_read_exact(fp, raw, nbytes);
    fclose(fp);
    if (rc != 0) {
        llmc_set_error(err, err_len, "model file '%s': read error in the parameters", path);
        free(raw);
        free(wide);
        return -1;
    }
    if (widen) {
        bf16_to_floats((const uint16_t *)raw, wide, n);
        free(raw);
        raw = wide;
    }
    *params = raw;
    return 0;
}

// Writes a model file; params holds num_parameters floats (version 3) or bf16 bits (5).
static inline int model_write_checked(const char *path, const GPT2Config *config, int version,
                                      const void *params, int sync, char *err, size_t err_len) {
    char why[256];
    if (version != MODEL_VERSION_FP32 && version != MODEL_VERSION_BF16) {
        llmc_set_error(err, err_len, "model file '%s': cannot write version %d (3 or 5)", path, version);
        return -1;
    }
    if (gpt2_config_check(config, why, sizeof(why)) != 0) {
        llmc_set_error(err, err_len, "model file '%s': %s", path, why);
        return -1;
    }
    int32_t header[MODEL_HEADER_INTS];
    memset(header, 0, sizeof(header));
    header[0] = MODEL_MAGIC;
    header[1] = version;
    header[2] = config->max_seq_len;
    header[3] = config->vocab_size;
    header[4] = config->num_layers;
    header[5] = config->num_heads;
    header[6] = config->channels;
    header[7] = config->padded_vocab_size;
    size_t nbytes = gpt2_num_parameters(config) * (version == MODEL_VERSION_FP32 ? 4 : 2);
    AtomicFile af;
    if (atomic_file_open(&af, path, sync) != 0) {
        llmc_set_error(err, err_len, "%s", af.err);
        return -1;
    }
    atomic_file_write(&af, header, sizeof(header));
    atomic_file_write(&af, params, nbytes);
    if (atomic_file_commit(&af) != 0) {
        llmc_set_error(err, err_len, "%s", af.err);
        return -1;
    }
    return 0;
}

static inline void *model_read(const char *path, ModelFileInfo *info, int want_fp32) {
    char err[1024];
    void *params;
    if (model_read_checked(path, info, &params, want_fp32, err, sizeof(err)) != 0) {
        fprintf(stderr, "Error: %s\n", err);
        exit(EXIT_FAILURE);
    }
    return params;
}

static inline void model_write(const char *path, const GPT2Config *config, int version,
                               const void *params) {
    char err[1024];
    if (model_write_checked(path, config, version, params, 0, err, sizeof(err)) != 0) {
        fprintf(stderr, "Error: %s\n", err);
        exit(EXIT_FAILURE);
    }
}

// ----------------------------------------------------------------------------
// resume state file

typedef struct {
    int num_processes, process_rank;
    int use_master_weights;
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

static inline int state_write_checked(const char *path, const TrainingState *st, int sync, char *err,
                                      size_t err_len) {
    const DataLoaderState *ls = &st->loader;
    if (st->num_processes < 1 || st->process_rank < 0 || st->process_rank >= st->num_processes ||
        st->step < 0 || (st->use_master_weights != 0 && st->use_master_weights != 1) ||
        (ls->should_shuffle != 0 && ls->should_shuffle != 1)) {
        llmc_set_error(err, err_len, "state file '%s': bad fields num_processes=%d process_rank=%d "
                       "step=%d use_master_weights=%d should_shuffle=%d", path, st->num_processes,
                       st->process_rank, st->step, st->use_master_weights, ls->should_shuffle);
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
    int32_t header[STATE_HEADER_BYTES / 4];
    memset(header, 0, sizeof(header));
    header[0] = STATE_MAGIC;
    header[1] = STATE_VERSION;
    header[2] = st->num_processes;
    header[3] = st->process_rank;
    header[4] = st->use_master_weights;
    header[5] = ls->should_shuffle;
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

// Reads a state file whose m/v/master buffers hold num_parameters floats each.
static inline int state_read_checked(const char *path, size_t num_parameters, TrainingState *st,
                                     char *err, size_t err_len) {
    memset(st, 0, sizeof(*st));
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) {
        llmc_set_error(err, err_len, "cannot open state file '%s': %s", path, strerror(errno));
        return -1;
    }
    int32_t header[STATE_HEADER_BYTES / 4];
    int64_t file_bytes = 0;
    if (llmc_file_size(fp, &file_bytes) != 0 || file_bytes < STATE_HEADER_BYTES ||
        llmc_read_exact(fp, header, sizeof(header)) != 0) {
        llmc_set_error(err, err_len, "state file '%s': truncated header (file is %lld bytes, the "
                       "header alone is %d)", path, (long long)file_bytes, STATE_HEADER_BYTES);
        fclose(fp);
        return -1;
    }
#define STATE_FAIL_(...) do { llmc_set_error(err, err_len, __VA_ARGS__); fclose(fp); state_free(st); return -1; } while (0)
    if (header[0] != STATE_MAGIC) STATE_FAIL_("state file '%s': bad magic %d (expected %d)", path, (int)header[0], STATE_MAGIC);
    if (header[1] != STATE_VERSION) STATE_FAIL_("state file '%s': bad version %d (expected %d)", path, (int)header[1], STATE_VERSION);
    st->num_processes = header[2];
    st->process_rank = header[3];
    st->use_master_weights = header[4];
    st->loader.should_shuffle = header[5];
    st->step = header[10];
    if (st->num_processes < 1 || st->process_rank < 0 || st->process_rank >= st->num_processes)
        STATE_FAIL_("state file '%s': bad process_rank %d / num_processes %d", path, st->process_rank, st->num_processes);
    if ((st->use_master_weights != 0 && st->use_master_weights != 1) ||
        (st->loader.should_shuffle != 0 && st->loader.should_shuffle != 1))
        STATE_FAIL_("state file '%s': bad flags use_master_weights=%d should_shuffle=%d (must be 0 or 1)",
                    path, st->use_master_weights, st->loader.should_shuffle);
    if (st->step < 0) STATE_FAIL_("state file '%s': bad step %d", path, st->step);
    uint64_t shard_idx, sample_idx;
    memcpy(&st->rng_state, &header[20], 8);
    memcpy(&st->rng_state_last_update, &header[22], 8);
    memcpy(&shard_idx, &header[30], 8);
    memcpy(&sample_idx, &header[32], 8);
    if (shard_idx > (uint64_t)INT_MAX || sample_idx > (uint64_t)INT_MAX)
        STATE_FAIL_("state file '%s': bad data position shard %llu sample %llu", path,
                    (unsigned long long)shard_idx, (unsigned long long)sample_idx);
    st->loader.shard_idx = (size_t)shard_idx;
    st->loader.sample_idx = (size_t)sample_idx;

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

static inline void state_write(const char *path, const TrainingState *st) {
    char err[1024];
    if (state_write_checked(path, st, 0, err, sizeof(err)) != 0) {
        fprintf(stderr, "Error: %s\n", err);
        exit(EXIT_FAILURE);
    }
}

static inline void state_read(const char *path, size_t num_parameters, TrainingState *st) {
    char err[1024];
    if (state_read_checked(path, num_parameters, st, err, sizeof(err)) != 0) {
        fprintf(stderr, "Error: %s\n", err);
        exit(EXIT_FAILURE);
    }
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

// Writes the empty DONE_%08d marker (atomically): call after every file of the step exists.
static inline int done_marker_write_checked(const char *dir, int step, int sync, char *err, size_t err_len) {
    char path[4096];
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
    char path[4096];
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
    char path[4096];
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

#endif // LLMC_CHECKPOINT_H
