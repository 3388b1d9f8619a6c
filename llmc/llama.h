/*
llama.h - the Llama 3 / Qwen2.5 family on the host: its configuration (the Hugging Face
config.json fields), the published and test descriptors of -e, the table of its parameter
tensors and their Hugging Face names, transformers' initialisation, our model file, and the
family's ModelSpec (llmc/model.h) through which the trainer sees it. The model itself
(transformers' LlamaForCausalLM / Qwen2ForCausalLM):

    h = embed[x]
    per layer:  a = RMSNorm(h) * ln1w
                q, k, v = a @ qkvw^T (+ qkvb)          (NH, NKV, NKV heads of head_dim)
                q, k = RoPE(q), RoPE(k)               rotate-half: dimension i pairs with i + hd/2
                y = softmax(q k^T / sqrt(hd), causal) v   query head h reads kv head h / (NH / NKV)
                h = h + y @ attprojw^T
                m = RMSNorm(h) * ln2w
                [g | u] = m @ gateupw^T
                h = h + (silu(g) * u) @ downw^T
    logits = (RMSNorm(h) * lnfw) @ head^T,  head = lm_head, or embed when tied
RMSNorm(x) = x / sqrt(mean(x^2) + rms_norm_eps). RoPE's inverse frequencies are
theta^(-2i/hd), i < hd/2, optionally rescaled by Llama 3.1's "llama3" rule (transformers'
_compute_llama3_parameters). Qwen2 differs from Llama only in its q/k/v biases (attention_bias)
and its constants. The CPU reference of this math is test/llama_ref.c.

Parameter tensors (llama_parameter_tensors), contiguous in this order, the per-layer ones
stacked over the L layers:
    embed    (Vp, C)              model.embed_tokens.weight (rows V..Vp: padding, 0)
    ln1w     (L, C)               input_layernorm.weight
    qkvw     (L, (NH+2NKV) hd, C) q_proj, k_proj, v_proj weights' rows, stacked in that order
    qkvb     (L, (NH+2NKV) hd)    q/k/v biases             (only with attention_bias: Qwen2)
    attprojw (L, C, NH hd)        o_proj.weight
    ln2w     (L, C)               post_attention_layernorm.weight
    gateupw  (L, 2 I, C)          gate_proj rows then up_proj rows: one GEMM, output [gate | up]
    downw    (L, C, I)            down_proj.weight
    lnfw     (C)                  model.norm.weight
    lm_head  (Vp, C)              lm_head.weight           (only when untied)
AdamW decays the matrices (embed, qkvw, attprojw, gateupw, downw, lm_head), not the norms or
biases. llama_hf_parts / llama_hf_find map each tensor (and layer) to its Hugging Face names and
rows, for the safetensors reader and writer.

Model file (checkpoints; not llm.c's llama3 branch's file, whose magic 20240803 has another
layout): int32 header[256], then the bf16 parameters of the table, in its order.
    [0] 20241202 (magic)   [1] 1 (version: bf16 parameters)   [2] model_type (1 llama, 2 qwen2)
    [3] max_position_embeddings   [4] vocab_size   [5] padded_vocab_size   [6] num_hidden_layers
    [7] num_attention_heads   [8] num_key_value_heads   [9] head_dim   [10] hidden_size
    [11] intermediate_size   [12] tie_word_embeddings (0/1)   [13] attention_bias (0/1)
    [14] rope_scaling (0 none, 1 llama3)   [15] rope original_max_position_embeddings (0 without)
    [16] bos_token_id   [17] eos_token_id   (-1: none)
    [18..29] six doubles as their IEEE-754 bits, each in two words (low word first):
        rms_norm_eps, rope_theta, rope factor, low_freq_factor, high_freq_factor,
        initializer_range (the rope scaling three are 0 without scaling)
    [30..255] 0
  Checked: magic, version, every field (llama_config_check), the unused words 0, and the file
  size == 1024 + 2 * num_parameters exactly; every error names the file and the field.
*/
#ifndef LLMC_LLAMA_H
#define LLMC_LLAMA_H

#include "utils.h"  // first: it sets the POSIX feature macros

#include <limits.h>
#include <math.h>

#include "bf16.h"
#include "mfu.h"
#include "model.h"
#include "rand.h"
#include "rope.h"

#define LLAMA_MODEL_MAGIC 20241202
#define LLAMA_MODEL_VERSION_BF16 1
#define LLAMA_HEADER_INTS 256
#define LLAMA_HEADER_BYTES (LLAMA_HEADER_INTS * 4)
#define LLAMA_HEADER_USED 30  // header words 30..255 are 0

// the largest vocabulary whose padding (to a multiple of 128, as llm.c pads) fits an int
#define LLAMA_MAX_VOCAB (INT_MAX / 128 * 128)
#define LLAMA_MAX_TENSORS 10

// model_type: which published family the configuration is
#define LLAMA_TYPE_LLAMA 1  // "llama": Llama 3.x
#define LLAMA_TYPE_QWEN2 2  // "qwen2": Qwen2 / Qwen2.5

// rope_scaling
#define LLAMA_ROPE_NONE 0    // plain RoPE (rope_scaling null)
#define LLAMA_ROPE_LLAMA3 1  // {"rope_type": "llama3", ...}: Llama 3.1's frequency rescaling

// ----------------------------------------------------------------------------
// configuration

typedef struct {
    int model_type;               // LLAMA_TYPE_LLAMA or LLAMA_TYPE_QWEN2
    int hidden_size;              // C
    int num_hidden_layers;        // L
    int num_attention_heads;      // NH
    int num_key_value_heads;      // NKV: NH is a multiple of it (grouped-query attention)
    int head_dim;                 // hd = C / NH
    int intermediate_size;        // I: the MLP's width
    int vocab_size;               // V
    int padded_vocab_size;        // Vp: a multiple of 128, >= V (the LM head's rows; V..Vp padding)
    int max_position_embeddings;  // maxT
    int tie_word_embeddings;      // 1: the LM head is the embedding
    int attention_bias;           // 1: q/k/v projections have biases (Qwen2; never o_proj here)
    int rope_scaling;             // LLAMA_ROPE_NONE or LLAMA_ROPE_LLAMA3
    int rope_original_max_position_embeddings;  // llama3 scaling's original context (0 without)
    int bos_token_id;             // -1: none (for data preparation; the model does not use them)
    int eos_token_id;
    double rms_norm_eps;
    double rope_theta;
    double rope_factor;           // llama3 scaling: low frequencies are divided by it (0 without)
    double rope_low_freq_factor;  // wavelengths above original / low are scaled fully
    double rope_high_freq_factor; // wavelengths below original / high are kept
    double initializer_range;     // the std of the normal initialisation (0.02)
} LlamaConfig;

static inline const char *llama_model_type_name(int model_type) {
    return model_type == LLAMA_TYPE_LLAMA ? "llama" : model_type == LLAMA_TYPE_QWEN2 ? "qwen2" : "unknown";
}

