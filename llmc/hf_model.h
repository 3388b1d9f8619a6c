/*
hf_model.h - a Hugging Face model directory (config.json + safetensors, what transformers'
save_pretrained writes and AutoModelForCausalLM.from_pretrained reads) <-> our ModelSpec and its
flat parameters: reading one as -e DIR, writing one beside a checkpoint (train_gpt -hf 1) or
from any table (build/hf_roundtrip). config.json: llmc/hf_config.h; the files: llmc/safetensors.h.

Tensors (hf_tensor_at, in transformers' state_dict order), each a contiguous block of our flat
buffer:
  Llama / Qwen2: llmc/llama.h's llama_hf_* mapping: q/k/v_proj rows of qkvw (and their biases
    of qkvb), gate/up_proj rows of gateupw, the rest one to one; embed_tokens and lm_head hold
    the V real rows of our Vp; lm_head only when untied.
  GPT-2: transformer.wte.weight (V of Vp rows), transformer.wpe.weight, per layer
    transformer.h.N.{ln_1.weight, ln_1.bias, attn.c_attn.weight, attn.c_attn.bias,
    attn.c_proj.weight, attn.c_proj.bias, ln_2.weight, ln_2.bias, mlp.c_fc.weight, mlp.c_fc.bias,
    mlp.c_proj.weight, mlp.c_proj.bias}, transformer.ln_f.weight / bias. The four weights are
    Conv1D's, stored (in, out): the transpose of our (out, in) rows. The reader also takes the
    names without "transformer." (GPT2Model's, and the old hub checkpoints').

Reading (hf_load_dir_checked): config.json gives the family and the spec; with params also
every tensor, converted to fp32 (F32, F16, BF16: llmc/safetensors.h), into a buffer whose
padding rows (V..Vp) are 0. Refused, naming the file and the tensor: a shape other than
config.json implies (both shapes given), a missing tensor, an unexpected one, a tensor given
twice (GPT-2's two spellings), and a tied model's lm_head.weight that is not bitwise the
embedding (a tied checkpoint may carry it; it must then be the same tensor). Ignored, by name:
buffers transformers may have saved, not parameters: Llama's rotary_emb.inv_freq
(model.rotary_emb.inv_freq, model.layers.N.self_attn.rotary_emb.inv_freq) and old GPT-2
checkpoints' h.N.attn.bias / h.N.attn.masked_bias (the causal mask).

Writing (hf_write_dir_checked): config.json (hf_config_json, read back and compared with the
spec before anything is written) and model.safetensors (or shards and an index above
max_shard_bytes), BF16, transformers' names and shapes, no lm_head when tied; and the side files
(HFSideFiles: the tokenizer's files and generation_config.json, read whole from the directory the
model came from, hf_side_files_read_checked) copied byte for byte. Atomic as a whole:
everything goes into DIR.tmp-<pid>, each file fsynced (sync), then the directory is renamed to
DIR; an existing DIR (a step written again) is first renamed to DIR.old-<pid> and removed after.
The rename is the commit: a DIR that exists is complete; a crash leaves at most the .tmp-/.old-
directories, which checkpoint_clear_stale (llmc/checkpoint.h) removes.

The trainer's part: hf_checkpoint_path ("<out>/hf_%08d", beside model_%08d.bin),
hf_checkpoint_dir_check (every name fits, checked before training) and
hf_checkpoint_write_checked (the bf16 parameters of a checkpoint, rank 0).
*/
#ifndef LLMC_HF_MODEL_H
#define LLMC_HF_MODEL_H

#include "utils.h"  // first: it sets the POSIX feature macros

#include <dirent.h>
#include <limits.h>

#include "bf16.h"
#include "gpt2.h"
#include "hf_config.h"
#include "llama.h"
#include "model.h"
#include "safetensors.h"

#define HF_NAME_LEN 96
// the longest path below an HF directory that its writer makes ("/model-00001-of-00001.safetensors.tmp",
// or ".tmp-<pid>" / ".old-<pid>" after the directory's own name), with room to spare
#define HF_PATH_SUFFIX_MAX 64
#define HF_PATH_MAX 4096

typedef char hf_name_len_holds_llama_names[HF_NAME_LEN >= LLAMA_HF_NAME_LEN ? 1 : -1];

