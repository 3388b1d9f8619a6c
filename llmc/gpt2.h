/*
gpt2.h - the GPT-2 model on the host: its configuration, the one table of its parameter
tensors (and named pointers built from it), llm.c's depth descriptors, PyTorch's
initialisation, llm.c's model file, and the family's ModelSpec (llmc/model.h) through which
the trainer sees it. The CUDA forward and backward are llmc/gpt2.cuh's.

Model file (llm.c gpt2_write_to_checkpoint / write_model in train_gpt2.py):
    int32 header[256]: [0] = 20240326, [1] = 3 (fp32) or 5 (bf16, layernorms included),
        [2] = max_seq_len, [3] = vocab_size, [4] = num_layers, [5] = num_heads,
        [6] = channels, [7] = padded_vocab_size, the rest 0
    then the parameter tensors of GPT2_PARAMETER_TABLE, contiguous, in fp32 or bf16
  Checked: magic, version, all six sizes >= 1, padded_vocab_size >= vocab_size,
  channels % num_heads == 0, file size == 1024 + num_parameters * (4 or 2).
*/
#ifndef LLMC_GPT2_H
#define LLMC_GPT2_H

#include "utils.h"  // first: it sets the POSIX feature macros

#include <limits.h>
#include <math.h>

#include "bf16.h"
#include "mfu.h"
#include "model.h"
#include "rand.h"

#define MODEL_MAGIC 20240326
#define MODEL_VERSION_FP32 3
#define MODEL_VERSION_BF16 5
#define MODEL_HEADER_INTS 256
#define MODEL_HEADER_BYTES (MODEL_HEADER_INTS * 4)

// GPT-2's tokenizer, the vocabulary of a fresh model unless one is given
#define GPT2_VOCAB_SIZE 50257
// the largest vocabulary whose padding (to a multiple of 128, as llm.c pads) fits an int
#define GPT2_MAX_VOCAB (INT_MAX / 128 * 128)

// ----------------------------------------------------------------------------
// configuration

typedef struct {
    int max_seq_len;        // maxT
    int vocab_size;         // V
    int padded_vocab_size;  // Vp >= V (llm.c rounds up to a multiple of 128)
    int num_layers;         // L
    int num_heads;          // NH
    int channels;           // C
} GPT2Config;

// ----------------------------------------------------------------------------
// the parameter tensors: one table

// Every parameter tensor in llm.c's order: the order of the model file, of the flat parameter
// buffer and of AdamW's per-tensor seeds. X(P, name, d0, d1, d2, decay, layered): the shape (0 =
// no such dimension) in Vp, maxT, L and C, which the expansion site defines; decay: AdamW's
// weight decay applies (llm.c decays the matrices, not the biases and layernorms); layered:
// stacked over the layers (d0 = L). P is passed through to X unchanged (an element type, for
// the named pointers).
#define GPT2_PARAMETER_TABLE(X, P) \
    X(P, wte, Vp, C, 0, 1, 0) \
    X(P, wpe, maxT, C, 0, 1, 0) \
    X(P, ln1w, L, C, 0, 0, 1) \
    X(P, ln1b, L, C, 0, 0, 1) \
    X(P, qkvw, L, 3 * C, C, 1, 1) \
    X(P, qkvb, L, 3 * C, 0, 0, 1) \
    X(P, attprojw, L, C, C, 1, 1) \
    X(P, attprojb, L, C, 0, 0, 1) \
    X(P, ln2w, L, C, 0, 0, 1) \
    X(P, ln2b, L, C, 0, 0, 1) \
    X(P, fcw, L, 4 * C, C, 1, 1) \
    X(P, fcb, L, 4 * C, 0, 0, 1) \
    X(P, fcprojw, L, C, 4 * C, 1, 1) \
    X(P, fcprojb, L, C, 0, 0, 1) \
    X(P, lnfw, C, 0, 0, 0, 0) \
    X(P, lnfb, C, 0, 0, 0, 0)

#define GPT2_COUNT_(P, name, d0, d1, d2, decay, layered) +1
enum { GPT2_NUM_TENSORS = 0 GPT2_PARAMETER_TABLE(GPT2_COUNT_, _) };