// Rows of the fused q/k/v projection: (NH + 2 NKV) * hd.
static inline size_t llama_qkv_rows(const LlamaConfig *c) {
    return ((size_t)c->num_attention_heads + 2 * (size_t)c->num_key_value_heads) * (size_t)c->head_dim;
}

// ----------------------------------------------------------------------------
// the parameter tensors: one table

// Fills t with the model's tensors (the config must pass llama_config_check); returns how many
// (8 to 10: qkvb only with attention_bias, lm_head only when untied).
static inline int llama_parameter_tensors(const LlamaConfig *c, ParameterTensor t[LLAMA_MAX_TENSORS]) {
    const size_t Vp = (size_t)c->padded_vocab_size, C = (size_t)c->hidden_size, L = (size_t)c->num_hidden_layers;
    const size_t I = (size_t)c->intermediate_size, QKV = llama_qkv_rows(c);
    const size_t AH = (size_t)c->num_attention_heads * (size_t)c->head_dim;  // the attention's output width
    size_t offset = 0;
    int n = 0;
    // (name, the shape d0, d1, d2 (0: no such dimension), weight decay, stacked over the layers)
    model_tensor_spec(&t[n++], "embed", Vp, C, 0, 1, 0, &offset);
    model_tensor_spec(&t[n++], "ln1w", L, C, 0, 0, 1, &offset);
    model_tensor_spec(&t[n++], "qkvw", L, QKV, C, 1, 1, &offset);
    if (c->attention_bias) model_tensor_spec(&t[n++], "qkvb", L, QKV, 0, 0, 1, &offset);
    model_tensor_spec(&t[n++], "attprojw", L, C, AH, 1, 1, &offset);
    model_tensor_spec(&t[n++], "ln2w", L, C, 0, 0, 1, &offset);
    model_tensor_spec(&t[n++], "gateupw", L, 2 * I, C, 1, 1, &offset);
    model_tensor_spec(&t[n++], "downw", L, C, I, 1, 1, &offset);
    model_tensor_spec(&t[n++], "lnfw", C, 0, 0, 0, 0, &offset);
    if (!c->tie_word_embeddings) model_tensor_spec(&t[n++], "lm_head", Vp, C, 0, 1, 0, &offset);
    return n;
}

static inline size_t llama_num_parameters(const LlamaConfig *c) {
    ParameterTensor t[LLAMA_MAX_TENSORS];
    const int n = llama_parameter_tensors(c, t);
    return t[n - 1].offset + t[n - 1].numel;
}

// Named pointers into a flat float buffer; a tensor the model lacks (qkvb, lm_head) is NULL.
// Layer l of a stacked tensor starts at name + l * numel / L.
typedef struct {
    float *embed, *ln1w, *qkvw, *qkvb, *attprojw, *ln2w, *gateupw, *downw, *lnfw, *lm_head;
} LlamaFloatTensors;

static inline void llama_point_floats(LlamaFloatTensors *p, float *base, const LlamaConfig *c) {
    ParameterTensor t[LLAMA_MAX_TENSORS];
    const int n = llama_parameter_tensors(c, t);
    memset(p, 0, sizeof(*p));
    for (int i = 0; i < n; i++) {
        float *at = base + t[i].offset;
        const char *s = t[i].name;
        if (strcmp(s, "embed") == 0) p->embed = at;
        else if (strcmp(s, "ln1w") == 0) p->ln1w = at;
        else if (strcmp(s, "qkvw") == 0) p->qkvw = at;
        else if (strcmp(s, "qkvb") == 0) p->qkvb = at;
        else if (strcmp(s, "attprojw") == 0) p->attprojw = at;
        else if (strcmp(s, "ln2w") == 0) p->ln2w = at;
        else if (strcmp(s, "gateupw") == 0) p->gateupw = at;
        else if (strcmp(s, "downw") == 0) p->downw = at;
        else if (strcmp(s, "lnfw") == 0) p->lnfw = at;
        else if (strcmp(s, "lm_head") == 0) p->lm_head = at;
    }
}

// ----------------------------------------------------------------------------
// checks

// The rotary embedding of the configuration, in llmc/rope.h's terms (its tables and checks).
static inline void llama_rope_of(const LlamaConfig *c, RopeConfig *r) {
    memset(r, 0, sizeof(*r));
    r->type = c->rope_scaling == LLAMA_ROPE_LLAMA3 ? ROPE_LLAMA3 : ROPE_DEFAULT;
    r->head_dim = c->head_dim;
    r->theta = c->rope_theta;
    r->factor = c->rope_factor;
    r->low_freq_factor = c->rope_low_freq_factor;
    r->high_freq_factor = c->rope_high_freq_factor;
    r->original_max_position_embeddings = c->rope_original_max_position_embeddings;
}