// One Hugging Face tensor: a contiguous block of our flat buffer.
typedef struct {
    char name[HF_NAME_LEN];
    int ndim;           // 1 or 2: Hugging Face's shape is (dim0) or (dim0, dim1)
    size_t dim0, dim1;
    size_t offset;      // its first element in the flat parameter buffer
    int transposed;     // GPT-2's Conv1D weights: ours are the (dim1, dim0) transpose
} HFTensor;

static inline int hf_is_gpt2_(const ModelSpec *s) { return s->family == gpt2_family(); }

// ----------------------------------------------------------------------------
// the tensors of a spec

static inline size_t hf_num_tensors(const ModelSpec *s) {
    if (hf_is_gpt2_(s)) return 2 + 12 * (size_t)s->num_layers + 2;
    return llama_hf_num_tensors(llama_config_of(s));
}

// GPT-2's k-th tensor; 0, or -1 past the last
static inline int hf_gpt2_tensor_(const ModelSpec *s, size_t k, HFTensor *out) {
    const GPT2Config *c = gpt2_config_of(s);
    const size_t C = (size_t)c->channels, L = (size_t)c->num_layers;
    memset(out, 0, sizeof(*out));
    // per layer: (suffix, our tensor, the HF shape's rows and columns (0: a vector), Conv1D)
    static const struct { const char *suffix, *tensor; int rows, cols, conv; } layer[12] = {
        {"ln_1.weight", "ln1w", 1, 0, 0},        {"ln_1.bias", "ln1b", 1, 0, 0},
        {"attn.c_attn.weight", "qkvw", 1, 3, 1}, {"attn.c_attn.bias", "qkvb", 3, 0, 0},
        {"attn.c_proj.weight", "attprojw", 1, 1, 1}, {"attn.c_proj.bias", "attprojb", 1, 0, 0},
        {"ln_2.weight", "ln2w", 1, 0, 0},        {"ln_2.bias", "ln2b", 1, 0, 0},
        {"mlp.c_fc.weight", "fcw", 1, 4, 1},     {"mlp.c_fc.bias", "fcb", 4, 0, 0},
        {"mlp.c_proj.weight", "fcprojw", 4, 1, 1}, {"mlp.c_proj.bias", "fcprojb", 1, 0, 0},
    };
    const ParameterTensor *t;
    if (k < 2) {
        t = model_tensor(s, k == 0 ? "wte" : "wpe");
        snprintf(out->name, sizeof(out->name), "transformer.%s.weight", k == 0 ? "wte" : "wpe");
        out->ndim = 2;
        out->dim0 = k == 0 ? (size_t)c->vocab_size : (size_t)c->max_seq_len;
        out->dim1 = C;
        out->offset = t->offset;
        return 0;
    }
    k -= 2;
    if (k < 12 * L) {
        const size_t l = k / 12, j = k % 12;
        t = model_tensor(s, layer[j].tensor);
        snprintf(out->name, sizeof(out->name), "transformer.h.%zu.%s", l, layer[j].suffix);
        out->ndim = layer[j].cols ? 2 : 1;
        out->dim0 = (size_t)layer[j].rows * C;
        out->dim1 = (size_t)layer[j].cols * C;
        out->transposed = layer[j].conv;
        out->offset = t->offset + l * (t->numel / L);
        return 0;
    }
    k -= 12 * L;
    if (k < 2) {
        t = model_tensor(s, k == 0 ? "lnfw" : "lnfb");
        snprintf(out->name, sizeof(out->name), "transformer.ln_f.%s", k == 0 ? "weight" : "bias");
        out->ndim = 1;
        out->dim0 = C;
        out->offset = t->offset;
        return 0;
    }
    return -1;
}

// The k-th Hugging Face tensor of the spec (see the top of this file); 0, or -1 past the last.
static inline int hf_tensor_at(const ModelSpec *s, size_t k, HFTensor *out) {
    if (hf_is_gpt2_(s)) return hf_gpt2_tensor_(s, k, out);
    LlamaHFTensor h;
    if (llama_hf_tensor(llama_config_of(s), k, &h) != 0) return -1;
    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "%s", h.name);
    out->ndim = h.ndim;
    out->dim0 = h.rows;
    out->dim1 = h.ndim == 2 ? h.cols : 0;
    out->offset = h.offset;
    return 0;
}

