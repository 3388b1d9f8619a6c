/*
bpe_encode.c - builds the default dataset: Tiny Shakespeare encoded with GPT-2's BPE
(data/bpe.h, identical to tiktoken's "gpt2" encoding) into llm.c token shards, plus the
llm.c decode tokenizer file.

Same recipe as llm.c's dev/data/tinyshakespeare.py: the text is split on "\n\n"; every
section gets an <|endoftext|> (50256) in front and is encoded with "\n\n" appended
(except the last section, which is encoded as is); the first 32768 tokens are the
validation split, the rest the training split.

Build and run (from the repository root):
    cc -O2 -o build/bpe_encode data/bpe_encode.c
    build/bpe_encode                # defaults below
Options:
    -i FILE   input text                     (data/tinyshakespeare.txt)
    -e FILE   GPT-2 encoder.json             (data/gpt2/encoder.json)
    -m FILE   GPT-2 vocab.bpe merges         (data/gpt2/vocab.bpe)
    -o DIR    output directory               (data)
    -p NAME   shard name prefix              (tiny_shakespeare)
    -v N      validation tokens              (32768)
    -h        help
Writes DIR/NAME_val.bin, DIR/NAME_train.bin and DIR/gpt2_tokenizer.bin.
*/
#define _POSIX_C_SOURCE 200809L  // llmc/utils.h: fseeko, fsync under -std=c11
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bpe.h"
#include "../llmc/shard.h"
#include "../llmc/tokenizer.h"

static void usage(FILE *f, const char *prog) {
    fprintf(f,
            "usage: %s [-i text] [-e encoder.json] [-m vocab.bpe] [-o outdir] [-p prefix] "
            "[-v val_tokens]\n"
            "  -i FILE  input text            (default data/tinyshakespeare.txt)\n"
            "  -e FILE  GPT-2 encoder.json    (default data/gpt2/encoder.json)\n"
            "  -m FILE  GPT-2 vocab.bpe       (default data/gpt2/vocab.bpe)\n"
            "  -o DIR   output directory      (default data)\n"
            "  -p NAME  shard name prefix     (default tiny_shakespeare)\n"
            "  -v N     validation tokens     (default 32768)\n"
            "writes DIR/NAME_val.bin, DIR/NAME_train.bin (llm.c shards) and "
            "DIR/gpt2_tokenizer.bin\n",
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

int main(int argc, char **argv) {
    const char *text_path = "data/tinyshakespeare.txt";
    const char *encoder_path = "data/gpt2/encoder.json";
    const char *merges_path = "data/gpt2/vocab.bpe";
    const char *out_dir = "data";
    const char *prefix = "tiny_shakespeare";
    long val_tokens = 32768;

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

    clock_t t0 = clock();
    unsigned char *text;
    size_t n;
    if (bpe_read_file(text_path, "text", &text, &n) != 0) return 1;
    if (n == 0) {
        fprintf(stderr, "error: text file '%s' is empty\n", text_path);
        return 1;
    }

    BpeEncoder enc;
    if (bpe_load(&enc, encoder_path, merges_path) != 0) return 1;
    printf("loaded %s (%d tokens) and %s (%d merges), eot = %d\n", encoder_path, enc.vocab_size,
           merges_path, enc.n_merges, enc.eot);

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
        if (bpe_ids_push(&ids, (uint32_t)enc.eot) != 0 ||
            bpe_encode(&enc, text + start, len, &ids) != 0) {
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
    size_t nval = (size_t)val_tokens, ntrain = ids.n - nval;
    char *val_path = join_path(out_dir, prefix, "_val.bin");
    char *train_path = join_path(out_dir, prefix, "_train.bin");
    char *tok_path = join_path(out_dir, "gpt2_tokenizer", ".bin");
    if (shard_write(val_path, ids.ids, nval) != 0) return 1;
    printf("wrote %s: %zu tokens\n", val_path, nval);
    if (shard_write(train_path, ids.ids + nval, ntrain) != 0) return 1;
    printf("wrote %s: %zu tokens\n", train_path, ntrain);
    if (tokenizer_write(tok_path, (uint32_t)enc.vocab_size, (uint32_t)enc.eot, enc.tok_off,
                        enc.tok_bytes) != 0)
        return 1;
    printf("wrote %s: %d tokens, eot %d\n", tok_path, enc.vocab_size, enc.eot);

    free(val_path);
    free(train_path);
    free(tok_path);
    bpe_ids_free(&ids);
    free(text);
    bpe_free(&enc);
    return 0;
}