// Checks every field; 0, or -1 with a message naming the field (its Hugging Face name).
static inline int llama_config_check(const LlamaConfig *c, char *err, size_t err_len) {
    if (c->model_type != LLAMA_TYPE_LLAMA && c->model_type != LLAMA_TYPE_QWEN2) {
        llmc_set_error(err, err_len, "model_type %d is neither %d (llama) nor %d (qwen2)", c->model_type,
                       LLAMA_TYPE_LLAMA, LLAMA_TYPE_QWEN2);
        return -1;
    }
    const struct { const char *name; int value; } sizes[] = {
        {"hidden_size", c->hidden_size},
        {"num_hidden_layers", c->num_hidden_layers},
        {"num_attention_heads", c->num_attention_heads},
        {"num_key_value_heads", c->num_key_value_heads},
        {"head_dim", c->head_dim},
        {"intermediate_size", c->intermediate_size},
        {"vocab_size", c->vocab_size},
        {"padded_vocab_size", c->padded_vocab_size},
        {"max_position_embeddings", c->max_position_embeddings},
    };
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        if (sizes[i].value < 1) {
            llmc_set_error(err, err_len, "%s %d must be >= 1", sizes[i].name, sizes[i].value);
            return -1;
        }
    }
    if (c->hidden_size % c->num_attention_heads != 0) {
        llmc_set_error(err, err_len, "num_attention_heads %d does not divide hidden_size %d", c->num_attention_heads,
                       c->hidden_size);
        return -1;
    }
    if (c->head_dim != c->hidden_size / c->num_attention_heads) {
        llmc_set_error(err, err_len, "head_dim %d is not hidden_size / num_attention_heads = %d / %d", c->head_dim,
                       c->hidden_size, c->num_attention_heads);
        return -1;
    }
    if (c->num_key_value_heads > c->num_attention_heads || c->num_attention_heads % c->num_key_value_heads != 0) {
        llmc_set_error(err, err_len, "num_key_value_heads %d does not divide num_attention_heads %d",
                       c->num_key_value_heads, c->num_attention_heads);
        return -1;
    }
    if (c->hidden_size % 8 != 0) {
        llmc_set_error(err, err_len, "hidden_size %d is not a multiple of 8 (the trainer's kernels need it)",
                       c->hidden_size);
        return -1;
    }
    if (c->intermediate_size % 8 != 0) {
        llmc_set_error(err, err_len, "intermediate_size %d is not a multiple of 8 (the trainer's kernels need it)",
                       c->intermediate_size);
        return -1;
    }
    if (c->head_dim % 2 != 0) {
        llmc_set_error(err, err_len, "head_dim %d is odd: rotate-half RoPE pairs dimension i with i + head_dim / 2",
                       c->head_dim);
        return -1;
    }
    if (c->head_dim != 16 && c->head_dim != 32 && c->head_dim != 64 && c->head_dim != 128) {
        llmc_set_error(err, err_len, "head_dim %d: the trainer's attention kernels take 16, 32, 64 or 128",
                       c->head_dim);
        return -1;
    }
    if (c->vocab_size > LLAMA_MAX_VOCAB) {
        llmc_set_error(err, err_len, "vocab_size %d is above %d", c->vocab_size, LLAMA_MAX_VOCAB);
        return -1;
    }
    if (c->padded_vocab_size < c->vocab_size || c->padded_vocab_size % 128 != 0) {
        llmc_set_error(err, err_len, "padded_vocab_size %d is not a multiple of 128 >= vocab_size %d",
                       c->padded_vocab_size, c->vocab_size);
        return -1;
    }
    const struct { const char *name; int value; } flags[] = {
        {"tie_word_embeddings", c->tie_word_embeddings},
        {"attention_bias", c->attention_bias},
    };
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
        if (flags[i].value != 0 && flags[i].value != 1) {
            llmc_set_error(err, err_len, "%s %d is neither 0 nor 1", flags[i].name, flags[i].value);
            return -1;
        }
    }
    // Qwen2's q/k/v projections always have biases; Llama's attention_bias would also give
    // o_proj one, which this table has no place for
    if (c->attention_bias != (c->model_type == LLAMA_TYPE_QWEN2)) {
        llmc_set_error(err, err_len, "attention_bias %d with model_type %s (qwen2 has q/k/v biases, llama none here)",
                       c->attention_bias, llama_model_type_name(c->model_type));
        return -1;
    }
    const struct { const char *name; int value; } ids[] = {
        {"bos_token_id", c->bos_token_id},
        {"eos_token_id", c->eos_token_id},
    };
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        if (ids[i].value < -1 || ids[i].value >= c->vocab_size) {
            llmc_set_error(err, err_len, "%s %d is neither -1 (none) nor in [0, vocab_size %d)", ids[i].name,
                           ids[i].value, c->vocab_size);
            return -1;
        }
    }
    if (!(c->rms_norm_eps > 0.0) || !isfinite(c->rms_norm_eps)) {
        llmc_set_error(err, err_len, "rms_norm_eps %g must be finite and > 0", c->rms_norm_eps);
        return -1;
    }
    if (!(c->initializer_range > 0.0) || !isfinite(c->initializer_range)) {
        llmc_set_error(err, err_len, "initializer_range %g must be finite and > 0", c->initializer_range);
        return -1;
    }
    if (c->rope_scaling == LLAMA_ROPE_NONE) {
        if (c->rope_factor != 0.0 || c->rope_low_freq_factor != 0.0 || c->rope_high_freq_factor != 0.0 ||
            c->rope_original_max_position_embeddings != 0) {
            llmc_set_error(err, err_len, "rope_scaling none with factor %g, low_freq_factor %g, high_freq_factor %g, "
                           "original_max_position_embeddings %d (all must be 0)", c->rope_factor,
                           c->rope_low_freq_factor, c->rope_high_freq_factor,
                           c->rope_original_max_position_embeddings);
            return -1;
        }
    } else if (c->rope_scaling != LLAMA_ROPE_LLAMA3) {
        llmc_set_error(err, err_len, "rope_scaling %d is neither %d (none) nor %d (llama3)", c->rope_scaling,
                       LLAMA_ROPE_NONE, LLAMA_ROPE_LLAMA3);
        return -1;
    }
    // rope_theta and the llama3 scaling's fields (transformers' _validate_llama3_parameters)
    RopeConfig rc;
    llama_rope_of(c, &rc);
    if (rope_config_check(&rc, err, err_len) != 0) return -1;
    // the parameter count in 64 bits, leaving room for 4-byte elements in an int64 file size
    // (every size is an int and, by the checks above, NH hd = C and NKV <= NH, so each product
    // below is under 3 * 2^62; sums of a few terms under the limit, 2^61, cannot wrap)
    const uint64_t C = (uint64_t)c->hidden_size, I = (uint64_t)c->intermediate_size;
    const uint64_t QKV = ((uint64_t)c->num_attention_heads + 2 * (uint64_t)c->num_key_value_heads) * (uint64_t)c->head_dim;
    const uint64_t AH = (uint64_t)c->num_attention_heads * (uint64_t)c->head_dim;
    const uint64_t limit = ((uint64_t)INT64_MAX - LLAMA_HEADER_BYTES) / 4;
    const uint64_t qkv_w = QKV * C, o_w = C * AH, mlp_w = 3 * I * C, vocab_w = (uint64_t)c->padded_vocab_size * C;
    uint64_t layers = 0;
    int bad = qkv_w > limit || o_w > limit || mlp_w > limit || vocab_w > limit;
    const uint64_t per_layer = bad ? 0 : qkv_w + (c->attention_bias ? QKV : 0) + o_w + mlp_w + 2 * C;
    bad = bad || per_layer > limit || llmc_mul_u64(per_layer, (uint64_t)c->num_hidden_layers, &layers) != 0 ||
          layers > limit || layers + vocab_w * (c->tie_word_embeddings ? 1 : 2) + C > limit;
    if (bad) {
        llmc_set_error(err, err_len, "sizes give too many parameters (hidden_size %d, intermediate_size %d, "
                       "num_hidden_layers %d, padded_vocab_size %d)", c->hidden_size, c->intermediate_size,
                       c->num_hidden_layers, c->padded_vocab_size);
        return -1;
    }
    return 0;
}

