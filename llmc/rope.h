/*
rope.h - the rotary position embedding tables of Llama 3 and Qwen2.5 on the host: the inverse
frequencies of a head of head_dim channels, with or without Llama 3.1's frequency scaling
(rope_scaling of type "llama3"), and the fp32 cos/sin tables (max_seq_len, head_dim / 2) that
llmc/rope.cuh applies on the device. Plain C11, no CUDA.

The numbers are those of transformers (modeling_rope_utils.py and LlamaRotaryEmbedding), op by
op in the precision it uses, so that the tables agree with it to fp32 rounding:

  default   inv_freq[j] = 1 / theta^(2j / hd)
            transformers: 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)):
            the exponent 2j / hd is an fp32 division, the power an fp32 pow of (float)theta (we take
            the correctly rounded value, through double; PyTorch's fp32 pow is within an ulp of it),
            the reciprocal fp32.
  llama3    the default inv_freq, then per frequency (every step fp32, the Python scalars rounded
            to fp32 first, as PyTorch does for a float32 tensor op with a Python number):
              wavelen = (1 / inv) * (float)(2 pi)          (scalar / tensor is reciprocal * scalar)
              wavelen > old / low:   inv / factor          (low-frequency band: scaled)
              wavelen < old / high:  inv                   (high-frequency band: kept)
              otherwise:             s = ((1 / wavelen) * old - low) / (high - low),
                                     (1 - s) * inv / factor + s * inv
            with old = original_max_position_embeddings, low/high = low/high_freq_factor (the
            band limits old / low and old / high computed in double, as Python does, then
            compared in fp32). A tensor divided by a Python number is a true fp32 division on
            the CPU, where transformers builds inv_freq; its CUDA kernel multiplies by the
            reciprocal instead, which differs by at most an ulp when factor or high - low is
            not a power of two.
  tables    freq = (float)t * inv_freq[j] in fp32 (transformers' fp32 matmul of inv_freq and the
            positions, autocast off, one product), cos/sin of that fp32 value (correctly rounded
            here through double; PyTorch's fp32 cos/sin are within an ulp or two). The fp32
            argument matters: at t ~ 1e5 the fp32 product is up to 4e-3 rad from the exact one,
            and transformers' cos/sin are those of the fp32 product. The attention_scaling of
            these two types is 1. Both halves of a head use the same frequency (transformers'
            emb = cat(freqs, freqs)), so the tables hold hd / 2 columns.

The ops are written one rounding at a time; they rely on the compiler not contracting a * b + c
into an FMA, which holds for gcc and g++ at -std=c11 / -std=c++17 (ISO modes: -ffp-contract=off)
and for x86-64 without -mfma.

Functions return 0, or -1 with a message naming the field into err (llmc_set_error, utils.h).
*/
#ifndef LLMC_ROPE_H
#define LLMC_ROPE_H

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "utils.h"

typedef enum { ROPE_DEFAULT = 0, ROPE_LLAMA3 = 1 } RopeType;

static const char *const rope_type_names[] = {"default", "llama3"};

typedef struct {
    RopeType type;
    int head_dim;     // channels of a head (hidden_size / num_attention_heads, or head_dim)
    double theta;     // rope_theta: Llama 3 500000, Qwen2.5 1000000
    // rope_scaling of type "llama3" (Llama 3.1 and 3.2); not read for ROPE_DEFAULT
    double factor;                         // 8 (Llama 3.1), 32 (Llama 3.2)
    double low_freq_factor;                // 1
    double high_freq_factor;               // 4
    int original_max_position_embeddings;  // 8192
} RopeConfig;

// The type named name ("default", "llama3"); 0, or -1 for another name.
static inline int rope_type_parse(const char *name, RopeType *out) {
    for (int k = 0; k < (int)(sizeof(rope_type_names) / sizeof(rope_type_names[0])); k++) {
        if (strcmp(name, rope_type_names[k]) == 0) {
            *out = (RopeType)k;
            return 0;
        }
    }
    return -1;
}