// "<digits>" at p: the position after them (NULL without any)
static inline const char *hf_skip_digits_(const char *p) {
    const char *q = p;
    while (*q >= '0' && *q <= '9') q++;
    return q == p ? NULL : q;
}

// GPT-2's name without the "transformer." of GPT2LMHeadModel
static inline const char *hf_gpt2_bare_(const char *name) {
    return strncmp(name, "transformer.", 12) == 0 ? name + 12 : name;
}

typedef struct {
    const char *name;
    size_t index;  // in HFTensorList's tensors
} HFTensorName;

// Every Hugging Face tensor of a spec, in order, with a by-name index for lookups.
typedef struct {
    size_t n;
    HFTensor *tensors;      // hf_tensor_at's order
    HFTensorName *by_name;  // sorted by name
} HFTensorList;

static inline void hf_tensor_list_free(HFTensorList *l) {
    free(l->tensors);
    free(l->by_name);
    memset(l, 0, sizeof(*l));
}

static inline int hf_cmp_name_(const void *a, const void *b) {
    return strcmp(((const HFTensorName *)a)->name, ((const HFTensorName *)b)->name);
}

// The list of spec's tensors; 0, or -1 when out of memory.
static inline int hf_tensor_list(const ModelSpec *s, HFTensorList *l) {
    memset(l, 0, sizeof(*l));
    const size_t n = hf_num_tensors(s);
    l->tensors = (HFTensor *)calloc(n + 1, sizeof(HFTensor));
    l->by_name = (HFTensorName *)calloc(n + 1, sizeof(HFTensorName));
    if (l->tensors == NULL || l->by_name == NULL) {
        hf_tensor_list_free(l);
        return -1;
    }
    if (hf_is_gpt2_(s)) {
        for (size_t k = 0; k < n; k++) hf_gpt2_tensor_(s, k, &l->tensors[k]);
    } else {
        // llama_hf_tensor's order, part by part, in one pass
        const LlamaConfig *c = llama_config_of(s);
        LlamaHFTensor parts[LLAMA_HF_MAX_PARTS];
        size_t k = 0;
        for (int i = 0; i < s->num_tensors; i++) {
            const int layers = s->tensors[i].layered ? c->num_hidden_layers : 1;
            for (int layer = 0; layer < layers; layer++) {
                const int np = llama_hf_parts(c, i, s->tensors[i].layered ? layer : -1, parts);
                for (int j = 0; j < np && k < n; j++, k++) {
                    HFTensor *h = &l->tensors[k];
                    memcpy(h->name, parts[j].name, sizeof(parts[j].name));
                    h->ndim = parts[j].ndim;
                    h->dim0 = parts[j].rows;
                    h->dim1 = parts[j].ndim == 2 ? parts[j].cols : 0;
                    h->offset = parts[j].offset;
                }
            }
        }
    }
    l->n = n;
    for (size_t k = 0; k < n; k++) {
        l->by_name[k].name = l->tensors[k].name;
        l->by_name[k].index = k;
    }
    qsort(l->by_name, n, sizeof(l->by_name[0]), hf_cmp_name_);
    return 0;
}

// The index of the tensor called name (GPT-2's also without "transformer."), or -1.
static inline long hf_tensor_list_find(const HFTensorList *l, const ModelSpec *s, const char *name) {
    HFTensorName key;
    key.name = name;
    key.index = 0;
    const HFTensorName *hit =
        (const HFTensorName *)bsearch(&key, l->by_name, l->n, sizeof(key), hf_cmp_name_);
    if (hit != NULL) return (long)hit->index;
    if (!hf_is_gpt2_(s) || strncmp(name, "transformer.", 12) == 0 || strlen(name) + 13 > HF_NAME_LEN) return -1;
    char full[HF_NAME_LEN];
    snprintf(full, sizeof(full), "transformer.%s", name);
    key.name = full;
    hit = (const HFTensorName *)bsearch(&key, l->by_name, l->n, sizeof(key), hf_cmp_name_);
    return hit != NULL ? (long)hit->index : -1;
}