// 0 if a and b are the same model; otherwise -1 with the differing fields ("vocab_size 1 vs 2, ...").
static inline int llama_config_compare(const LlamaConfig *a, const LlamaConfig *b, char *err, size_t err_len) {
    const struct { const char *name; int a, b; } f[] = {
        {"model_type", a->model_type, b->model_type},
        {"vocab_size", a->vocab_size, b->vocab_size},
        {"padded_vocab_size", a->padded_vocab_size, b->padded_vocab_size},
        {"num_hidden_layers", a->num_hidden_layers, b->num_hidden_layers},
        {"hidden_size", a->hidden_size, b->hidden_size},
        {"num_attention_heads", a->num_attention_heads, b->num_attention_heads},
        {"num_key_value_heads", a->num_key_value_heads, b->num_key_value_heads},
        {"head_dim", a->head_dim, b->head_dim},
        {"intermediate_size", a->intermediate_size, b->intermediate_size},
        {"max_position_embeddings", a->max_position_embeddings, b->max_position_embeddings},
        {"tie_word_embeddings", a->tie_word_embeddings, b->tie_word_embeddings},
        {"attention_bias", a->attention_bias, b->attention_bias},
        {"rope_scaling", a->rope_scaling, b->rope_scaling},
        {"rope original_max_position_embeddings", a->rope_original_max_position_embeddings,
         b->rope_original_max_position_embeddings},
        {"bos_token_id", a->bos_token_id, b->bos_token_id},
        {"eos_token_id", a->eos_token_id, b->eos_token_id},
    };
    const struct { const char *name; double a, b; } d[] = {
        {"rms_norm_eps", a->rms_norm_eps, b->rms_norm_eps},
        {"rope_theta", a->rope_theta, b->rope_theta},
        {"rope factor", a->rope_factor, b->rope_factor},
        {"rope low_freq_factor", a->rope_low_freq_factor, b->rope_low_freq_factor},
        {"rope high_freq_factor", a->rope_high_freq_factor, b->rope_high_freq_factor},
        {"initializer_range", a->initializer_range, b->initializer_range},
    };
    char buf[1024] = "";
    size_t used = 0;
    int differ = 0;
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
        if (f[i].a == f[i].b) continue;
        int n = snprintf(buf + used, sizeof(buf) - used, "%s%s %d vs %d", differ ? ", " : "", f[i].name, f[i].a, f[i].b);
        if (n > 0 && used + (size_t)n < sizeof(buf)) used += (size_t)n;
        differ = 1;
    }
    for (size_t i = 0; i < sizeof(d) / sizeof(d[0]); i++) {
        if (memcmp(&d[i].a, &d[i].b, sizeof(double)) == 0) continue;  // the same bits
        int n = snprintf(buf + used, sizeof(buf) - used, "%s%s %.17g vs %.17g", differ ? ", " : "", d[i].name, d[i].a,
                         d[i].b);
        if (n > 0 && used + (size_t)n < sizeof(buf)) used += (size_t)n;
        differ = 1;
    }
    llmc_set_error(err, err_len, "%s", buf);
    return differ ? -1 : 0;
}

// ----------------------------------------------------------------------------
// descriptors: the published configurations (their config.json) and small test models

typedef struct {
    const char *name;
    int model_type, hidden, layers, heads, kv_heads, intermediate, vocab, max_pos, tied, bias;
    int rope_scaling, rope_original;
    double eps, theta, rope_factor, rope_low, rope_high;
    int bos, eos;
} LlamaDescriptor;

// The i-th descriptor, or NULL past the last.
static inline const LlamaDescriptor *llama_descriptor_at(int i) {
    static const LlamaDescriptor table[] = {
        // name          type              C     L   NH  NKV  I      V       maxT    tied bias rope              orig
        {"llama3.2-1b", LLAMA_TYPE_LLAMA, 2048, 16, 32, 8, 8192, 128256, 131072, 1, 0, LLAMA_ROPE_LLAMA3, 8192,
         1e-5, 500000.0, 32.0, 1.0, 4.0, 128000, 128001},
        {"llama3.2-3b", LLAMA_TYPE_LLAMA, 3072, 28, 24, 8, 8192, 128256, 131072, 1, 0, LLAMA_ROPE_LLAMA3, 8192,
         1e-5, 500000.0, 32.0, 1.0, 4.0, 128000, 128001},
        {"llama3.1-8b", LLAMA_TYPE_LLAMA, 4096, 32, 32, 8, 14336, 128256, 131072, 0, 0, LLAMA_ROPE_LLAMA3, 8192,
         1e-5, 500000.0, 8.0, 1.0, 4.0, 128000, 128001},
        {"qwen2.5-0.5b", LLAMA_TYPE_QWEN2, 896, 24, 14, 2, 4864, 151936, 32768, 1, 1, LLAMA_ROPE_NONE, 0,
         1e-6, 1000000.0, 0.0, 0.0, 0.0, 151643, 151643},
        {"qwen2.5-1.5b", LLAMA_TYPE_QWEN2, 1536, 28, 12, 2, 8960, 151936, 32768, 1, 1, LLAMA_ROPE_NONE, 0,
         1e-6, 1000000.0, 0.0, 0.0, 0.0, 151643, 151643},
        // test models with every feature at head_dim 64 (the Hopper attention's head size):
        // Llama 3.1's rope scaling and an untied head; Qwen2.5's biases, constants and tied head
        {"llama-test", LLAMA_TYPE_LLAMA, 512, 4, 8, 2, 1408, 128256, 131072, 0, 0, LLAMA_ROPE_LLAMA3, 8192,
         1e-5, 500000.0, 8.0, 1.0, 4.0, 128000, 128001},
        {"qwen-test", LLAMA_TYPE_QWEN2, 512, 4, 8, 2, 1408, 151936, 32768, 1, 1, LLAMA_ROPE_NONE, 0,
         1e-6, 1000000.0, 0.0, 0.0, 0.0, 151643, 151643},
    };
    return i >= 0 && i < (int)(sizeof(table) / sizeof(table[0])) ? &table[i] : NULL;
}

static inline const LlamaDescriptor *llama_descriptor(const char *name) {
    for (int i = 0; llama_descriptor_at(i) != NULL; i++)
        if (strcmp(llama_descriptor_at(i)->name, name) == 0) return llama_descriptor_at(i);
    return NULL;
}

// 1 if arg is the whole name of a descriptor ("qwen2.5-0.5b/model.bin" is a path).
static inline int llama_is_descriptor(const char *arg) { return llama_descriptor(arg) != NULL; }

// The configuration of a descriptor with a vocabulary of vocab tokens (0: its own), padded to a
// multiple of 128 as llm.c pads; a bos/eos id outside a smaller vocabulary becomes -1.
static inline int llama_config_from_descriptor(const char *desc, int vocab, LlamaConfig *c, char *err, size_t err_len) {
    const LlamaDescriptor *d = llama_descriptor(desc);
    if (d == NULL) {
        llmc_set_error(err, err_len, "unknown Llama/Qwen descriptor '%s'", desc);
        return -1;
    }
    if (vocab < 0 || vocab > LLAMA_MAX_VOCAB) {
        llmc_set_error(err, err_len, "vocabulary size %d outside 1..%d", vocab, LLAMA_MAX_VOCAB);
        return -1;
    }
    memset(c, 0, sizeof(*c));
    c->model_type = d->model_type;
    c->hidden_size = d->hidden;
    c->num_hidden_layers = d->layers;
    c->num_attention_heads = d->heads;
    c->num_key_value_heads = d->kv_heads;
    c->head_dim = d->hidden / d->heads;
    c->intermediate_size = d->intermediate;
    c->vocab_size = vocab > 0 ? vocab : d->vocab;
    c->padded_vocab_size = (int)(((long long)c->vocab_size + 127) / 128 * 128);
    c->max_position_embeddings = d->max_pos;
    c->tie_word_embeddings = d->tied;
    c->attention_bias = d->bias;
    c->rope_scaling = d->rope_scaling;
    c->rope_original_max_position_embeddings = d->rope_original;
    c->bos_token_id = d->bos < c->vocab_size ? d->bos : -1;
    c->eos_token_id = d->eos < c->vocab_size ? d->eos : -1;
    c->rms_norm_eps = d->eps;
    c->rope_theta = d->theta;
    c->rope_factor = d->rope_factor;
    c->rope_low_freq_factor = d->rope_low;
    c->rope_high_freq_factor = d->rope_high;
    c->initializer_range = 0.02;
    return 0;
}