// Checks c; the message names the field. The "x > 0" forms refuse NaN as well.
static inline int rope_config_check(const RopeConfig *c, char *err, size_t err_len) {
    if (c->type != ROPE_DEFAULT && c->type != ROPE_LLAMA3) {
        llmc_set_error(err, err_len, "rope: type %d is neither default (0) nor llama3 (1)", (int)c->type);
        return -1;
    }
    if (c->head_dim < 2 || c->head_dim % 2 != 0) {
        llmc_set_error(err, err_len,
                       "rope: head_dim %d must be even and at least 2 (channels pair i with i + head_dim/2)",
                       c->head_dim);
        return -1;
    }
    if (!(c->theta > 0.0) || !isfinite(c->theta)) {
        llmc_set_error(err, err_len, "rope: rope_theta %g must be a finite number > 0", c->theta);
        return -1;
    }
    if (c->type != ROPE_LLAMA3) return 0;
    // transformers' _validate_llama3_parameters warns for these; here they are refused
    if (!(c->factor >= 1.0) || !isfinite(c->factor)) {
        llmc_set_error(err, err_len, "rope: rope_scaling.factor %g must be a finite number >= 1", c->factor);
        return -1;
    }
    if (!(c->low_freq_factor > 0.0) || !isfinite(c->low_freq_factor)) {
        llmc_set_error(err, err_len, "rope: rope_scaling.low_freq_factor %g must be a finite number > 0",
                       c->low_freq_factor);
        return -1;
    }
    if (!(c->high_freq_factor > c->low_freq_factor) || !isfinite(c->high_freq_factor)) {
        llmc_set_error(err, err_len,
                       "rope: rope_scaling.high_freq_factor %g must be finite and greater than low_freq_factor %g",
                       c->high_freq_factor, c->low_freq_factor);
        return -1;
    }
    if (c->original_max_position_embeddings < 1) {
        llmc_set_error(err, err_len, "rope: rope_scaling.original_max_position_embeddings %d must be >= 1",
                       c->original_max_position_embeddings);
        return -1;
    }
    return 0;
}

// inv_freq[0 .. head_dim/2) = the inverse frequencies of c (fp32, as transformers' inv_freq).
static inline int rope_inv_freq_checked(float *inv_freq, const RopeConfig *c, char *err, size_t err_len) {
    if (rope_config_check(c, err, err_len) != 0) return -1;
    const int hd = c->head_dim, half = hd / 2;
    const float base = (float)c->theta;
    for (int j = 0; j < half; j++) {
        const float e = (float)(2 * j) / (float)hd;
        const float p = (float)pow((double)base, (double)e);
        inv_freq[j] = 1.0f / p;
    }
    if (c->type != ROPE_LLAMA3) return 0;

    const float factor = (float)c->factor, low = (float)c->low_freq_factor;
    const float old = (float)c->original_max_position_embeddings;
    const float two_pi = (float)(2.0 * 3.14159265358979323846);  // math.pi; M_PI is not strict C11
    const float low_freq_wavelen = (float)((double)c->original_max_position_embeddings / c->low_freq_factor);
    const float high_freq_wavelen = (float)((double)c->original_max_position_embeddings / c->high_freq_factor);
    const float band = (float)(c->high_freq_factor - c->low_freq_factor);
    for (int j = 0; j < half; j++) {
        const float inv = inv_freq[j];
        const float wavelen = (1.0f / inv) * two_pi;
        if (wavelen > low_freq_wavelen) {
            inv_freq[j] = inv / factor;
        } else if (!(wavelen < high_freq_wavelen)) {  // the medium band: interpolate
            const float s = ((1.0f / wavelen) * old - low) / band;
            const float scaled = ((1.0f - s) * inv) / factor;
            const float kept = s * inv;
            inv_freq[j] = scaled + kept;
        }
    }
    return 0;
}

// cos_t, sin_t (max_seq_len, head_dim/2), row t: cos and sin of (float)t * inv_freq[j] in fp32.
static inline int rope_tables_checked(float *cos_t, float *sin_t, int max_seq_len, const RopeConfig *c, char *err,
                                      size_t err_len) {
    if (max_seq_len < 1) {
        llmc_set_error(err, err_len, "rope: max_seq_len %d must be >= 1", max_seq_len);
        return -1;
    }
    if (rope_config_check(c, err, err_len) != 0) return -1;
    const int half = c->head_dim / 2;
    float *inv_freq = (float *)malloc((size_t)half * sizeof(float));
    if (inv_freq == NULL) {
        llmc_set_error(err, err_len, "rope: out of memory for %d inverse frequencies", half);
        return -1;
    }
    rope_inv_freq_checked(inv_freq, c, NULL, 0);
    for (int t = 0; t < max_seq_len; t++) {
        for (int j = 0; j < half; j++) {
            const float f = (float)t * inv_freq[j];
            cos_t[(size_t)t * half + j] = (float)cos((double)f);
            sin_t[(size_t)t * half + j] = (float)sin((double)f);
        }
    }
    free(inv_freq);
    return 0;
}

#endif // LLMC_ROPE_H
