/*
hf_config.h - a Hugging Face config.json, read into our model configurations (llmc/llama.h's
LlamaConfig, llmc/gpt2.h's GPT2Config) and written back from them, through cJSON.

Families (from model_type; architectures, when given, must name only the class of that type):
    "llama"  LlamaForCausalLM   -> LlamaConfig, model_type LLAMA_TYPE_LLAMA
    "qwen2"  Qwen2ForCausalLM   -> LlamaConfig, model_type LLAMA_TYPE_QWEN2
    "gpt2"   GPT2LMHeadModel (or GPT2Model, the same weights) -> GPT2Config
Any other type or class is refused, naming it.

Llama / Qwen2 fields (an absent field and a null one are the same, as in transformers):
  required: hidden_size, num_hidden_layers, num_attention_heads, intermediate_size, vocab_size,
    max_position_embeddings, rms_norm_eps, rope_theta (at the top level, transformers 4.x, or in
    the rope dictionary, 5.x); refused when missing, naming the field.
  num_key_value_heads: transformers' default when absent (Llama: num_attention_heads; Qwen2: 32,
    Qwen2Config's). head_dim: optional; when given it must be hidden_size / num_attention_heads.
  rope: the dictionary is rope_scaling when that is not null (transformers 4.x reads only it, and
    5.x's convert_rope_params_to_dict prefers it), else rope_parameters (5.x), else none. Its
    rope_type (or the older "type") is "default" or "llama3" (factor, low_freq_factor,
    high_freq_factor, original_max_position_embeddings, all required); any other type (linear,
    dynamic, yarn, longrope, ...) is refused naming it, as is a partial_rotary_factor other than 1.
    rope_theta is the dictionary's when it has one, else the top level's; both given and
    different is refused (4.x would use one, 5.x the other).
  tie_word_embeddings: true/false, default false (LlamaConfig's and Qwen2Config's default).
  attention_bias: Llama: default false; true is refused by llama_config_check (o_proj's bias has
    no place in our table). Qwen2: ignored, its q/k/v projections always have biases.
  bos_token_id / eos_token_id: an integer, or a list whose first entry is taken (Llama 3.1's
    instruct models list several end tokens), or absent / null / [] -> -1 (none). The model does
    not use them; samples start from bos (llama_spec).
  hidden_act must be "silu" (the default); mlp_bias, when given, false; use_sliding_window, when
    given, false; layer_types (5.x Qwen2), when given, all "full_attention".
  initializer_range: default 0.02. Every other field (torch_dtype, use_cache, ...) is ignored.
  Then llama_config_check; padded_vocab_size = vocab_size rounded up to a multiple of 128.
GPT-2 fields: n_embd, n_layer, n_head, n_positions, vocab_size required; n_inner null or
  4 n_embd; layer_norm_epsilon 1e-5 (default; llm.c's kernels have it built in);
  activation_function "gelu_new" (default) or "gelu_pytorch_tanh" (the same tanh GELU);
  tie_word_embeddings true, scale_attn_weights true, scale_attn_by_inverse_layer_idx and
  add_cross_attention false (each when given). max_seq_len = n_positions; padded_vocab_size as above.

Writing (hf_config_json): the fields transformers needs to build the model with
AutoModelForCausalLM, in the form both 4.x and 5.x read: the rope as 4.x's top-level rope_theta +
rope_scaling (null, or the llama3 dictionary without rope_theta) and also as 5.x's
rope_parameters (rope_type, rope_theta and the scaling's fields). 5.x takes rope_scaling over
rope_parameters and rope_theta from the top level, 4.x ignores rope_parameters (an unknown key
becomes an attribute): both build the same rotary embedding. torch_dtype (4.x) and dtype (5.x)
"bfloat16". Floats are written as Python's json writes them (500000.0, 1e-05: never 500000), so
that 5.x's strictly typed configs see floats; integers as integers.

Every error names the file and the field.
*/
#ifndef LLMC_HF_CONFIG_H
#define LLMC_HF_CONFIG_H

#include "utils.h"  // first: it sets the POSIX feature macros