// ----------------------------------------------------------------------------
// transformers' initialisation

/*
LlamaPreTrainedModel._init_weights (Qwen2's is the same): every nn.Linear and the nn.Embedding
normal(0, initializer_range), biases 0, RMSNorm weights 1; here also the padding rows V..Vp 0.
Deterministic: mt19937 seeded with 42 (llmc/rand.h, PyTorch's CPU generator), one normal_ call
per Hugging Face tensor in transformers' module order: embed_tokens (its V rows); then per
layer q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj; then lm_head (its V rows)
when untied. (transformers draws a Linear's default init first and the config's init over it,
so its values from a seed differ; the distribution is the same.)
*/
static inline void llama_init_random(const LlamaConfig *c, float *host) {
    const size_t C = (size_t)c->hidden_size, L = (size_t)c->num_hidden_layers, V = (size_t)c->vocab_size;
    const size_t I = (size_t)c->intermediate_size, hd = (size_t)c->head_dim;
    const size_t NH = (size_t)c->num_attention_heads, NKV = (size_t)c->num_key_value_heads, QKV = llama_qkv_rows(c);
    const double std = c->initializer_range;
    LlamaFloatTensors p;
    llama_point_floats(&p, host, c);
    memset(host, 0, llama_num_parameters(c) * sizeof(float));
    mt19937_state rng;
    manual_seed(&rng, 42);
    normal_(p.embed, V * C, 0.0, std, &rng);
    for (size_t l = 0; l < L; l++) {
        float *qkv = p.qkvw + l * QKV * C;
        normal_(qkv, NH * hd * C, 0.0, std, &rng);                      // q_proj
        normal_(qkv + NH * hd * C, NKV * hd * C, 0.0, std, &rng);       // k_proj
        normal_(qkv + (NH + NKV) * hd * C, NKV * hd * C, 0.0, std, &rng);  // v_proj
        normal_(p.attprojw + l * C * NH * hd, C * NH * hd, 0.0, std, &rng);  // o_proj
        normal_(p.gateupw + l * 2 * I * C, I * C, 0.0, std, &rng);      // gate_proj
        normal_(p.gateupw + l * 2 * I * C + I * C, I * C, 0.0, std, &rng);  // up_proj
        normal_(p.downw + l * C * I, C * I, 0.0, std, &rng);            // down_proj
        for (size_t k = 0; k < C; k++) p.ln1w[l * C + k] = p.ln2w[l * C + k] = 1.0f;
    }
    for (size_t k = 0; k < C; k++) p.lnfw[k] = 1.0f;
    if (p.lm_head != NULL) normal_(p.lm_head, V * C, 0.0, std, &rng);
}

// ----------------------------------------------------------------------------
// Hugging Face names

#define LLAMA_HF_NAME_LEN 96
#define LLAMA_HF_MAX_PARTS 3

// One Hugging Face tensor: a block of rows of one layer of one of our tensors.
typedef struct {
    char name[LLAMA_HF_NAME_LEN];  // "model.layers.3.self_attn.q_proj.weight"
    int tensor;                    // our tensor: its index in llama_parameter_tensors' table
    int layer;                     // its layer, -1 outside the layers
    size_t row0, rows;             // the rows of our tensor (its layer's slice) it holds
    size_t cols;                   // the row length; 1 for a vector
    int ndim;                      // Hugging Face's shape: (rows, cols) when 2, (rows) when 1
    size_t offset;                 // its first element in the flat parameter buffer
} LlamaHFTensor;

static inline void llama_hf_set_(LlamaHFTensor *h, const ParameterTensor *t, int tensor, int layer, size_t row0,
                                 size_t rows, const char *suffix) {
    const int matrix = t->ndim == (t->layered ? 3 : 2);  // a weight matrix, else a vector (norm, bias)
    const size_t cols = matrix ? t->shape[t->ndim - 1] : 1;
    const size_t slice = t->layered ? t->numel / t->shape[0] : t->numel;  // one layer's elements
    memset(h, 0, sizeof(*h));
    if (layer >= 0) snprintf(h->name, sizeof(h->name), "model.layers.%d.%s", layer, suffix);
    else snprintf(h->name, sizeof(h->name), "%s", suffix);
    h->tensor = tensor;
    h->layer = layer;
    h->row0 = row0;
    h->rows = rows;
    h->cols = cols;
    h->ndim = matrix ? 2 : 1;
    h->offset = t->offset + (layer >= 0 ? (size_t)layer * slice : 0) + row0 * cols;
}

// The Hugging Face tensors of our tensor number `tensor` (of llama_parameter_tensors' table) at
// `layer` (ignored, and -1 in the result, for a tensor outside the layers), in row order: 1 to 3
// parts (qkvw's q_proj, k_proj, v_proj rows; gateupw's gate_proj, up_proj rows), or -1 for a
// tensor or layer the model lacks. embed and lm_head hold V rows (Vp - V padding rows are ours).
static inline int llama_hf_parts(const LlamaConfig *c, int tensor, int layer, LlamaHFTensor parts[LLAMA_HF_MAX_PARTS]) {
    ParameterTensor t[LLAMA_MAX_TENSORS];
    const int n = llama_parameter_tensors(c, t);
    if (tensor < 0 || tensor >= n) return -1;
    const ParameterTensor *p = &t[tensor];
    if (p->layered && (layer < 0 || layer >= c->num_hidden_layers)) return -1;
    if (!p->layered) layer = -1;
    const size_t V = (size_t)c->vocab_size, C = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    const size_t Q = (size_t)c->num_attention_heads * (size_t)c->head_dim;
    const size_t KV = (size_t)c->num_key_value_heads * (size_t)c->head_dim;
    const char *s = p->name;
    if (strcmp(s, "embed") == 0) {
        llama_hf_set_(&parts[0], p, tensor, layer, 0, V, "model.embed_tokens.weight");
    } else if (strcmp(s, "ln1w") == 0) {
        llama_hf_set_(&parts[0], p, tensor, layer, 0, C, "input_layernorm.weight");
    } else if (strcmp(s, "qkvw") == 0 || strcmp(s, "qkvb") == 0) {
        const int w = s[3] == 'w';
        llama_hf_set_(&parts[0], p, tensor, layer, 0, Q, w ? "self_attn.q_proj.weight" : "self_attn.q_proj.bias");
        llama_hf_set_(&parts[1], p, tensor, layer, Q, KV, w ? "self_attn.k_proj.weight" : "self_attn.k_proj.bias");
        llama_hf_set_(&parts[2], p, tensor, layer, Q + KV, KV, w ? "self_attn.v_proj.weight" : "self_attn.v_proj.bias");
        return 3;
    } else if (strcmp(s, "attprojw") == 0) {
        llama_hf_set_(&parts[0], p, tensor, layer, 0, C, "self_attn.o_proj.weight");
    } else if (strcmp(s, "ln2w") == 0) {
        llama_hf_set_(&parts[0], p, tensor, layer, 0, C, "post_attention_layernorm.weight");
    } else if (strcmp(s, "gateupw") == 0) {
        llama_hf_set_(&parts[0], p, tensor, layer, 0, I, "mlp.gate_proj.weight");
        llama_hf_set_(&parts[1], p, tensor, layer, I, I, "mlp.up_proj.weight");
        return 2;
    } else if (strcmp(s, "downw") == 0) {
        llama_hf_set_(&parts[0], p, tensor, layer, 0, C, "mlp.down_proj.weight");
    } else if (strcmp(s, "lnfw") == 0) {
        llama_hf_set_(&parts[0], p, tensor, layer, 0, C, "model.norm.weight");
    } else if (strcmp(s, "lm_head") == 0) {
        llama_hf_set_(&parts[0], p, tensor, layer, 0, V, "lm_head.weight");
    } else {
        return -1;
    }
    return 1;
}