// 1 for the name of a buffer transformers may have saved that is not a parameter (see the top
// of this file), which a reader skips.
static inline int hf_is_ignored_buffer(const ModelSpec *s, const char *name) {
    if (hf_is_gpt2_(s)) {
        const char *bare = hf_gpt2_bare_(name);
        const char *p = strncmp(bare, "h.", 2) == 0 ? hf_skip_digits_(bare + 2) : NULL;
        return p != NULL && (strcmp(p, ".attn.bias") == 0 || strcmp(p, ".attn.masked_bias") == 0);
    }
    if (strcmp(name, "model.rotary_emb.inv_freq") == 0) return 1;
    const char *p = strncmp(name, "model.layers.", 13) == 0 ? hf_skip_digits_(name + 13) : NULL;
    return p != NULL && strcmp(p, ".self_attn.rotary_emb.inv_freq") == 0;
}

// ----------------------------------------------------------------------------
// reading

// "dir/name" into buf; 0, or -1 when it does not fit
static inline int hf_join_(char *buf, size_t len, const char *dir, const char *name) {
    const size_t a = strlen(dir), b = strlen(name);
    if (a + b + 2 > len) return -1;
    memcpy(buf, dir, a);
    buf[a] = '/';
    memcpy(buf + a + 1, name, b + 1);
    return 0;
}

// 1 when path is a directory (what -e takes as a Hugging Face model)
static inline int hf_is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

// The spec of the model directory's config.json (cheap: no tensors). 0, or -1 with a message.
static inline int hf_read_spec_checked(const char *dir, ModelSpec *spec, char *err, size_t err_len) {
    char path[HF_PATH_MAX];
    if (hf_join_(path, sizeof(path), dir, HF_CONFIG_NAME) != 0) {
        llmc_set_error(err, err_len, "model directory '%.200s...': path too long", dir);
        return -1;
    }
    struct stat sb;
    if (stat(path, &sb) != 0) {
        llmc_set_error(err, err_len, "model directory '%s' has no %s (a Hugging Face model directory needs one)", dir,
                       HF_CONFIG_NAME);
        return -1;
    }
    HFConfig c;
    if (hf_config_read_checked(path, &c, err, err_len) != 0) return -1;
    hf_config_spec(&c, spec);
    return 0;
}

// The tensor t of file f (HF tensor h) into params, checked against h's shape.
static inline int hf_read_tensor_(const SafeTensorsFile *f, const SafeTensor *t, const HFTensor *h, const char *config,
                                  float *params, char *err, size_t err_len) {
    const uint64_t want[2] = {(uint64_t)h->dim0, (uint64_t)h->dim1};
    if (t->ndim != h->ndim || t->shape[0] != want[0] || (h->ndim == 2 && t->shape[1] != want[1])) {
        char got_s[128], want_s[64];
        llmc_set_error(err, err_len, "safetensors file '%s': tensor '%s' has shape %s, config.json '%s' implies %s",
                       f->path, t->name, safetensors_shape_str(t->shape, t->ndim, got_s, sizeof(got_s)), config,
                       safetensors_shape_str(want, h->ndim, want_s, sizeof(want_s)));
        return -1;
    }
    float *dst = params + h->offset;
    if (!h->transposed) return safetensors_read_checked(f, t, ST_F32, dst, err, err_len);
    float *tmp = (float *)malloc((size_t)t->numel * sizeof(float) + 1);
    if (tmp == NULL) {
        llmc_set_error(err, err_len, "safetensors file '%s': tensor '%s': out of memory", f->path, t->name);
        return -1;
    }
    const int rc = safetensors_read_checked(f, t, ST_F32, tmp, err, err_len);
    for (size_t i = 0; rc == 0 && i < h->dim0; i++)
        for (size_t j = 0; j < h->dim1; j++) dst[j * h->dim0 + i] = tmp[i * h->dim1 + j];
    free(tmp);
    return rc;
}