#include <limits.h>
#include <math.h>

#include <cjson/cJSON.h>

#include "gpt2.h"
#include "llama.h"
#include "model.h"

#define HF_FAMILY_GPT2 1
#define HF_FAMILY_LLAMA 2
#define HF_CONFIG_NAME "config.json"
#define HF_MAX_CONFIG_BYTES (16LL << 20)

typedef struct {
    int family;  // HF_FAMILY_GPT2 or HF_FAMILY_LLAMA (whose model_type says llama or qwen2)
    GPT2Config gpt2;
    LlamaConfig llama;
} HFConfig;

// ----------------------------------------------------------------------------
// reading fields

// the field called name, NULL when absent or null
static inline const cJSON *hf_json_field_(const cJSON *root, const char *name) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, name);
    return f == NULL || cJSON_IsNull(f) ? NULL : f;
}

// an integral JSON number within an int: 0, or -1
static inline int hf_json_int_value_(const cJSON *f, int *out) {
    if (!cJSON_IsNumber(f) || !isfinite(f->valuedouble) || f->valuedouble != floor(f->valuedouble) ||
        f->valuedouble < (double)INT_MIN || f->valuedouble > (double)INT_MAX)
        return -1;
    *out = (int)f->valuedouble;
    return 0;
}

// An int field: absent -> def, or an error when required. 0, or -1 with a message.
static inline int hf_get_int_(const char *path, const cJSON *root, const char *name, int required, int def, int *out,
                              char *err, size_t err_len) {
    const cJSON *f = hf_json_field_(root, name);
    if (f == NULL) {
        if (required) {
            llmc_set_error(err, err_len, "config.json '%s': field '%s' is missing", path, name);
            return -1;
        }
        *out = def;
        return 0;
    }
    if (hf_json_int_value_(f, out) != 0) {
        llmc_set_error(err, err_len, "config.json '%s': field '%s' is not an integer", path, name);
        return -1;
    }
    return 0;
}

// A number field (of root, or of a dictionary called where in the messages).
static inline int hf_get_double_(const char *path, const cJSON *root, const char *where, const char *name, int required,
                                 double def, double *out, char *err, size_t err_len) {
    const cJSON *f = hf_json_field_(root, name);
    if (f == NULL) {
        if (required) {
            llmc_set_error(err, err_len, "config.json '%s': field '%s%s' is missing", path, where, name);
            return -1;
        }
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(f) || !isfinite(f->valuedouble)) {
        llmc_set_error(err, err_len, "config.json '%s': field '%s%s' is not a finite number", path, where, name);
        return -1;
    }
    *out = f->valuedouble;
    return 0;
}

static inline int hf_get_bool_(const char *path, const cJSON *root, const char *name, int def, int *out, char *err,
                               size_t err_len) {
    const cJSON *f = hf_json_field_(root, name);
    if (f == NULL) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsBool(f)) {
        llmc_set_error(err, err_len, "config.json '%s': field '%s' is not true or false", path, name);
        return -1;
    }
    *out = cJSON_IsTrue(f) ? 1 : 0;
    return 0;
}

// A string field: *out points into root (def when absent).
static inline int hf_get_string_(const char *path, const cJSON *root, const char *name, const char *def,
                                 const char **out, char *err, size_t err_len) {
    const cJSON *f = hf_json_field_(root, name);
    if (f == NULL) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsString(f)) {
        llmc_set_error(err, err_len, "config.json '%s': field '%s' is not a string", path, name);
        return -1;
    }
    *out = f->valuestring;
    return 0;
}

// bos_token_id / eos_token_id: an int, a list (its first entry), or none (-1)
static inline int hf_get_token_id_(const char *path, const cJSON *root, const char *name, int *out, char *err,
                                   size_t err_len) {
    const cJSON *f = hf_json_field_(root, name);
    *out = -1;
    if (f == NULL) return 0;
    if (cJSON_IsArray(f)) {
        f = f->child;
        if (f == NULL) return 0;
    }
    if (hf_json_int_value_(f, out) != 0) {
        llmc_set_error(err, err_len, "config.json '%s': field '%s' is neither an integer nor a list of integers",
                       path, name);
        return -1;
    }
    return 0;
}