// How many Hugging Face tensors the model has (its checkpoint's tensor count).
static inline size_t llama_hf_num_tensors(const LlamaConfig *c) {
    const size_t per_layer = 9 + (c->attention_bias ? 3 : 0);
    return (size_t)c->num_hidden_layers * per_layer + 2 + (c->tie_word_embeddings ? 0 : 1);
}

// The k-th Hugging Face tensor in our order (table order, layer by layer, part by part); 0, or
// -1 past the last.
static inline int llama_hf_tensor(const LlamaConfig *c, size_t k, LlamaHFTensor *out) {
    ParameterTensor t[LLAMA_MAX_TENSORS];
    const int n = llama_parameter_tensors(c, t);
    LlamaHFTensor parts[LLAMA_HF_MAX_PARTS];
    for (int i = 0; i < n; i++) {
        const int layers = t[i].layered ? c->num_hidden_layers : 1;
        for (int l = 0; l < layers; l++) {
            const int np = llama_hf_parts(c, i, t[i].layered ? l : -1, parts);
            if (np > 0 && k < (size_t)np) {
                *out = parts[k];
                return 0;
            }
            k -= (size_t)(np > 0 ? np : 0);
        }
    }
    return -1;
}

// The Hugging Face tensor called name; 0, or -1 if the model has no such tensor.
static inline int llama_hf_find(const LlamaConfig *c, const char *name, LlamaHFTensor *out) {
    ParameterTensor t[LLAMA_MAX_TENSORS];
    const int n = llama_parameter_tensors(c, t);
    static const char prefix[] = "model.layers.";
    int layer = -1;
    const char *rest = name;
    if (strncmp(name, prefix, sizeof(prefix) - 1) == 0) {
        // a decimal layer number without sign or leading zeros, then '.'
        const char *p = name + sizeof(prefix) - 1;
        long v = 0;
        int digits = 0;
        while (*p >= '0' && *p <= '9' && digits < 10) {
            v = v * 10 + (*p - '0');
            p++;
            digits++;
        }
        if (digits == 0 || *p != '.' || (digits > 1 && name[sizeof(prefix) - 1] == '0') ||
            v >= c->num_hidden_layers)
            return -1;
        layer = (int)v;
        rest = p + 1;
    }
    LlamaHFTensor parts[LLAMA_HF_MAX_PARTS];
    for (int i = 0; i < n; i++) {
        if ((layer >= 0) != (t[i].layered != 0)) continue;
        const int np = llama_hf_parts(c, i, layer, parts);
        for (int j = 0; j < np; j++) {
            const char *suffix = layer >= 0 ? strchr(parts[j].name + sizeof(prefix) - 1, '.') + 1 : parts[j].name;
            if (strcmp(suffix, rest) == 0) {
                *out = parts[j];
                return 0;
            }
        }
    }
    return -1;
}

// ----------------------------------------------------------------------------
// model file

// the names of the header words, for messages ("header[7] num_attention_heads")
static inline const char *llama_header_field(int word) {
    static const char *const names[LLAMA_HEADER_USED] = {
        "magic", "version", "model_type", "max_position_embeddings", "vocab_size", "padded_vocab_size",
        "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_size",
        "intermediate_size", "tie_word_embeddings", "attention_bias", "rope_scaling",
        "rope original_max_position_embeddings", "bos_token_id", "eos_token_id",
        "rms_norm_eps (low word)", "rms_norm_eps (high word)", "rope_theta (low word)", "rope_theta (high word)",
        "rope factor (low word)", "rope factor (high word)", "rope low_freq_factor (low word)",
        "rope low_freq_factor (high word)", "rope high_freq_factor (low word)", "rope high_freq_factor (high word)",
        "initializer_range (low word)", "initializer_range (high word)"};
    return word >= 0 && word < LLAMA_HEADER_USED ? names[word] : "unused";
}

static inline void llama_put_double_(int32_t *h, double v) {
    uint64_t u;
    memcpy(&u, &v, sizeof(u));
    const uint32_t lo = (uint32_t)(u & 0xFFFFFFFFu), hi = (uint32_t)(u >> 32);
    memcpy(&h[0], &lo, 4);
    memcpy(&h[1], &hi, 4);
}

static inline double llama_get_double_(const int32_t *h) {
    uint32_t lo, hi;
    memcpy(&lo, &h[0], 4);
    memcpy(&hi, &h[1], 4);
    const uint64_t u = (uint64_t)lo | ((uint64_t)hi << 32);
    double v;
    memcpy(&v, &u, sizeof(v));
    return v;
}

static inline void llama_config_to_header(const LlamaConfig *c, int32_t h[LLAMA_HEADER_INTS]) {
    memset(h, 0, LLAMA_HEADER_BYTES);
    h[0] = LLAMA_MODEL_MAGIC;
    h[1] = LLAMA_MODEL_VERSION_BF16;
    h[2] = c->model_type;
    h[3] = c->max_position_embeddings;
    h[4] = c->vocab_size;
    h[5] = c->padded_vocab_size;
    h[6] = c->num_hidden_layers;
    h[7] = c->num_attention_heads;
    h[8] = c->num_key_value_heads;
    h[9] = c->head_dim;
    h[10] = c->hidden_size;
    h[11] = c->intermediate_size;
    h[12] = c->tie_word_embeddings;
    h[13] = c->attention_bias;
    h[14] = c->rope_scaling;
    h[15] = c->rope_original_max_position_embeddings;
    h[16] = c->bos_token_id;
    h[17] = c->eos_token_id;
    llama_put_double_(h + 18, c->rms_norm_eps);
    llama_put_double_(h + 20, c->rope_theta);
    llama_put_double_(h + 22, c->rope_factor);
    llama_put_double_(h + 24, c->rope_low_freq_factor);
    llama_put_double_(h + 26, c->rope_high_freq_factor);
    llama_put_double_(h + 28, c->initializer_range);
}