// Fills the tensors from the table (the config must pass gpt2_config_check).
static inline void gpt2_parameter_tensors(const GPT2Config *c, ParameterTensor t[GPT2_NUM_TENSORS]) {
    const size_t Vp = (size_t)c->padded_vocab_size, maxT = (size_t)c->max_seq_len;
    const size_t L = (size_t)c->num_layers, C = (size_t)c->channels;
    size_t offset = 0;
    int i = 0;
#define GPT2_TENSOR_SPEC_(P, name, d0, d1, d2, decay, layered) \
    model_tensor_spec(&t[i++], #name, d0, d1, d2, decay, layered, &offset);
    GPT2_PARAMETER_TABLE(GPT2_TENSOR_SPEC_, _)
#undef GPT2_TENSOR_SPEC_
}

static inline size_t gpt2_num_parameters(const GPT2Config *c) {
    ParameterTensor t[GPT2_NUM_TENSORS];
    gpt2_parameter_tensors(c, t);
    return t[GPT2_NUM_TENSORS - 1].offset + t[GPT2_NUM_TENSORS - 1].numel;
}

// Named pointers into a flat buffer of elements of type T, one per tensor of the table (layer
// l of a per-layer tensor starts at name + l * numel / L, e.g. qkvw + l * 3 * C * C).
// GPT2_DEFINE_TENSORS(Struct, point, T) defines the struct and point(&s, base, tensors), which
// aims every field at its tensor's offset in base.
#define GPT2_TENSOR_FIELD_(T, name, d0, d1, d2, decay, layered) T *name;
#define GPT2_TENSOR_POINT_(T, name, d0, d1, d2, decay, layered) out->name = base + t[k++].offset;
#define GPT2_DEFINE_TENSORS(Struct, point, T)                                                        \
    typedef struct { GPT2_PARAMETER_TABLE(GPT2_TENSOR_FIELD_, T) } Struct;                         \
    static inline void point(Struct *out, T *base, const ParameterTensor t[GPT2_NUM_TENSORS]) {     \
        int k = 0;                                                                                 \
        GPT2_PARAMETER_TABLE(GPT2_TENSOR_POINT_, T)                                                \
    }

GPT2_DEFINE_TENSORS(GPT2FloatTensors, gpt2_point_floats, float)

// ----------------------------------------------------------------------------
// checks

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

// 0 if a and b are the same model shape; otherwise -1 with the differing fields ("vocab_size
// 50257 vs 50304, ...") in err.
static inline int gpt2_config_compare(const GPT2Config *a, const GPT2Config *b, char *err, size_t err_len) {
    const struct { const char *name; int a, b; } f[] = {
        {"vocab_size", a->vocab_size, b->vocab_size},
        {"padded_vocab_size", a->padded_vocab_size, b->padded_vocab_size},
        {"num_layers", a->num_layers, b->num_layers},
        {"channels", a->channels, b->channels},
        {"num_heads", a->num_heads, b->num_heads},
        {"max_seq_len", a->max_seq_len, b->max_seq_len},
    };
    char buf[512] = "";
    size_t used = 0;
    int differ = 0;
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
        if (f[i].a == f[i].b) continue;
        int n = snprintf(buf + used, sizeof(buf) - used, "%s%s %d vs %d", differ ? ", " : "", f[i].name, f[i].a, f[i].b);
        if (n > 0 && used + (size_t)n < sizeof(buf)) used += (size_t)n;
        differ = 1;
    }
    llmc_set_error(err, err_len, "%s", buf);
    return differ ? -1 : 0;
}

// ----------------------------------------------------------------------------
// llm.c's depth descriptors and PyTorch's initialisation

// 1 if arg is a depth descriptor: the whole string "d" + digits ("d12/model.bin" is a path).
static inline int gpt2_is_descriptor(const char *arg) {
    if (arg[0] != 'd' || arg[1] == 0) return 0;
    for (const char *p = arg + 1; *p; p++)
        if (*p < '0' || *p > '9') return 0;
    return 1;
}