// ----------------------------------------------------------------------------
// the families

// The padding of llm.c: a multiple of 128 (a vocabulary above the family's limit is left for
// its check to refuse).
static inline int hf_padded_vocab_(int V) {
    const long long p = ((long long)V + 127) / 128 * 128;
    return p > INT_MAX ? V : (int)p;
}

// the rotary embedding's fields (see the top of this file) into c
static inline int hf_read_rope_(const char *path, const cJSON *root, LlamaConfig *c, char *err, size_t err_len) {
    const cJSON *scaling = hf_json_field_(root, "rope_scaling"), *params = hf_json_field_(root, "rope_parameters");
    const cJSON *d = scaling != NULL ? scaling : params;
    const char *where = scaling != NULL ? "rope_scaling." : "rope_parameters.";
    if (d != NULL && !cJSON_IsObject(d)) {
        llmc_set_error(err, err_len, "config.json '%s': field '%.*s' is not an object", path, (int)strlen(where) - 1,
                       where);
        return -1;
    }
    double top = 0.0, inner = 0.0;
    const int have_top = hf_json_field_(root, "rope_theta") != NULL;
    const int have_inner = d != NULL && hf_json_field_(d, "rope_theta") != NULL;
    if (hf_get_double_(path, root, "", "rope_theta", 0, 0.0, &top, err, err_len) != 0 ||
        (d != NULL && hf_get_double_(path, d, where, "rope_theta", 0, 0.0, &inner, err, err_len) != 0))
        return -1;
    if (!have_top && !have_inner) {
        llmc_set_error(err, err_len, "config.json '%s': field 'rope_theta' is missing (neither at the top level nor in "
                       "rope_parameters)", path);
        return -1;
    }
    if (have_top && have_inner && memcmp(&top, &inner, sizeof(double)) != 0) {
        llmc_set_error(err, err_len, "config.json '%s': field 'rope_theta' is %.17g at the top level and %.17g in %.*s: "
                       "transformers 4.x and 5.x would build different models", path, top, inner,
                       (int)strlen(where) - 1, where);
        return -1;
    }
    c->rope_theta = have_inner ? inner : top;
    c->rope_scaling = LLAMA_ROPE_NONE;
    if (d == NULL) return 0;
    const char *type = "default";
    const cJSON *t = hf_json_field_(d, "rope_type");
    if (t == NULL) t = hf_json_field_(d, "type");
    if (t != NULL && !cJSON_IsString(t)) {
        llmc_set_error(err, err_len, "config.json '%s': field '%srope_type' is not a string", path, where);
        return -1;
    }
    if (t != NULL) type = t->valuestring;
    double partial = 1.0;
    if (hf_get_double_(path, d, where, "partial_rotary_factor", 0, 1.0, &partial, err, err_len) != 0) return -1;
    if (partial != 1.0) {
        llmc_set_error(err, err_len, "config.json '%s': field '%spartial_rotary_factor' is %g: only 1 (the whole head "
                       "rotates) is supported", path, where, partial);
        return -1;
    }
    if (strcmp(type, "default") == 0) return 0;
    if (strcmp(type, "llama3") != 0) {
        llmc_set_error(err, err_len, "config.json '%s': field '%srope_type' is '%.32s': only 'default' and 'llama3' are "
                       "supported", path, where, type);
        return -1;
    }
    c->rope_scaling = LLAMA_ROPE_LLAMA3;
    if (hf_get_double_(path, d, where, "factor", 1, 0.0, &c->rope_factor, err, err_len) != 0 ||
        hf_get_double_(path, d, where, "low_freq_factor", 1, 0.0, &c->rope_low_freq_factor, err, err_len) != 0 ||
        hf_get_double_(path, d, where, "high_freq_factor", 1, 0.0, &c->rope_high_freq_factor, err, err_len) != 0)
        return -1;
    const cJSON *orig = hf_json_field_(d, "original_max_position_embeddings");
    if (orig == NULL || hf_json_int_value_(orig, &c->rope_original_max_position_embeddings) != 0) {
        llmc_set_error(err, err_len, "config.json '%s': field '%soriginal_max_position_embeddings' is %s", path, where,
                       orig == NULL ? "missing" : "not an integer");
        return -1;
    }
    return 0;
}