// The model of a Hugging Face directory (see the top of this file): *spec from config.json; with
// params != NULL also *params, spec->num_parameters fp32 values (malloc'd; free it). Without
// params only config.json is read. 0, or -1 with a message naming the file and tensor or field.
static inline int hf_load_dir_checked(const char *dir, ModelSpec *spec, float **params, char *err, size_t err_len) {
    if (params != NULL) *params = NULL;
    if (hf_read_spec_checked(dir, spec, err, err_len) != 0) return -1;
    if (params == NULL) return 0;
    char config[HF_PATH_MAX];
    hf_join_(config, sizeof(config), dir, HF_CONFIG_NAME);
    SafeTensorsModel m;
    if (safetensors_model_open_checked(&m, dir, err, err_len) != 0) return -1;
    HFTensorList list;
    const int listed = hf_tensor_list(spec, &list);
    const size_t n = list.n;
    float *p = (float *)calloc(spec->num_parameters + 1, sizeof(float));
    const SafeTensorsEntry **seen = (const SafeTensorsEntry **)calloc(n + 1, sizeof(*seen));
    const SafeTensorsEntry *tied_head = NULL;  // a tied model's lm_head.weight, checked at the end
    int rc = 0;
    if (listed != 0 || p == NULL || seen == NULL) {
        llmc_set_error(err, err_len, "model directory '%s': out of host memory for %zu parameters", dir,
                       spec->num_parameters);
        rc = -1;
    }
    for (size_t i = 0; rc == 0 && i < m.num_tensors; i++) {
        const SafeTensorsEntry *e = &m.entries[i];
        const SafeTensorsFile *f = &m.files[e->file];
        const long k = hf_tensor_list_find(&list, spec, e->name);
        if (k >= 0) {
            const HFTensor *h = &list.tensors[k];
            if (seen[k] != NULL) {
                llmc_set_error(err, err_len, "model directory '%s': tensors '%s' and '%s' are both %s", dir,
                               seen[k]->name, e->name, h->name);
                rc = -1;
                break;
            }
            seen[k] = e;
            rc = hf_read_tensor_(f, e->tensor, h, config, p, err, err_len);
        } else if (strcmp(e->name, "lm_head.weight") == 0 && spec->head == 0) {
            tied_head = e;
        } else if (!hf_is_ignored_buffer(spec, e->name)) {
            llmc_set_error(err, err_len, "safetensors file '%s': unexpected tensor '%s' (no part of the %s model of "
                           "config.json '%s')", f->path, e->name, spec->family->name, config);
            rc = -1;
        }
    }
    for (size_t k = 0; rc == 0 && k < n; k++) {
        if (seen[k] != NULL) continue;
        llmc_set_error(err, err_len, "model directory '%s': tensor '%s' is missing (config.json '%s' implies it)", dir,
                       list.tensors[k].name, config);
        rc = -1;
    }
    if (rc == 0 && tied_head != NULL) {
        // the tied head must be the embedding: the same shape and the same values, bit for bit
        HFTensor h = list.tensors[0];  // the embedding (embed / wte) is the first tensor of both families
        const SafeTensorsFile *f = &m.files[tied_head->file];
        float *head = (float *)malloc(h.dim0 * h.dim1 * sizeof(float) + 1);
        h.offset = 0;
        rc = head == NULL ? -1 : hf_read_tensor_(f, tied_head->tensor, &h, config, head, err, err_len);
        if (head == NULL) llmc_set_error(err, err_len, "model directory '%s': out of memory", dir);
        if (rc == 0 && memcmp(head, p + list.tensors[0].offset, h.dim0 * h.dim1 * sizeof(float)) != 0) {
            llmc_set_error(err, err_len, "safetensors file '%s': tensor 'lm_head.weight' differs from the embedding, "
                           "and config.json '%s' ties them (tie_word_embeddings)", f->path, config);
            rc = -1;
        }
        free(head);
    }
    hf_tensor_list_free(&list);
    free(seen);
    safetensors_model_close(&m);
    if (rc != 0) {
        free(p);
        return -1;
    }
    *params = p;
    return 0;
}

// ----------------------------------------------------------------------------
// the files beside the model: its tokenizer and generation defaults

// What a written directory copies, byte for byte, from the directory its model came from (or
// from the trainer's -tk tokenizer.json): the tokenizer files AutoTokenizer reads (the fast
// tokenizer's tokenizer.json and its config; the slow tokenizers' vocab.json, merges.txt or
// tokenizer.model) and generation_config.json (the eos / bos ids generate() stops on).
#define HF_SIDE_MAX 8
#define HF_SIDE_MAX_BYTES ((int64_t)256 << 20)  // a tokenizer.json of the largest vocabularies is ~35 MB
static const char *const hf_side_names_[HF_SIDE_MAX] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "vocab.json",     "merges.txt",            "tokenizer.model",         "generation_config.json"};

