/*
bpe_encode.c - builds the default dataset: Tiny Shakespeare encoded with GPT-2's BPE
(data/bpe.h, identical to tiktoken's "gpt2" encoding) into llm.c token shards, plus the
llm.c decode tokenizer file; or, with -t, encoded with a Hugging Face tokenizer.json
(data/hf_tokenizer.h: GPT-2, Llama 3, Qwen2 / Qwen2.5, identical to the `tokenizers` package).

Same recipe as llm.c's dev/data/tinyshakespeare.py: the text is split on "\n\n"; every
section gets the document separator in front and is encoded with "\n\n" appended
(except the last section, which is encoded as is); the first 32768 tokens are the
validation split, the rest the training split. The separator is GPT-2's <|endoftext|>
(50256); with -t it is the tokenizer's own (hft_document_separator): the special token that
its post-processor puts first (Llama 3: <|begin_of_text|>, as llm.c's script uses for
Llama 3), else <|endoftext|> (GPT-2, Qwen2) or <|end_of_text|>; -s TOKEN names another added
token. Special-token text inside the input is encoded as ordinary text (tiktoken's
encode_ordinary; tokenizers' split_special_tokens, as llm.c's script does), unless -a 1.

Build and run (from the repository root):
    make build/bpe_encode           (cc -O2 -o build/bpe_encode data/bpe_encode.c -lcjson)
    build/bpe_encode                # defaults below
    build/bpe_encode -t tokenizer.json
Options:
    -i FILE   input text                     (data/tinyshakespeare.txt)
    -e FILE   GPT-2 encoder.json             (data/gpt2/encoder.json)
    -m FILE   GPT-2 vocab.bpe merges         (data/gpt2/vocab.bpe)
    -t FILE   a tokenizer.json instead of -e / -m
    -s TOKEN  with -t: the document separator, an added token's content
    -a 0|1    with -t: 1 matches special tokens written in the text (default 0)
    -o DIR    output directory               (data)
    -p NAME   shard name prefix              (tiny_shakespeare; with -t
                                              tiny_shakespeare_<gpt2|llama3|qwen2|none>, after
                                              the tokenizer's pre-tokenizer, so that the
                                              committed GPT-2 shards are not overwritten)
    -v N      validation tokens              (32768)
    -h        help
Writes DIR/NAME_val.bin and DIR/NAME_train.bin: version 1 (uint16 tokens) shards, or with -t
and a vocabulary of more than 65,535 tokens version 7 (uint32, llm.c's Llama 3 format); and
without -t DIR/gpt2_tokenizer.bin. With -t there is no .bin decode file: the trainer's
decoder reads the tokenizer.json itself (llmc/tokenizer_json.h).
*/
#define _POSIX_C_SOURCE 200809L  // llmc/utils.h: fseeko, fsync under -std=c11
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bpe.h"
#include "hf_tokenizer.h"
#include "../llmc/shard.h"
#include "../llmc/tokenizer.h"

static void usage(FILE *f, const char *prog) {
    fprintf(f,
            "usage: %s [-i text] [-e encoder.json -m vocab.bpe | -t tokenizer.json [-s token] [-a 0|1]]\n"
            "          [-o outdir] [-p prefix] [-v val_tokens]\n"
            "  -i FILE  input text            (default data/tinyshakespeare.txt)\n"
            "  -e FILE  GPT-2 encoder.json    (default data/gpt2/encoder.json)\n"
            "  -m FILE  GPT-2 vocab.bpe       (default data/gpt2/vocab.bpe)\n"
            "  -t FILE  a Hugging Face tokenizer.json (byte-level BPE: GPT-2, Llama 3, Qwen2) instead\n"
            "  -s TOK   with -t: document separator (default: the tokenizer's BOS, else <|endoftext|>)\n"
            "  -a 0|1   with -t: match special tokens written in the text (default 0: plain text)\n"
            "  -o DIR   output directory      (default data)\n"
            "  -p NAME  shard name prefix     (default tiny_shakespeare; with -t\n"
            "           tiny_shakespeare_<pre-tokenizer: gpt2, llama3, qwen2>)\n"
            "  -v N     validation tokens     (default 32768)\n"
            "writes DIR/NAME_val.bin, DIR/NAME_train.bin (llm.c shards: uint16, or uint32 for a\n"
            "vocabulary over 65535) and, without -t, DIR/gpt2_tokenizer.bin\n",
            prog);
}