static inline int hf_read_llama_(const char *path, const cJSON *root, int model_type, LlamaConfig *c, char *err,
                                 size_t err_len) {
    memset(c, 0, sizeof(*c));
    c->model_type = model_type;
    const int qwen = model_type == LLAMA_TYPE_QWEN2;
    const struct { const char *name; int *out; } required[] = {
        {"hidden_size", &c->hidden_size},
        {"num_hidden_layers", &c->num_hidden_layers},
        {"num_attention_heads", &c->num_attention_heads},
        {"intermediate_size", &c->intermediate_size},
        {"vocab_size", &c->vocab_size},
        {"max_position_embeddings", &c->max_position_embeddings},
    };
    for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++)
        if (hf_get_int_(path, root, required[i].name, 1, 0, required[i].out, err, err_len) != 0) return -1;
    if (hf_get_int_(path, root, "num_key_value_heads", 0, qwen ? 32 : c->num_attention_heads,
                    &c->num_key_value_heads, err, err_len) != 0)
        return -1;
    const int derived = c->num_attention_heads > 0 ? c->hidden_size / c->num_attention_heads : 0;
    int head_dim = derived;
    if (hf_get_int_(path, root, "head_dim", 0, derived, &head_dim, err, err_len) != 0) return -1;
    if (head_dim != derived || c->num_attention_heads < 1 || c->hidden_size % c->num_attention_heads != 0) {
        llmc_set_error(err, err_len, "config.json '%s': field 'head_dim' %d is not hidden_size / num_attention_heads "
                       "= %d / %d (the trainer's attention takes only that)", path, head_dim, c->hidden_size,
                       c->num_attention_heads);
        return -1;
    }
    c->head_dim = head_dim;
    c->padded_vocab_size = hf_padded_vocab_(c->vocab_size);
    if (hf_get_double_(path, root, "", "rms_norm_eps", 1, 0.0, &c->rms_norm_eps, err, err_len) != 0 ||
        hf_get_double_(path, root, "", "initializer_range", 0, 0.02, &c->initializer_range, err, err_len) != 0 ||
        hf_read_rope_(path, root, c, err, err_len) != 0 ||
        hf_get_bool_(path, root, "tie_word_embeddings", 0, &c->tie_word_embeddings, err, err_len) != 0 ||
        hf_get_token_id_(path, root, "bos_token_id", &c->bos_token_id, err, err_len) != 0 ||
        hf_get_token_id_(path, root, "eos_token_id", &c->eos_token_id, err, err_len) != 0)
        return -1;
    if (qwen) {
        c->attention_bias = 1;
    } else if (hf_get_bool_(path, root, "attention_bias", 0, &c->attention_bias, err, err_len) != 0) {
        return -1;
    }
    const char *act = NULL;
    int mlp_bias = 0, sliding = 0;
    if (hf_get_string_(path, root, "hidden_act", "silu", &act, err, err_len) != 0 ||
        hf_get_bool_(path, root, "mlp_bias", 0, &mlp_bias, err, err_len) != 0 ||
        hf_get_bool_(path, root, "use_sliding_window", 0, &sliding, err, err_len) != 0)
        return -1;
    if (strcmp(act, "silu") != 0) {
        llmc_set_error(err, err_len, "config.json '%s': field 'hidden_act' is '%.32s': only 'silu' is supported", path,
                       act);
        return -1;
    }
    if (mlp_bias || sliding) {
        llmc_set_error(err, err_len, "config.json '%s': field '%s' is true: not supported", path,
                       mlp_bias ? "mlp_bias" : "use_sliding_window");
        return -1;
    }
    const cJSON *layers = hf_json_field_(root, "layer_types");
    if (layers != NULL) {
        int ok = cJSON_IsArray(layers);
        for (const cJSON *l = ok ? layers->child : NULL; l != NULL && ok; l = l->next)
            ok = cJSON_IsString(l) && strcmp(l->valuestring, "full_attention") == 0;
        if (!ok) {
            llmc_set_error(err, err_len, "config.json '%s': field 'layer_types' is not a list of 'full_attention' (other "
                           "layer types are not supported)", path);
            return -1;
        }
    }
    char why[512];
    if (llama_config_check(c, why, sizeof(why)) != 0) {
        llmc_set_error(err, err_len, "config.json '%s': %s", path, why);
        return -1;
    }
    return 0;
}

