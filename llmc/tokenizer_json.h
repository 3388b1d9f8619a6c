/*
tokenizer_json.h - a Hugging Face tokenizer.json as llm.c's decode Tokenizer (llmc/tokenizer.h),
for printing samples of the Llama 3 / Qwen2.5 family (and GPT-2) without a .bin file.

The file is read by data/hf_tokenizer.h (byte-level BPE; everything it refuses is refused
here, with its message) and turned into the same Tokenizer struct the .bin reader fills, so
tokenizer_decode, tokenizer_decode_ids, tokenizer_print_token and tokenizer_free work
unchanged: every id's bytes are those of hft_token_bytes (the ByteLevel decoder applied to the
token; special tokens decode to their content), vocab_size counts model.vocab and the added
tokens, and eot_token is the document separator (Llama 3: <|begin_of_text|>; GPT-2 and Qwen2:
<|endoftext|>; 0 when the file has neither). version is TOKENIZER_JSON_VERSION, so a caller can
tell the two sources apart.

  tokenizer_init_json_checked(&t, path, err, len)   0 / -1 with a message (never exits)
  tokenizer_init_json(&t, path)   like tokenizer_init: a missing file is a warning and leaves
                                  t.init_ok = 0 (samples as ids); a malformed one is an error
  tokenizer_init_any(&t, path)    tokenizer_init_json for a path ending in ".json", else
                                  tokenizer_init (llm.c's .bin)
  tokenizer_init_any_checked(&t, path, err, len)   the same, a missing file an error too

Building with it needs cJSON: the Makefile's CJSON_CFLAGS / CJSON_LIBS (-lcjson).
*/
#ifndef LLMC_TOKENIZER_JSON_H
#define LLMC_TOKENIZER_JSON_H

#include "tokenizer.h"
#include "../data/hf_tokenizer.h"

#define TOKENIZER_JSON_VERSION 0  // Tokenizer.version of one read from tokenizer.json

static inline int tokenizer_init_json_checked(Tokenizer *t, const char *path, char *err, size_t err_len) {
    memset(t, 0, sizeof(*t));
    HfTokenizer hf;
    if (hft_load_checked(&hf, path, err, err_len) != 0) return -1;
    size_t nbytes = hf.tok_off[hf.vocab_size];
    t->offsets = (uint32_t *)malloc(((size_t)hf.vocab_size + 1) * sizeof(uint32_t));
    t->bytes = (unsigned char *)malloc(nbytes ? nbytes : 1);
    if (t->offsets == NULL || t->bytes == NULL) {
        llmc_set_error(err, err_len, "tokenizer '%s': out of memory", path);
        hft_free(&hf);
        tokenizer_free(t);
        return -1;
    }
    memcpy(t->offsets, hf.tok_off, ((size_t)hf.vocab_size + 1) * sizeof(uint32_t));
    memcpy(t->bytes, hf.tok_bytes, nbytes);
    int sep = hft_document_separator(&hf);
    t->version = TOKENIZER_JSON_VERSION;
    t->vocab_size = (uint32_t)hf.vocab_size;
    t->eot_token = sep >= 0 ? (uint32_t)sep : 0;
    t->init_ok = 1;
    hft_free(&hf);
    return 0;
}

static inline void tokenizer_init_json(Tokenizer *t, const char *path) {
    tokenizer_init_with(t, path, tokenizer_init_json_checked);
}

static inline int tokenizer_is_json_path(const char *path) {
    const size_t n = strlen(path);
    return n >= 5 && strcmp(path + n - 5, ".json") == 0;
}

static inline int tokenizer_init_any_checked(Tokenizer *t, const char *path, char *err, size_t err_len) {
    return tokenizer_is_json_path(path) ? tokenizer_init_json_checked(t, path, err, err_len)
                                        : tokenizer_init_checked(t, path, err, err_len);
}

static inline void tokenizer_init_any(Tokenizer *t, const char *path) {
    if (tokenizer_is_json_path(path)) tokenizer_init_json(t, path);
    else tokenizer_init(t, path);
}

#endif // LLMC_TOKENIZER_JSON_H