// Checks a header (every field) and the file's size; fills *c and *num_parameters.
static inline int llama_check_header(const int32_t h[LLAMA_HEADER_INTS], int64_t file_bytes, const char *path,
                                     LlamaConfig *c, size_t *num_parameters, char *err, size_t err_len) {
    if (h[0] != LLAMA_MODEL_MAGIC) {
        llmc_set_error(err, err_len, "model file '%s': bad magic %d (expected %d)", path, (int)h[0], LLAMA_MODEL_MAGIC);
        return -1;
    }
    if (h[1] != LLAMA_MODEL_VERSION_BF16) {
        llmc_set_error(err, err_len, "model file '%s': bad version %d (expected %d: bf16 parameters)", path, (int)h[1],
                       LLAMA_MODEL_VERSION_BF16);
        return -1;
    }
    for (int w = LLAMA_HEADER_USED; w < LLAMA_HEADER_INTS; w++) {
        if (h[w] != 0) {
            llmc_set_error(err, err_len, "model file '%s': header[%d] = %d, expected 0 (unused)", path, w, (int)h[w]);
            return -1;
        }
    }
    LlamaConfig k;
    memset(&k, 0, sizeof(k));
    k.model_type = h[2];
    k.max_position_embeddings = h[3];
    k.vocab_size = h[4];
    k.padded_vocab_size = h[5];
    k.num_hidden_layers = h[6];
    k.num_attention_heads = h[7];
    k.num_key_value_heads = h[8];
    k.head_dim = h[9];
    k.hidden_size = h[10];
    k.intermediate_size = h[11];
    k.tie_word_embeddings = h[12];
    k.attention_bias = h[13];
    k.rope_scaling = h[14];
    k.rope_original_max_position_embeddings = h[15];
    k.bos_token_id = h[16];
    k.eos_token_id = h[17];
    k.rms_norm_eps = llama_get_double_(h + 18);
    k.rope_theta = llama_get_double_(h + 20);
    k.rope_factor = llama_get_double_(h + 22);
    k.rope_low_freq_factor = llama_get_double_(h + 24);
    k.rope_high_freq_factor = llama_get_double_(h + 26);
    k.initializer_range = llama_get_double_(h + 28);
    char why[512];
    if (llama_config_check(&k, why, sizeof(why)) != 0) {
        llmc_set_error(err, err_len, "model file '%s': %s", path, why);
        return -1;
    }
    const size_t n = llama_num_parameters(&k);
    const int64_t expected = LLAMA_HEADER_BYTES + (int64_t)n * 2;
    if (file_bytes != expected) {
        llmc_set_error(err, err_len, "model file '%s': file is %lld bytes but the header's %zu bf16 parameters need "
                       "%lld (%s)", path, (long long)file_bytes, n, (long long)expected,
                       file_bytes < expected ? "truncated" : "trailing bytes");
        return -1;
    }
    *c = k;
    *num_parameters = n;
    return 0;
}

// Opens and validates a model file; on success *fp is positioned at the parameters.
static inline int llama_model_open_checked(const char *path, FILE **fp_out, LlamaConfig *c, size_t *num_parameters,
                                           char *err, size_t err_len) {
    *fp_out = NULL;
    FILE *fp = llmc_fopen_read_checked(path, "model file", err, err_len);
    if (fp == NULL) return -1;
    int32_t header[LLAMA_HEADER_INTS];
    int64_t file_bytes = 0;
    if (llmc_file_size(fp, &file_bytes) != 0 || file_bytes < LLAMA_HEADER_BYTES ||
        llmc_read_exact(fp, header, sizeof(header)) != 0) {
        llmc_set_error(err, err_len, "model file '%s': truncated header (file is %lld bytes, the header alone is %d)",
                       path, (long long)file_bytes, LLAMA_HEADER_BYTES);
        fclose(fp);
        return -1;
    }
    if (llama_check_header(header, file_bytes, path, c, num_parameters, err, err_len) != 0) {
        fclose(fp);
        return -1;
    }
    *fp_out = fp;
    return 0;
}

// Reads a model file: *params malloc'd, num_parameters bf16 bits, or with want_fp32 floats.
static inline int llama_model_read_checked(const char *path, LlamaConfig *c, void **params, int want_fp32, char *err,
                                           size_t err_len) {
    *params = NULL;
    FILE *fp;
    size_t n;
    if (llama_model_open_checked(path, &fp, c, &n, err, err_len) != 0) return -1;
    uint16_t *raw = (uint16_t *)malloc(n * 2);
    float *wide = want_fp32 ? (float *)malloc(n * sizeof(float)) : NULL;
    if (raw == NULL || (want_fp32 && wide == NULL)) {
        llmc_set_error(err, err_len, "model file '%s': out of memory for %zu parameters", path, n);
        free(raw);
        free(wide);
        fclose(fp);
        return -1;
    }
    const int rc = llmc_read_exact(fp, raw, n * 2);
    fclose(fp);
    if (rc != 0) {
        llmc_set_error(err, err_len, "model file '%s': read error in the parameters", path);
        free(raw);
        free(wide);
        return -1;
    }
    if (want_fp32) {
        bf16_to_floats(raw, wide, n);
        free(raw);
        *params = wide;
    } else {
        *params = raw;
    }
    return 0;
}

// Writes a model file (atomically): the header of c, then num_parameters bf16 values.
static inline int llama_model_write_checked(const char *path, const LlamaConfig *c, const uint16_t *params, int sync,
                                            char *err, size_t err_len) {
    char why[512];
    if (llama_config_check(c, why, sizeof(why)) != 0) {
        llmc_set_error(err, err_len, "model file '%s': %s", path, why);
        return -1;
    }
    int32_t header[LLAMA_HEADER_INTS];
    llama_config_to_header(c, header);
    AtomicFile af;
    if (atomic_file_open(&af, path, sync) != 0) {
        llmc_set_error(err, err_len, "%s", af.err);
        return -1;
    }
    atomic_file_write(&af, header, sizeof(header));
    atomic_file_write(&af, params, llama_num_parameters(c) * 2);
    if (atomic_file_commit(&af) != 0) {
        llmc_set_error(err, err_len, "%s", af.err);
        return -1;
    }
    return 0;
}

// 1 if the file at path starts with this family's magic (a short or unreadable file: 0).
static inline int llama_is_model_file(const char *path) {
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) return 0;
    int32_t magic = 0;
    const int ok = fread(&magic, sizeof(magic), 1, fp) == 1;
    fclose(fp);
    return ok && magic == LLAMA_MODEL_MAGIC;
}

// ----------------------------------------------------------------------------
// the model of -e: a descriptor or a file

// A descriptor (a fresh model of vocab tokens, 0: its own, initialised as transformers does) or
// one of our model files (vocab does not apply). Fills *c; with params != NULL also *params,
// num_parameters fp32 values, malloc'd (free it). Without params it is cheap.
static inline int llama_load_checked(const char *arg, int vocab, LlamaConfig *c, float **params, char *err,
                                     size_t err_len) {
    if (params != NULL) *params = NULL;
    if (!llama_is_descriptor(arg)) {
        if (params != NULL) return llama_model_read_checked(arg, c, (void **)params, 1, err, err_len);
        FILE *fp;
        size_t n;
        if (llama_model_open_checked(arg, &fp, c, &n, err, err_len) != 0) return -1;
        fclose(fp);
        return 0;
    }
    char why[512];
    if (llama_config_from_descriptor(arg, vocab, c, err, err_len) != 0) return -1;
    if (llama_config_check(c, why, sizeof(why)) != 0) {
        llmc_set_error(err, err_len, "model %s: %s", arg, why);
        return -1;
    }
    if (params == NULL) return 0;
    if (model_params_alloc(arg, llama_num_parameters(c), params, err, err_len) != 0) return -1;
    llama_init_random(c, *params);
    return 0;
}