static inline int hf_read_gpt2_(const char *path, const cJSON *root, GPT2Config *c, char *err, size_t err_len) {
    memset(c, 0, sizeof(*c));
    const struct { const char *name; int *out; } required[] = {
        {"n_embd", &c->channels}, {"n_layer", &c->num_layers}, {"n_head", &c->num_heads},
        {"n_positions", &c->max_seq_len}, {"vocab_size", &c->vocab_size},
    };
    for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++)
        if (hf_get_int_(path, root, required[i].name, 1, 0, required[i].out, err, err_len) != 0) return -1;
    int inner = 0, tied = 1, scale = 1, by_layer = 0, cross = 0;
    double eps = 0.0;
    const char *act = NULL;
    if (hf_get_int_(path, root, "n_inner", 0, 0, &inner, err, err_len) != 0 ||
        hf_get_double_(path, root, "", "layer_norm_epsilon", 0, 1e-5, &eps, err, err_len) != 0 ||
        hf_get_string_(path, root, "activation_function", "gelu_new", &act, err, err_len) != 0 ||
        hf_get_bool_(path, root, "tie_word_embeddings", 1, &tied, err, err_len) != 0 ||
        hf_get_bool_(path, root, "scale_attn_weights", 1, &scale, err, err_len) != 0 ||
        hf_get_bool_(path, root, "scale_attn_by_inverse_layer_idx", 0, &by_layer, err, err_len) != 0 ||
        hf_get_bool_(path, root, "add_cross_attention", 0, &cross, err, err_len) != 0)
        return -1;
    if (inner != 0 && (long long)inner != 4LL * c->channels) {
        llmc_set_error(err, err_len, "config.json '%s': field 'n_inner' %d is not 4 * n_embd = %lld (llm.c's MLP)", path,
                       inner, 4LL * c->channels);
        return -1;
    }
    if (eps != 1e-5) {
        llmc_set_error(err, err_len, "config.json '%s': field 'layer_norm_epsilon' is %g: llm.c's layernorm has 1e-5",
                       path, eps);
        return -1;
    }
    if (strcmp(act, "gelu_new") != 0 && strcmp(act, "gelu_pytorch_tanh") != 0) {
        llmc_set_error(err, err_len, "config.json '%s': field 'activation_function' is '%.32s': llm.c's GELU is the tanh "
                       "approximation ('gelu_new' or 'gelu_pytorch_tanh')", path, act);
        return -1;
    }
    const char *bad = !tied ? "tie_word_embeddings false" : !scale ? "scale_attn_weights false"
                    : by_layer ? "scale_attn_by_inverse_layer_idx true" : cross ? "add_cross_attention true" : NULL;
    if (bad != NULL) {
        llmc_set_error(err, err_len, "config.json '%s': field %s is not supported (llm.c's GPT-2)", path, bad);
        return -1;
    }
    c->padded_vocab_size = hf_padded_vocab_(c->vocab_size);
    char why[512];
    if (c->vocab_size > GPT2_MAX_VOCAB) {
        llmc_set_error(err, err_len, "config.json '%s': vocab_size %d is above %d", path, c->vocab_size, GPT2_MAX_VOCAB);
        return -1;
    }
    if (gpt2_config_check(c, why, sizeof(why)) != 0) {
        llmc_set_error(err, err_len, "config.json '%s': %s", path, why);
        return -1;
    }
    return 0;
}