// GPT-2 sizes by depth ("d12" = GPT-2 124M) with a vocabulary of vocab tokens (0: GPT-2's),
// padded to a multiple of 128 as llm.c pads.
static inline int gpt2_config_from_descriptor(const char *desc, int vocab, GPT2Config *c, char *err, size_t err_len) {
    const long depth = gpt2_is_descriptor(desc) && strlen(desc) < 8 ? strtol(desc + 1, NULL, 10) : -1;
    int channels = 0, heads = 0;
    switch (depth) {
    case 6: channels = 384; heads = 6; break;
    case 12: channels = 768; heads = 12; break;
    case 24: channels = 1024; heads = 16; break;
    case 36: channels = 1280; heads = 20; break;
    case 48: channels = 1600; heads = 25; break;
    default:
        llmc_set_error(err, err_len, "unknown depth descriptor '%s' (d6, d12, d24, d36 or d48)", desc);
        return -1;
    }
    if (vocab < 0 || vocab > GPT2_MAX_VOCAB) {
        llmc_set_error(err, err_len, "vocabulary size %d outside 1..%d", vocab, GPT2_MAX_VOCAB);
        return -1;
    }
    c->max_seq_len = 1024;
    c->vocab_size = vocab > 0 ? vocab : GPT2_VOCAB_SIZE;
    c->padded_vocab_size = (c->vocab_size + 127) / 128 * 128;
    c->num_layers = (int)depth;
    c->num_heads = heads;
    c->channels = channels;
    return 0;
}