typedef struct {
    const char *name[HF_SIDE_MAX];  // one of hf_side_names_
    char *data[HF_SIDE_MAX];
    size_t len[HF_SIDE_MAX];
    int n;
} HFSideFiles;

static inline void hf_side_files_free(HFSideFiles *s) {
    for (int i = 0; i < s->n; i++) free(s->data[i]);
    memset(s, 0, sizeof(*s));
}

// The file at path, read whole, as the side file name (one of hf_side_names_, each at most
// once). 0, or -1 with a message naming the file.
static inline int hf_side_files_add_checked(HFSideFiles *s, const char *name, const char *path, char *err,
                                            size_t err_len) {
    int known = 0;
    for (int i = 0; i < HF_SIDE_MAX; i++) known |= strcmp(hf_side_names_[i], name) == 0;
    for (int i = 0; i < s->n; i++) known &= strcmp(s->name[i], name) != 0;
    if (!known || s->n >= HF_SIDE_MAX) {
        llmc_set_error(err, err_len, "'%s': not a file a Hugging Face directory carries as '%s' (or given twice)", path,
                       name);
        return -1;
    }
    size_t size = 0;
    char *data = llmc_read_whole_checked(path, name, HF_SIDE_MAX_BYTES, &size, err, err_len);
    if (data == NULL) return -1;
    s->name[s->n] = name;
    s->data[s->n] = data;
    s->len[s->n] = size;
    s->n++;
    return 0;
}

// Those of the side files that the model directory dir holds (none is an empty set). 0, or -1
// with a message (one that is there but cannot be read: not a regular file, unreadable).
static inline int hf_side_files_read_checked(HFSideFiles *s, const char *dir, char *err, size_t err_len) {
    memset(s, 0, sizeof(*s));
    for (int i = 0; i < HF_SIDE_MAX; i++) {
        char path[HF_PATH_MAX];
        struct stat sb;
        if (hf_join_(path, sizeof(path), dir, hf_side_names_[i]) != 0) {
            llmc_set_error(err, err_len, "model directory '%.200s...': path too long", dir);
            hf_side_files_free(s);
            return -1;
        }
        if (lstat(path, &sb) != 0 && errno == ENOENT) continue;
        if (hf_side_files_add_checked(s, hf_side_names_[i], path, err, err_len) != 0) {
            hf_side_files_free(s);
            return -1;
        }
    }
    return 0;
}

// ----------------------------------------------------------------------------
// writing

// Removes a directory holding only regular files (what this writer makes); a missing one is
// fine. 0, or -1 (a subdirectory, or a file that cannot be removed).
static inline int hf_remove_flat_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (d == NULL) return errno == ENOENT ? 0 : -1;
    struct dirent *e;
    char path[HF_PATH_MAX];
    int rc = 0;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        struct stat sb;
        if (hf_join_(path, sizeof(path), dir, e->d_name) != 0 || lstat(path, &sb) != 0 || S_ISDIR(sb.st_mode) ||
            unlink(path) != 0)
            rc = -1;
    }
    closedir(d);
    return rc == 0 && rmdir(dir) == 0 ? 0 : -1;
}

// 1 when dir holds a subdirectory (this writer replaces only directories of files)
static inline int hf_has_subdir_(const char *dir) {
    DIR *d = opendir(dir);
    if (d == NULL) return 0;
    struct dirent *e;
    char path[HF_PATH_MAX];
    int found = 0;
    while (!found && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        struct stat sb;
        found = hf_join_(path, sizeof(path), dir, e->d_name) == 0 && lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    }
    closedir(d);
    return found;
}

// The directory holding path ("." without a slash) into buf.
static inline void hf_parent_(const char *path, char *buf, size_t len) {
    const char *slash = strrchr(path, '/');
    if (slash == NULL) snprintf(buf, len, ".");
    else if (slash == path) snprintf(buf, len, "/");
    else snprintf(buf, len, "%.*s", (int)(slash - path), path);
}