// ----------------------------------------------------------------------------
// the family as the trainer sees it (llmc/model.h)

typedef char llama_config_fits_a_model_spec[sizeof(LlamaConfig) <= MODEL_CONFIG_BYTES ? 1 : -1];

static inline const LlamaConfig *llama_config_of(const ModelSpec *s) { return (const LlamaConfig *)s->config.bytes; }

static inline const ModelFamily *llama_family(void);

// The spec of a checked configuration: the table, the sizes, the LM head (lm_head, or embed when tied).
static inline void llama_spec(const LlamaConfig *c, ModelSpec *s) {
    ParameterTensor t[LLAMA_MAX_TENSORS];
    const int n = llama_parameter_tensors(c, t);
    model_spec_init(s, llama_family(), c, sizeof(*c), c->vocab_size, c->padded_vocab_size, c->hidden_size,
                    c->num_hidden_layers, c->max_position_embeddings, t, n);
    s->head = c->tie_word_embeddings ? 0 : n - 1;  // embed is first, lm_head last
    s->tokenizer = NULL;  // no family default: -tk, or -e DIR's tokenizer.json, decodes samples
    s->sample_start = c->bos_token_id >= 0 ? c->bos_token_id : c->eos_token_id >= 0 ? c->eos_token_id : 0;
}

static inline int llama_family_write(const char *path, const ModelSpec *s, const uint16_t *params, int sync, char *err,
                                     size_t err_len) {
    return llama_model_write_checked(path, llama_config_of(s), params, sync, err, err_len);
}

static inline int llama_family_read(const char *path, ModelSpec *s, uint16_t **params, char *err, size_t err_len) {
    LlamaConfig c;
    if (llama_model_read_checked(path, &c, (void **)params, 0, err, err_len) != 0) return -1;
    llama_spec(&c, s);
    return 0;
}

static inline int llama_family_compare(const ModelSpec *a, const ModelSpec *b, char *err, size_t err_len) {
    return llama_config_compare(llama_config_of(a), llama_config_of(b), err, err_len);
}

// What the trainer's kernels take: T within max_position_embeddings, hidden and intermediate
// sizes multiples of 8, a head size of 16, 32, 64 or 128 (llama_config_check holds the model
// to them already; a spec from elsewhere is checked again here).
static inline int llama_family_check_run(const ModelSpec *s, int T, char *err, size_t err_len) {
    const LlamaConfig *c = llama_config_of(s);
    if (T < 1 || T > c->max_position_embeddings) {
        llmc_set_error(err, err_len, "T %d outside 1..max_position_embeddings %d", T, c->max_position_embeddings);
        return -1;
    }
    const int hd = c->head_dim;
    if (c->hidden_size % 8 != 0 || c->intermediate_size % 8 != 0 || (hd != 16 && hd != 32 && hd != 64 && hd != 128)) {
        llmc_set_error(err, err_len, "hidden_size %d, intermediate_size %d, head_dim %d; the trainer's kernels need "
                       "the sizes multiples of 8 and a head size of 16, 32, 64 or 128", c->hidden_size,
                       c->intermediate_size, hd);
        return -1;
    }
    return 0;
}

// Training FLOPs per token, as llm.c counts them (PaLM's count, mfu.h): 6 per parameter of a
// matmul (q/k/v, o, gate/up, down over the layers, and the LM head's Vp x C once: the input
// embedding is a lookup, so an untied embedding does not count and a tied one counts once, as
// the head) plus 12 L T (NH hd) for the attention's two products over T positions. Norms and
// biases are left out.
static inline double llama_family_flops(const ModelSpec *s, int T) {
    const LlamaConfig *c = llama_config_of(s);
    const double C = c->hidden_size, I = c->intermediate_size, AH = (double)c->num_attention_heads * c->head_dim;
    const double per_layer = (double)llama_qkv_rows(c) * C + C * AH + 3.0 * I * C;
    const double matmul = per_layer * c->num_hidden_layers + (double)c->padded_vocab_size * C;
    return 6.0 * matmul + 12.0 * c->num_hidden_layers * (double)T * AH;
}

static inline int llama_family_describe(const ModelSpec *s, int line, char *name, size_t name_len, char *value,
                                        size_t value_len) {
    const LlamaConfig *c = llama_config_of(s);
    switch (line) {
    case 0:
        snprintf(name, name_len, "model type");
        snprintf(value, value_len, "%s", llama_model_type_name(c->model_type));
        return 0;
    case 1:
        snprintf(name, name_len, "layers");
        snprintf(value, value_len, "%d", c->num_hidden_layers);
        return 0;
    case 2:
        snprintf(name, name_len, "heads / kv heads");
        snprintf(value, value_len, "%d / %d (head dim %d)", c->num_attention_heads, c->num_key_value_heads,
                 c->head_dim);
        return 0;
    case 3:
        snprintf(name, name_len, "hidden size");
        snprintf(value, value_len, "%d", c->hidden_size);
        return 0;
    case 4:
        snprintf(name, name_len, "intermediate size");
        snprintf(value, value_len, "%d", c->intermediate_size);
        return 0;
    case 5:
        snprintf(name, name_len, "vocab size");
        snprintf(value, value_len, "%d (padded %d)", c->vocab_size, c->padded_vocab_size);
        return 0;
    case 6:
        snprintf(name, name_len, "max_seq_len");
        snprintf(value, value_len, "%d", c->max_position_embeddings);
        return 0;
    case 7:
        snprintf(name, name_len, "rope");
        if (c->rope_scaling == LLAMA_ROPE_LLAMA3)
            snprintf(value, value_len, "theta %g, llama3 x%g low %g high %g orig %d", c->rope_theta,
                     c->rope_factor, c->rope_low_freq_factor, c->rope_high_freq_factor,
                     c->rope_original_max_position_embeddings);
        else
            snprintf(value, value_len, "theta %g", c->rope_theta);
        return 0;
    case 8:
        snprintf(name, name_len, "rms_norm_eps");
        snprintf(value, value_len, "%g", c->rms_norm_eps);
        return 0;
    case 9:
        snprintf(name, name_len, "tied embeddings");
        snprintf(value, value_len, "%s", c->tie_word_embeddings ? "yes" : "no");
        return 0;
    case 10:
        snprintf(name, name_len, "q/k/v bias");
        snprintf(value, value_len, "%s", c->attention_bias ? "yes" : "no");
        return 0;
    default:
        return -1;
    }
}

static inline const ModelFamily *llama_family(void) {
    static const ModelFamily family = {"llama", llama_family_write, llama_family_read, llama_family_compare,
                                       llama_family_check_run, llama_family_flops, llama_family_describe};
    return &family;
}

#endif // LLMC_LLAMA_H