// The configuration of config.json's text (len bytes; path names it in messages): one JSON
// object with nothing but whitespace after it. 0, or -1.
static inline int hf_config_parse_checked(const char *path, const char *text, size_t len, HFConfig *c, char *err,
                                          size_t err_len) {
    memset(c, 0, sizeof(*c));
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    for (const char *p = end; root != NULL && p != NULL && p < text + len; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(root);
            root = NULL;
        }
    }
    if (root == NULL || !cJSON_IsObject(root)) {
        llmc_set_error(err, err_len, "config.json '%s': %s", path, root == NULL ? "not valid JSON" : "not a JSON object");
        cJSON_Delete(root);
        return -1;
    }
    static const struct { const char *type, *cls, *alt; int family, llama_type; } known[] = {
        {"llama", "LlamaForCausalLM", NULL, HF_FAMILY_LLAMA, LLAMA_TYPE_LLAMA},
        {"qwen2", "Qwen2ForCausalLM", NULL, HF_FAMILY_LLAMA, LLAMA_TYPE_QWEN2},
        {"gpt2", "GPT2LMHeadModel", "GPT2Model", HF_FAMILY_GPT2, 0},
    };
    const char *type = NULL;
    int rc = hf_get_string_(path, root, "model_type", NULL, &type, err, err_len);
    int k = 0;
    while (rc == 0 && type != NULL && k < 3 && strcmp(type, known[k].type) != 0) k++;
    if (rc == 0 && (type == NULL || k == 3)) {
        if (type == NULL) llmc_set_error(err, err_len, "config.json '%s': field 'model_type' is missing", path);
        else llmc_set_error(err, err_len, "config.json '%s': model_type '%.64s' is not one this trainer takes (llama, "
                            "qwen2, gpt2)", path, type);
        rc = -1;
    }
    const cJSON *arch = rc == 0 ? hf_json_field_(root, "architectures") : NULL;
    if (arch != NULL) {
        int ok = cJSON_IsArray(arch);
        const char *other = NULL;
        for (const cJSON *a = ok ? arch->child : NULL; a != NULL && ok; a = a->next) {
            ok = cJSON_IsString(a) && (strcmp(a->valuestring, known[k].cls) == 0 ||
                                       (known[k].alt != NULL && strcmp(a->valuestring, known[k].alt) == 0));
            if (!ok && cJSON_IsString(a)) other = a->valuestring;
        }
        if (!ok) {
            llmc_set_error(err, err_len, "config.json '%s': architectures %s%.64s%s is not %s (model_type %s)", path,
                           other ? "'" : "", other ? other : "(malformed)", other ? "'" : "", known[k].cls, type);
            rc = -1;
        }
    }
    if (rc == 0) {
        c->family = known[k].family;
        rc = c->family == HF_FAMILY_GPT2 ? hf_read_gpt2_(path, root, &c->gpt2, err, err_len)
                                         : hf_read_llama_(path, root, known[k].llama_type, &c->llama, err, err_len);
    }
    cJSON_Delete(root);
    return rc;
}

// Reads and checks the config.json at path. 0, or -1 with a message naming the file and field.
static inline int hf_config_read_checked(const char *path, HFConfig *c, char *err, size_t err_len) {
    memset(c, 0, sizeof(*c));
    size_t size = 0;
    char *text = llmc_read_whole_checked(path, "config.json", HF_MAX_CONFIG_BYTES, &size, err, err_len);
    if (text == NULL) return -1;
    const int rc = hf_config_parse_checked(path, text, size, c, err, err_len);
    free(text);
    return rc;
}

// The ModelSpec of a checked configuration.
static inline void hf_config_spec(const HFConfig *c, ModelSpec *s) {
    if (c->family == HF_FAMILY_GPT2) gpt2_spec(&c->gpt2, s);
    else llama_spec(&c->llama, s);
}