// The tensors, config.json and the side files (side: NULL for none) into the (new, empty)
// directory tmp.
static inline int hf_write_files_(const char *tmp, const ModelSpec *spec, const uint16_t *params,
                                  uint64_t max_shard_bytes, const HFSideFiles *side, int sync, char *err,
                                  size_t err_len) {
    char path[HF_PATH_MAX];
    char *json = hf_config_json(spec);
    if (json == NULL) {
        llmc_set_error(err, err_len, "model directory '%s': cannot make config.json (out of memory, or a family "
                       "without a Hugging Face form)", tmp);
        return -1;
    }
    // what a reader will make of it: the same model, or nothing is written
    HFConfig back;
    ModelSpec back_spec;
    char why[1024];
    hf_join_(path, sizeof(path), tmp, HF_CONFIG_NAME);
    if (hf_config_parse_checked(path, json, strlen(json), &back, why, sizeof(why)) != 0 ||
        (hf_config_spec(&back, &back_spec), model_spec_compare(&back_spec, spec, why, sizeof(why))) != 0) {
        llmc_set_error(err, err_len, "config.json '%s' would not read back as this model: %s", path, why);
        free(json);
        return -1;
    }
    HFTensorList list;
    const int listed = hf_tensor_list(spec, &list);
    const size_t n = list.n;
    SafeTensorsWriteTensor *t = (SafeTensorsWriteTensor *)calloc(n + 1, sizeof(SafeTensorsWriteTensor));
    int rc = listed != 0 || t == NULL ? -1 : 0;
    if (rc != 0) llmc_set_error(err, err_len, "model directory '%s': out of memory", tmp);
    for (size_t k = 0; rc == 0 && k < n; k++) {
        const HFTensor *h = &list.tensors[k];
        t[k].name = h->name;
        t[k].dtype = ST_BF16;
        t[k].ndim = h->ndim;
        t[k].shape[0] = h->dim0;
        t[k].shape[1] = h->dim1;
        t[k].data = params + h->offset;
        t[k].transposed = h->transposed;
    }
    if (rc == 0) rc = safetensors_write_model_checked(tmp, t, n, max_shard_bytes, sync, err, err_len);
    if (rc == 0) rc = atomic_write_file(path, json, strlen(json), sync, err, err_len);
    for (int i = 0; rc == 0 && side != NULL && i < side->n; i++) {
        hf_join_(path, sizeof(path), tmp, side->name[i]);
        rc = atomic_write_file(path, side->data[i], side->len[i], sync, err, err_len);
    }
    free(t);
    hf_tensor_list_free(&list);
    free(json);
    return rc;
}

