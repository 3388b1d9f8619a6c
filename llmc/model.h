/*
model.h - what the trainer knows of a model family, on the host: a model-neutral table of
parameter tensors (name, shape, offset in the flat buffer, weight decay, stacked over the
layers or not), the sizes the training loop needs (vocabulary, hidden size, layers, sequence
length), which tensor is the LM head, and the family's model-file and reporting functions.
ZeRO's slices and buckets (zero.h), checkpoints (checkpoint.h) and AdamW see this table only.

A family (llmc/gpt2.h, ...) fills a ModelSpec from its own configuration, which it keeps in the
spec's config bytes (gpt2_config_of reads it back); llmc/models.h picks the family of a -e
argument. The GPU half of a family (its forward and backward) is llmc/model.cuh's ModelOps.

Flat layout: every tensor of the table, contiguous, in table order; a tensor stacked over the
layers has the layer count as its first dimension, layer l's part being the l-th of L equal
slices (what the gradient bucket of layer l reduces).
*/
#ifndef LLMC_MODEL_H
#define LLMC_MODEL_H

#include "utils.h"  // first: it sets the POSIX feature macros

#include <stdint.h>
#include <string.h>

#define MODEL_MAX_TENSORS 32
#define MODEL_CONFIG_BYTES 256

typedef struct {
    const char *name;
    int ndim;
    size_t shape[3];
    size_t numel;
    size_t offset;        // elements before this tensor in the flat parameter buffer
    int weight_decay;     // AdamW's weight decay applies (the matrices, not norms or biases)
    int layered;          // stacked over the layers: shape[0] is the layer count
} ParameterTensor;

// Appends a tensor of shape (d0, d1, d2) (0 = no such dimension) at *offset.
static inline void model_tensor_spec(ParameterTensor *t, const char *name, size_t d0, size_t d1, size_t d2,
                                     int decay, int layered, size_t *offset) {
    t->name = name;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->shape[2] = d2;
    t->ndim = d2 ? 3 : d1 ? 2 : 1;
    t->numel = d0 * (d1 ? d1 : 1) * (d2 ? d2 : 1);
    t->offset = *offset;
    t->weight_decay = decay;
    t->layered = layered;
    *offset += t->numel;
}

typedef struct ModelFamily ModelFamily;

typedef struct {
    const ModelFamily *family;
    int vocab_size;         // V: the classes
    int padded_vocab_size;  // Vp >= V: the LM head's rows (V..Vp padding, never targets)
    int channels;           // C: the hidden size the LM head reads
    int num_layers;         // L: the gradient buckets are the layers and the global tensors
    int max_seq_len;        // the longest T
    int num_tensors;
    ParameterTensor tensors[MODEL_MAX_TENSORS];
    size_t num_parameters;
    int head;               // the tensor of the LM head's weight (Vp, C): the embedding when tied
    const char *tokenizer;  // the tokenizer file that decodes samples (NULL: printed as token ids)
    int sample_start;       // the token a sample starts from (-1: the tokenizer's end-of-text)
    union {                 // the family's own configuration (its *_config_of reads it)
        double align;
        unsigned char bytes[MODEL_CONFIG_BYTES];
    } config;
} ModelSpec;

// A family's host functions; each returns 0, or -1 with a message in err.
struct ModelFamily {
    const char *name;
    // the model file of a checkpoint: the bf16 parameters of spec's table, and back
    int (*write_file)(const char *path, const ModelSpec *spec, const uint16_t *params, int sync, char *err,
                      size_t err_len);
    int (*read_file)(const char *path, ModelSpec *spec, uint16_t **params, char *err, size_t err_len);
    // 0 when a and b are the same model; else -1 with the differing fields ("vocab_size 1 vs 2, ...")
    int (*compare)(const ModelSpec *a, const ModelSpec *b, char *err, size_t err_len);
    // what the trainer's kernels take of this model at sequence length T
    int (*check_run)(const ModelSpec *spec, int T, char *err, size_t err_len);
    // training FLOPs per token at sequence length T (for MFU)
    double (*flops_per_token)(const ModelSpec *spec, int T);
    // the run table's model lines: "layers 12, heads 12, channels 768", one name/value per call
    int (*describe)(const ModelSpec *spec, int line, char *name, size_t name_len, char *value, size_t value_len);
};

// The tensor named name, or NULL.
static inline const ParameterTensor *model_tensor(const ModelSpec *s, const char *name) {
    for (int i = 0; i < s->num_tensors; i++)
        if (strcmp(s->tensors[i].name, name) == 0) return &s->tensors[i];
    return NULL;
}

// A family's spec: its configuration (config_bytes of it), the sizes, and nt tensors laid out
// by model_tensor_spec (the parameter count follows); head, tokenizer and sample_start are the
// caller's to set.
static inline void model_spec_init(ModelSpec *s, const ModelFamily *family, const void *config, size_t config_bytes,
                                   int V, int Vp, int C, int L, int max_seq_len, const ParameterTensor *t, int nt) {
    memset(s, 0, sizeof(*s));
    s->family = family;
    memcpy(s->config.bytes, config, config_bytes);
    s->vocab_size = V;
    s->padded_vocab_size = Vp;
    s->channels = C;
    s->num_layers = L;
    s->max_seq_len = max_seq_len;
    s->num_tensors = nt;
    memcpy(s->tensors, t, (size_t)nt * sizeof(*t));
    s->num_parameters = nt > 0 ? t[nt - 1].offset + t[nt - 1].numel : 0;
}

// n fp32 parameters for the model of -e arg, malloc'd (free them); 0, or -1 with a message.
static inline int model_params_alloc(const char *arg, size_t n, float **params, char *err, size_t err_len) {
    *params = (float *)malloc((n ? n : 1) * sizeof(float));
    if (*params == NULL) {
        llmc_set_error(err, err_len, "model %s: out of host memory for %zu parameters", arg, n);
        return -1;
    }
    return 0;
}

// 0 when a and b are the same model (family and configuration), else -1 with what differs.
static inline int model_spec_compare(const ModelSpec *a, const ModelSpec *b, char *err, size_t err_len) {
    if (a->family != b->family) {
        llmc_set_error(err, err_len, "family %s vs %s", a->family->name, b->family->name);
        return -1;
    }
    return a->family->compare(a, b, err, err_len);
}

#endif // LLMC_MODEL_H