// The configuration of a spec (its family's); 0, or -1 for a family this file does not know.
static inline int hf_config_of_spec(const ModelSpec *s, HFConfig *c) {
    memset(c, 0, sizeof(*c));
    if (s->family == gpt2_family()) {
        c->family = HF_FAMILY_GPT2;
        c->gpt2 = *gpt2_config_of(s);
        return 0;
    }
    if (s->family == llama_family()) {
        c->family = HF_FAMILY_LLAMA;
        c->llama = *llama_config_of(s);
        return 0;
    }
    return -1;
}

// ----------------------------------------------------------------------------
// writing

// a float as JSON, as Python's json writes it (repr): the shortest digits that read back as v, in
// fixed notation for exponents -4..15 and scientific otherwise, always with a '.' or an exponent
// (500000.0, 0.02, 1e-05)
static inline cJSON *hf_json_float_(double v) {
    char buf[64];
    int p = 1;
    for (; p < 17; p++) {
        snprintf(buf, sizeof(buf), "%.*e", p - 1, v);
        if (strtod(buf, NULL) == v) break;
    }
    snprintf(buf, sizeof(buf), "%.*e", p - 1, v);
    const char *e = strchr(buf, 'e');
    const int exp10 = e != NULL ? atoi(e + 1) : 0;
    if (isfinite(v) && exp10 >= -4 && exp10 < 16) {
        const int decimals = p - 1 - exp10 > 0 ? p - 1 - exp10 : 0;
        snprintf(buf, sizeof(buf), "%.*f", decimals, v);
        if (strchr(buf, '.') == NULL) strcat(buf, ".0");
    }
    return cJSON_CreateRaw(buf);
}

static inline cJSON *hf_json_token_(int id) { return id >= 0 ? cJSON_CreateNumber(id) : cJSON_CreateNull(); }

// The rope dictionary of c: 5.x's rope_parameters (with_theta) or 4.x's rope_scaling (without).
static inline cJSON *hf_json_rope_(const LlamaConfig *c, int with_theta) {
    cJSON *d = cJSON_CreateObject();
    if (d == NULL) return NULL;
    const int llama3 = c->rope_scaling == LLAMA_ROPE_LLAMA3;
    cJSON_AddStringToObject(d, "rope_type", llama3 ? "llama3" : "default");
    if (with_theta) cJSON_AddItemToObject(d, "rope_theta", hf_json_float_(c->rope_theta));
    if (llama3) {
        cJSON_AddItemToObject(d, "factor", hf_json_float_(c->rope_factor));
        cJSON_AddItemToObject(d, "low_freq_factor", hf_json_float_(c->rope_low_freq_factor));
        cJSON_AddItemToObject(d, "high_freq_factor", hf_json_float_(c->rope_high_freq_factor));
        cJSON_AddNumberToObject(d, "original_max_position_embeddings", c->rope_original_max_position_embeddings);
    }
    return d;
}

