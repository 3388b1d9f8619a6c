/*
models.h - the model families the trainer knows, and the one place that picks a family for
-e: a descriptor of a family's published or test shapes (a fresh model, initialised as that
family's reference implementation does), a model file, or a Hugging Face model directory. Each
family is a header of its own (llmc/gpt2.h, llmc/llama.h) that fills a ModelSpec (llmc/model.h);
the training loop sees only that.
    GPT-2:           d6 d12 d24 d36 d48, or an llm.c model file (magic 20240326)
    Llama / Qwen2.5: llama3.2-1b llama3.2-3b llama3.1-8b qwen2.5-0.5b qwen2.5-1.5b llama-test
                     qwen-test, or a model file of llmc/llama.h (magic 20241202)
    any of them:     a directory: its config.json names the family (LlamaForCausalLM,
                     Qwen2ForCausalLM, GPT2LMHeadModel) and its safetensors hold the weights
                     (llmc/hf_model.h); a directory without a config.json is an error
*/
#ifndef LLMC_MODELS_H
#define LLMC_MODELS_H

#include "utils.h"  // first: it sets the POSIX feature macros

#include "gpt2.h"
#include "hf_model.h"
#include "llama.h"
#include "model.h"

// 1 if arg names a fresh model (a descriptor) rather than a file.
static inline int model_is_descriptor(const char *arg) { return gpt2_is_descriptor(arg) || llama_is_descriptor(arg); }

// 1 if arg names a Hugging Face model directory (not a descriptor).
static inline int model_is_hf_dir(const char *arg) { return !model_is_descriptor(arg) && hf_is_dir(arg); }

// The model of -e: fills *spec; with params != NULL also *params, the spec's num_parameters
// fp32 values (malloc'd; free it), from the file or the family's initialisation. vocab: the
// vocabulary of a fresh model (0: the family's own). Without params it is cheap (a
// descriptor's table, a file's header, a directory's config.json). A directory is a Hugging
// Face model (never GPT-2 by default: its config.json says what it is, or it is an error); a
// file is the Llama family's when it starts with its magic, else GPT-2's (whose reader reports
// anything else). 0, or -1 with a message.
static inline int model_load_checked(const char *arg, int vocab, ModelSpec *spec, float **params, char *err,
                                     size_t err_len) {
    if (model_is_hf_dir(arg)) return hf_load_dir_checked(arg, spec, params, err, err_len);
    if (llama_is_descriptor(arg) || (!gpt2_is_descriptor(arg) && llama_is_model_file(arg))) {
        LlamaConfig c;
        if (llama_load_checked(arg, vocab, &c, params, err, err_len) != 0) return -1;
        llama_spec(&c, spec);
        return 0;
    }
    GPT2Config c;
    if (gpt2_load_checked(arg, vocab, &c, params, err, err_len) != 0) return -1;
    gpt2_spec(&c, spec);
    return 0;
}

// The tokenizer.json of -e's Hugging Face directory into buf: 1 where arg is one and holds it
// (what decodes the trainer's samples when -tk is not given), else 0.
static inline int model_dir_tokenizer(const char *arg, char *buf, size_t len) {
    struct stat sb;
    return model_is_hf_dir(arg) && hf_join_(buf, len, arg, "tokenizer.json") == 0 &&
           stat(buf, &sb) == 0;
}

// The files a Hugging Face directory written from this model carries beside it (-hf 1): those of
// -e's directory (its tokenizer's and generation_config.json, llmc/hf_model.h), and where that
// gives no tokenizer.json, tokenizer_json (-tk's, when it is one; NULL: none). Read whole now,
// so that a later write copies what was there at the start. 0, or -1 with a message.
static inline int model_side_files_checked(const char *arg, const char *tokenizer_json, HFSideFiles *s, char *err,
                                           size_t err_len) {
    memset(s, 0, sizeof(*s));
    if (model_is_hf_dir(arg) && hf_side_files_read_checked(s, arg, err, err_len) != 0)
        return -1;
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->name[i], "tokenizer.json") == 0) return 0;
    if (tokenizer_json != NULL && hf_side_files_add_checked(s, "tokenizer.json", tokenizer_json, err, err_len) != 0) {
        hf_side_files_free(s);
        return -1;
    }
    return 0;
}

#endif // LLMC_MODELS_H