// Writes the model (spec, its bf16 parameters) as a Hugging Face directory dir, atomically (see
// the top of this file), with the side files (NULL: none). max_shard_bytes 0:
// SAFETENSORS_DEFAULT_MAX_SHARD_BYTES; sync: fsync every file and directory. 0, or -1 with a
// message (no dir and no temporary left behind, except when removing the replaced directory
// fails: the message says where it is).
static inline int hf_write_dir_checked(const char *dir, const ModelSpec *spec, const uint16_t *params,
                                       uint64_t max_shard_bytes, const HFSideFiles *side, int sync, char *err,
                                       size_t err_len) {
    char tmp[HF_PATH_MAX], old[HF_PATH_MAX], parent[HF_PATH_MAX];
    const size_t len = strlen(dir);
    if (len == 0 || len + HF_PATH_SUFFIX_MAX >= HF_PATH_MAX) {
        llmc_set_error(err, err_len, "Hugging Face directory '%.200s%s': the names in it would not fit %d bytes", dir,
                       len > 200 ? "..." : "", HF_PATH_MAX);
        return -1;
    }
    if (len > 1 && dir[len - 1] == '/') {  // "out/hf/" is "out/hf"
        char trimmed[HF_PATH_MAX];
        snprintf(trimmed, sizeof(trimmed), "%.*s", (int)(len - 1), dir);
        return hf_write_dir_checked(trimmed, spec, params, max_shard_bytes, side, sync, err, err_len);
    }
    snprintf(tmp, sizeof(tmp), "%s.tmp-%ld", dir, (long)getpid());
    snprintf(old, sizeof(old), "%s.old-%ld", dir, (long)getpid());
    hf_parent_(dir, parent, sizeof(parent));
    struct stat sb;
    const int exists = lstat(dir, &sb) == 0;
    if (exists && (!S_ISDIR(sb.st_mode) || hf_has_subdir_(dir))) {
        llmc_set_error(err, err_len, "Hugging Face directory '%s' exists and is not a directory of files: not replaced",
                       dir);
        return -1;
    }
    if (hf_remove_flat_dir(tmp) != 0 || mkdir(tmp, 0777) != 0) {
        llmc_set_error(err, err_len, "cannot create the directory '%s': %s", tmp, strerror(errno));
        return -1;
    }
    if (hf_write_files_(tmp, spec, params, max_shard_bytes, side, sync, err, err_len) != 0) {
        hf_remove_flat_dir(tmp);
        return -1;
    }
    if (sync && llmc_fsync_dir(tmp) != 0) {
        llmc_set_error(err, err_len, "fsync of '%s' failed: %s", tmp, strerror(errno));
        hf_remove_flat_dir(tmp);
        return -1;
    }
    if (exists && rename(dir, old) != 0) {
        llmc_set_error(err, err_len, "cannot move the old '%s' aside to '%s': %s", dir, old, strerror(errno));
        hf_remove_flat_dir(tmp);
        return -1;
    }
    if (rename(tmp, dir) != 0) {
        llmc_set_error(err, err_len, "cannot rename '%s' to '%s': %s", tmp, dir, strerror(errno));
        hf_remove_flat_dir(tmp);
        if (exists) rename(old, dir);  // the old one back
        return -1;
    }
    if (sync && llmc_fsync_dir(parent) != 0) {
        llmc_set_error(err, err_len, "fsync of '%s' (holding '%s') failed: %s", parent, dir, strerror(errno));
        return -1;
    }
    if (exists && hf_remove_flat_dir(old) != 0) {
        llmc_set_error(err, err_len, "'%s' is written, but the directory it replaced could not be removed from '%s'",
                       dir, old);
        return -1;
    }
    return 0;
}

// ----------------------------------------------------------------------------
// the trainer's checkpoints

// "<out_dir>/hf_%08d" into buf; 0, or -1 when it does not fit
static inline int hf_checkpoint_path(char *buf, size_t len, const char *out_dir, int step) {
    const int n = snprintf(buf, len, "%s/hf_%08d", out_dir, step);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

// 0 when every name hf_checkpoint_write_checked makes in out_dir fits; -1 with a message (checked
// before training, so that no write fails on a long name hours later).
static inline int hf_checkpoint_dir_check(const char *out_dir, char *err, size_t err_len) {
    char path[HF_PATH_MAX];
    if (hf_checkpoint_path(path, sizeof(path) - HF_PATH_SUFFIX_MAX, out_dir, INT_MAX) != 0) {
        llmc_set_error(err, err_len, "output directory '%.64s%s' (%zu characters): the Hugging Face directories in it "
                       "(-hf 1) would not fit %d bytes", out_dir, strlen(out_dir) > 64 ? "..." : "", strlen(out_dir),
                       HF_PATH_MAX);
        return -1;
    }
    return 0;
}

// Writes <out_dir>/hf_<step> from a checkpoint's bf16 parameters (rank 0), in shards of at most
// max_shard_bytes (0: SAFETENSORS_DEFAULT_MAX_SHARD_BYTES), with the side files (NULL: none).
// 0, or -1 with a message.
static inline int hf_checkpoint_write_checked(const char *out_dir, int step, const ModelSpec *spec,
                                              const uint16_t *params, uint64_t max_shard_bytes,
                                              const HFSideFiles *side, int sync, char *err, size_t err_len) {
    char path[HF_PATH_MAX];
    if (step < 0 || hf_checkpoint_path(path, sizeof(path), out_dir, step) != 0) {
        llmc_set_error(err, err_len, "Hugging Face checkpoint of step %d in '%.64s...': bad step or path too long", step,
                       out_dir);
        return -1;
    }
    return hf_write_dir_checked(path, spec, params, max_shard_bytes, side, sync, err, err_len);
}

#endif // LLMC_HF_MODEL_H