static char *join_path(const char *dir, const char *name, const char *suffix) {
    size_t n = strlen(dir) + strlen(name) + strlen(suffix) + 2;
    char *p = (char *)malloc(n);
    if (p == NULL) {
        fprintf(stderr, "error: out of memory\n");
        exit(1);
    }
    size_t dl = strlen(dir);
    int slash = dl > 0 && dir[dl - 1] != '/';
    snprintf(p, n, "%s%s%s%s", dir, slash ? "/" : "", name, suffix);
    return p;
}

// the token of an added token's content, or -1
static int added_token_id(const HfTokenizer *t, const char *content) {
    for (int k = 0; k < t->n_added; k++)
        if (t->added[k].len == strlen(content) && memcmp(t->added[k].content, content, t->added[k].len) == 0)
            return t->added[k].id;
    return -1;
}

int main(int argc, char **argv) {
    const char *text_path = "data/tinyshakespeare.txt";
    const char *encoder_path = NULL, *merges_path = NULL, *hf_path = NULL, *sep_content = NULL;
    const char *out_dir = "data";
    const char *prefix = NULL;
    long val_tokens = 32768;
    int allow_special = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout, argv[0]);
            return 0;
        }
        if (a[0] != '-' || a[1] == 0 || a[2] != 0 || i + 1 >= argc) {
            fprintf(stderr, "error: bad argument '%s'\n", a);
            usage(stderr, argv[0]);
            return 1;
        }
        const char *v = argv[++i];
        switch (a[1]) {
        case 'i': text_path = v; break;
        case 'e': encoder_path = v; break;
        case 'm': merges_path = v; break;
        case 't': hf_path = v; break;
        case 's': sep_content = v; break;
        case 'a':
            if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0) {
                fprintf(stderr, "error: -a wants 0 or 1, got '%s'\n", v);
                return 1;
            }
            allow_special = v[0] == '1';
            break;
        case 'o': out_dir = v; break;
        case 'p': prefix = v; break;
        case 'v': {
            char *end;
            val_tokens = strtol(v, &end, 10);
            if (*v == 0 || *end != 0 || val_tokens < 1 || val_tokens > 0x7FFFFFFF) {
                fprintf(stderr, "error: -v wants a positive token count, got '%s'\n", v);
                return 1;
            }
            break;
        }
        default:
            fprintf(stderr, "error: unknown option '%s'\n", a);
            usage(stderr, argv[0]);
            return 1;
        }
    }
    if (hf_path != NULL && (encoder_path != NULL || merges_path != NULL)) {
        fprintf(stderr, "error: -t (a tokenizer.json) replaces -e / -m (GPT-2's files): give one or the other\n");
        return 1;
    }
    if (hf_path == NULL && (sep_content != NULL || allow_special)) {
        fprintf(stderr, "error: -s and -a go with -t\n");
        return 1;
    }
    if (encoder_path == NULL) encoder_path = "data/gpt2/encoder.json";
    if (merges_path == NULL) merges_path = "data/gpt2/vocab.bpe";

    clock_t t0 = clock();
    unsigned char *text;
    size_t n;
    if (bpe_read_file(text_path, "text", &text, &n) != 0) return 1;
    if (n == 0) {
        fprintf(stderr, "error: text file '%s' is empty\n", text_path);
        return 1;
    }

    BpeEncoder enc;
    HfTokenizer hf;
    int sep, vocab_size;
    char default_prefix[64];
    if (hf_path == NULL) {
        if (bpe_load(&enc, encoder_path, merges_path) != 0) return 1;
        printf("loaded %s (%d tokens) and %s (%d merges), eot = %d\n", encoder_path, enc.vocab_size,
               merges_path, enc.n_merges, enc.eot);
        sep = enc.eot;
        vocab_size = enc.vocab_size;
        if (prefix == NULL) prefix = "tiny_shakespeare";
    } else {
        if (hft_load(&hf, hf_path) != 0) return 1;
        sep = sep_content != NULL ? added_token_id(&hf, sep_content) : hft_document_separator(&hf);
        if (sep < 0) {
            if (sep_content != NULL)
                fprintf(stderr, "error: -s '%s' is not an added token of tokenizer.json '%s'\n", sep_content, hf_path);
            else
                fprintf(stderr, "error: tokenizer.json '%s' has no BOS (post_processor) and no <|endoftext|> or "
                        "<|end_of_text|> added token: name the document separator with -s\n", hf_path);
            hft_free(&hf);
            return 1;
        }
        size_t len;
        const unsigned char *sep_bytes = hft_token_bytes(&hf, (uint32_t)sep, &len);
        printf("loaded %s: %d tokens (%d model, %d added), %d merges, pre-tokenizer %s%s%s; document separator "
               "%d \"%.*s\"; special tokens in the text %s\n", hf_path, hf.vocab_size, hf.n_model,
               hf.vocab_size - hf.n_model, hf.n_merges, hft_pre_name(hf.pre), hf.nfc ? ", NFC" : "",
               hf.ignore_merges ? ", ignore_merges" : "", sep, (int)len, (const char *)sep_bytes,
               allow_special ? "matched" : "encoded as text");
        vocab_size = hf.vocab_size;
        if (prefix == NULL) {
            snprintf(default_prefix, sizeof(default_prefix), "tiny_shakespeare_%s", hft_pre_name(hf.pre));
            prefix = default_prefix;
        }
    }

    // sections separated by "\n\n" (non-overlapping, left to right, like Python's split)
    BpeIds ids = {NULL, 0, 0};
    size_t start = 0, nsections = 0;
    for (;;) {
        size_t end = start;
        while (end + 1 < n && !(text[end] == '\n' && text[end + 1] == '\n')) end++;
        int last = !(end + 1 < n);
        if (last) end = n;
        // section text[start..end) plus, unless last, the "\n\n" that follows it
        size_t len = (end - start) + (last ? 0 : 2);
        int rc = bpe_ids_push(&ids, (uint32_t)sep);
        if (rc == 0) rc = hf_path == NULL ? bpe_encode(&enc, text + start, len, &ids)
                                          : hft_encode(&hf, text + start, len, allow_special, &ids);
        if (rc != 0) {
            fprintf(stderr, "error: out of memory while encoding '%s'\n", text_path);
            return 1;
        }
        nsections++;
        if (last) break;
        start = end + 2;
    }
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    printf("encoded %s: %zu bytes, %zu sections, %zu tokens (%.2f s)\n", text_path, n, nsections,
           ids.n, secs);

    if (ids.n <= (size_t)val_tokens) {
        fprintf(stderr, "error: '%s' gives only %zu tokens, not more than the %ld validation "
                "tokens\n", text_path, ids.n, val_tokens);
        return 1;
    }
    // uint16 tokens while every id fits, as llm.c does for GPT-2; uint32 (version 7) beyond
    int version = vocab_size > 65535 ? SHARD_VERSION_LLAMA3 : SHARD_VERSION;
    size_t nval = (size_t)val_tokens, ntrain = ids.n - nval;
    char *val_path = join_path(out_dir, prefix, "_val.bin");
    char *train_path = join_path(out_dir, prefix, "_train.bin");
    char err[512];
    if (shard_write_checked(val_path, ids.ids, nval, version, err, sizeof(err)) != 0 ||
        shard_write_checked(train_path, ids.ids + nval, ntrain, version, err, sizeof(err)) != 0) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    printf("wrote %s: %zu tokens\n", val_path, nval);
    printf("wrote %s: %zu tokens (version %d shards: %s tokens)\n", train_path, ntrain, version,
           version == SHARD_VERSION ? "uint16" : "uint32");
    if (hf_path == NULL) {
        char *tok_path = join_path(out_dir, "gpt2_tokenizer", ".bin");
        if (tokenizer_write(tok_path, (uint32_t)enc.vocab_size, (uint32_t)enc.eot, enc.tok_off,
                            enc.tok_bytes) != 0)
            return 1;
        printf("wrote %s: %d tokens, eot %d\n", tok_path, enc.vocab_size, enc.eot);
        free(tok_path);
        bpe_free(&enc);
    } else {
        hft_free(&hf);
    }

    free(val_path);
    free(train_path);
    bpe_ids_free(&ids);
    free(text);
    return 0;
}