// llm.c's / PyTorch's init into host[num_parameters]: mt19937 seed 42, N(0, 0.02) in module
// order, residual projections scaled by 1/sqrt(2L), layernorm weights 1, biases 0, wte's
// padding rows 0.
static inline void gpt2_init_random(const GPT2Config *c, float *host) {
    const size_t C = (size_t)c->channels, L = (size_t)c->num_layers;
    ParameterTensor t[GPT2_NUM_TENSORS];
    gpt2_parameter_tensors(c, t);
    GPT2FloatTensors p;
    gpt2_point_floats(&p, host, t);
    mt19937_state rng;
    manual_seed(&rng, 42);
    memset(host, 0, gpt2_num_parameters(c) * sizeof(float));
    const double residual_std = 0.02 / sqrt(2.0 * (double)L);  // in double, as PyTorch computes it
    normal_(p.wte, (size_t)c->vocab_size * C, 0.0, 0.02, &rng);
    normal_(p.wpe, (size_t)c->max_seq_len * C, 0.0, 0.02, &rng);
    for (size_t l = 0; l < L; l++) {
        for (size_t k = 0; k < C; k++) p.ln1w[l * C + k] = 1.0f;
        normal_(p.qkvw + l * 3 * C * C, 3 * C * C, 0.0, 0.02, &rng);
        normal_(p.attprojw + l * C * C, C * C, 0.0, residual_std, &rng);
        for (size_t k = 0; k < C; k++) p.ln2w[l * C + k] = 1.0f;
        normal_(p.fcw + l * 4 * C * C, 4 * C * C, 0.0, 0.02, &rng);
        normal_(p.fcprojw + l * 4 * C * C, 4 * C * C, 0.0, residual_std, &rng);
    }
    for (size_t k = 0; k < C; k++) p.lnfw[k] = 1.0f;
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
    FILE *fp = llmc_fopen_read_checked(path, "model file", err, err_len);
    if (fp == NULL) return -1;
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

// ----------------------------------------------------------------------------
// the model of -e: a descriptor or a file

// The model of -e: a depth descriptor (a fresh model of vocab tokens, 0: GPT-2's, initialised
// as PyTorch does) or an llm.c model file (v3 or v5; vocab does not apply). Fills *c; with
// params != NULL also *params, num_parameters fp32 values, malloc'd (free it). Without params
// it is cheap: a descriptor's table or a file's header.
static inline int gpt2_load_checked(const char *arg, int vocab, GPT2Config *c, float **params, char *err,
                                    size_t err_len) {
    if (params != NULL) *params = NULL;
    if (!gpt2_is_descriptor(arg)) {
        ModelFileInfo info;
        FILE *fp;
        if (params == NULL) {
            if (model_open_checked(arg, &fp, &info, err, err_len) != 0) return -1;
            fclose(fp);
        } else if (model_read_checked(arg, &info, (void **)params, 1, err, err_len) != 0) {
            return -1;
        }
        *c = info.config;
        return 0;
    }
    char why[256];
    if (gpt2_config_from_descriptor(arg, vocab, c, err, err_len) != 0) return -1;
    if (gpt2_config_check(c, why, sizeof(why)) != 0) {
        llmc_set_error(err, err_len, "model %s: %s", arg, why);
        return -1;
    }
    if (params == NULL) return 0;
    if (model_params_alloc(arg, gpt2_num_parameters(c), params, err, err_len) != 0) return -1;
    gpt2_init_random(c, *params);
    return 0;
}

// ----------------------------------------------------------------------------
// the family as the trainer sees it (llmc/model.h)

typedef char gpt2_config_fits_a_model_spec[sizeof(GPT2Config) <= MODEL_CONFIG_BYTES ? 1 : -1];

static inline const GPT2Config *gpt2_config_of(const ModelSpec *s) { return (const GPT2Config *)s->config.bytes; }

static inline const ModelFamily *gpt2_family(void);

// The spec of a checked configuration: the table, the sizes, wte as the (tied) LM head.
static inline void gpt2_spec(const GPT2Config *c, ModelSpec *s) {
    ParameterTensor t[GPT2_NUM_TENSORS];
    gpt2_parameter_tensors(c, t);
    model_spec_init(s, gpt2_family(), c, sizeof(*c), c->vocab_size, c->padded_vocab_size, c->channels, c->num_layers,
                    c->max_seq_len, t, GPT2_NUM_TENSORS);
    s->head = 0;  // wte
    s->tokenizer = "data/gpt2_tokenizer.bin";
    s->sample_start = -1;  // the tokenizer's <|endoftext|>
}

static inline int gpt2_family_write(const char *path, const ModelSpec *s, const uint16_t *params, int sync, char *err,
                                    size_t err_len) {
    return model_write_checked(path, gpt2_config_of(s), MODEL_VERSION_BF16, params, sync, err, err_len);
}

// A checkpoint's model file: bf16 (version 5) only, as the trainer writes it.
static inline int gpt2_family_read(const char *path, ModelSpec *s, uint16_t **params, char *err, size_t err_len) {
    ModelFileInfo info;
    if (model_read_checked(path, &info, (void **)params, 0, err, err_len) != 0) return -1;
    if (info.version != MODEL_VERSION_BF16) {
        llmc_set_error(err, err_len, "checkpoint '%s' holds version %d parameters, not bf16 (%d)", path, info.version,
                       MODEL_VERSION_BF16);
        free(*params);
        *params = NULL;
        return -1;
    }
    gpt2_spec(&info.config, s);
    return 0;
}

static inline int gpt2_family_compare(const ModelSpec *a, const ModelSpec *b, char *err, size_t err_len) {
    return gpt2_config_compare(gpt2_config_of(a), gpt2_config_of(b), err, err_len);
}

// The trainer's kernels: channels a multiple of 8, a head size of 16, 32, 64 or 128.
static inline int gpt2_family_check_run(const ModelSpec *s, int T, char *err, size_t err_len) {
    (void)T;
    const GPT2Config *m = gpt2_config_of(s);
    const int hs = m->channels / m->num_heads;
    if (m->channels % 8 != 0 || (hs != 16 && hs != 32 && hs != 64 && hs != 128)) {
        llmc_set_error(err, err_len, "channels %d with %d heads; the trainer's kernels need channels a multiple of 8 "
                       "and a head size of 16, 32, 64 or 128", m->channels, m->num_heads);
        return -1;
    }
    return 0;
}

static inline double gpt2_family_flops(const ModelSpec *s, int T) {
    return mfu_flops_per_token(s->num_parameters, s->num_layers, T, s->channels);
}

static inline int gpt2_family_describe(const ModelSpec *s, int line, char *name, size_t name_len, char *value,
                                       size_t value_len) {
    const GPT2Config *c = gpt2_config_of(s);
    const struct { const char *name; int value; } rows[] = {
        {"max_seq_len", c->max_seq_len}, {"vocab size", c->vocab_size}, {"padded vocab", c->padded_vocab_size},
        {"layers", c->num_layers},       {"heads", c->num_heads},       {"channels", c->channels},
    };
    if (line < 0 || line >= (int)(sizeof(rows) / sizeof(rows[0]))) return -1;
    snprintf(name, name_len, "%s", rows[line].name);
    snprintf(value, value_len, "%d", rows[line].value);
    return 0;
}

static inline const ModelFamily *gpt2_family(void) {
    static const ModelFamily family = {"gpt2", gpt2_family_write, gpt2_family_read, gpt2_family_compare,
                                       gpt2_family_check_run, gpt2_family_flops, gpt2_family_describe};
    return &family;
}

#endif // LLMC_GPT2_H