// config.json's text for the model of spec (see the top of this file): malloc'd, NULL when out of
// memory or for a family this file does not know.
static inline char *hf_config_json(const ModelSpec *spec) {
    HFConfig hc;
    if (hf_config_of_spec(spec, &hc) != 0) return NULL;
    cJSON *r = cJSON_CreateObject(), *arch = cJSON_CreateArray();
    if (r == NULL || arch == NULL) {
        cJSON_Delete(r);
        cJSON_Delete(arch);
        return NULL;
    }
    cJSON_AddItemToObject(r, "architectures", arch);
    if (hc.family == HF_FAMILY_GPT2) {
        const GPT2Config *c = &hc.gpt2;
        cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
        cJSON_AddStringToObject(r, "model_type", "gpt2");
        cJSON_AddNumberToObject(r, "vocab_size", c->vocab_size);
        cJSON_AddNumberToObject(r, "n_positions", c->max_seq_len);
        cJSON_AddNumberToObject(r, "n_embd", c->channels);
        cJSON_AddNumberToObject(r, "n_layer", c->num_layers);
        cJSON_AddNumberToObject(r, "n_head", c->num_heads);
        cJSON_AddNullToObject(r, "n_inner");
        cJSON_AddStringToObject(r, "activation_function", "gelu_new");
        cJSON_AddItemToObject(r, "layer_norm_epsilon", hf_json_float_(1e-5));
        cJSON_AddItemToObject(r, "initializer_range", hf_json_float_(0.02));
        cJSON_AddItemToObject(r, "resid_pdrop", hf_json_float_(0.0));
        cJSON_AddItemToObject(r, "embd_pdrop", hf_json_float_(0.0));
        cJSON_AddItemToObject(r, "attn_pdrop", hf_json_float_(0.0));
        cJSON_AddBoolToObject(r, "scale_attn_weights", 1);
        cJSON_AddBoolToObject(r, "tie_word_embeddings", 1);
        cJSON_AddBoolToObject(r, "use_cache", 1);
        const int eot = GPT2_VOCAB_SIZE - 1;  // <|endoftext|> of GPT-2's tokenizer
        cJSON_AddItemToObject(r, "bos_token_id", hf_json_token_(eot < c->vocab_size ? eot : -1));
        cJSON_AddItemToObject(r, "eos_token_id", hf_json_token_(eot < c->vocab_size ? eot : -1));
    } else {
        const LlamaConfig *c = &hc.llama;
        const int qwen = c->model_type == LLAMA_TYPE_QWEN2;
        cJSON_AddItemToArray(arch, cJSON_CreateString(qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM"));
        cJSON_AddStringToObject(r, "model_type", qwen ? "qwen2" : "llama");
        cJSON_AddNumberToObject(r, "vocab_size", c->vocab_size);
        cJSON_AddNumberToObject(r, "hidden_size", c->hidden_size);
        cJSON_AddNumberToObject(r, "intermediate_size", c->intermediate_size);
        cJSON_AddNumberToObject(r, "num_hidden_layers", c->num_hidden_layers);
        cJSON_AddNumberToObject(r, "num_attention_heads", c->num_attention_heads);
        cJSON_AddNumberToObject(r, "num_key_value_heads", c->num_key_value_heads);
        cJSON_AddNumberToObject(r, "head_dim", c->head_dim);
        cJSON_AddStringToObject(r, "hidden_act", "silu");
        cJSON_AddNumberToObject(r, "max_position_embeddings", c->max_position_embeddings);
        cJSON_AddItemToObject(r, "initializer_range", hf_json_float_(c->initializer_range));
        cJSON_AddItemToObject(r, "rms_norm_eps", hf_json_float_(c->rms_norm_eps));
        cJSON_AddBoolToObject(r, "tie_word_embeddings", c->tie_word_embeddings);
        cJSON_AddItemToObject(r, "rope_theta", hf_json_float_(c->rope_theta));
        if (c->rope_scaling == LLAMA_ROPE_LLAMA3) cJSON_AddItemToObject(r, "rope_scaling", hf_json_rope_(c, 0));
        else cJSON_AddNullToObject(r, "rope_scaling");
        cJSON_AddItemToObject(r, "rope_parameters", hf_json_rope_(c, 1));
        cJSON_AddItemToObject(r, "attention_dropout", hf_json_float_(0.0));
        if (qwen) {
            cJSON_AddBoolToObject(r, "use_sliding_window", 0);
            cJSON_AddNumberToObject(r, "max_window_layers", c->num_hidden_layers);
        } else {
            cJSON_AddBoolToObject(r, "attention_bias", c->attention_bias);
            cJSON_AddBoolToObject(r, "mlp_bias", 0);
        }
        cJSON_AddBoolToObject(r, "use_cache", 1);
        cJSON_AddItemToObject(r, "bos_token_id", hf_json_token_(c->bos_token_id));
        cJSON_AddItemToObject(r, "eos_token_id", hf_json_token_(c->eos_token_id));
    }
    cJSON_AddStringToObject(r, "torch_dtype", "bfloat16");
    cJSON_AddStringToObject(r, "dtype", "bfloat16");
    char *text = cJSON_Print(r);
    cJSON_Delete(r);
    return text;
}

#endif // LLMC_HF_CONFIG_H
