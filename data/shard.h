/*
shard.h - llm.c's token shard and decode-tokenizer files, header-only C99: checked
writers (temporary file, then rename) and strict readers. All integers little endian.

Token shard (llm.c dataloader.h):
    int32 header[256]: [0] = 20240520 (magic), [1] = 1 (version), [2] = ntok, rest 0
    uint16 tokens[ntok]
  The file size must be exactly 1024 + 2 * ntok.

Decode tokenizer (llm.c tokenizer.h):
    uint32 header[256]: [0] = 20240328 (magic), [1] = version, [2] = vocab_size,
                        [3] = eot id (version 2; version 1 means eot = 50256), rest 0
    per token id 0..vocab_size-1: uint8 len (1..255), then len raw bytes (no NUL)
  The reader rejects anything after the last token.

Every function returns 0 on success or -1 after printing "error: ..." naming the file.
Writers create "<path>.tmp", check every fwrite and the fclose, then rename it over
<path> (the temporary is removed on failure), so a reader never sees a partial file.
*/
#ifndef LLMC_SHARD_H
#define LLMC_SHARD_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define SHARD_HEADER_INTS 256
#define TOKENIZER_MAGIC 20240328
#define TOKENIZER_VERSION 2
#define TOKENIZER_V1_EOT 50256

// ----------------------------------------------------------------------------
// checked output file, written to <path>.tmp then renamed

typedef struct {
    FILE *fp;
    char *tmp;
    const char *path;
    int failed;
} LlmcOut;

static inline int llmc_out_open(LlmcOut *o, const char *path) {
    o->fp = NULL;
    o->path = path;
    o->failed = 0;
    size_t n = strlen(path);
    o->tmp = (char *)malloc(n + 5);
    if (o->tmp == NULL) {
        fprintf(stderr, "error: out of memory opening '%s'\n", path);
        return -1;
    }
    memcpy(o->tmp, path, n);
    memcpy(o->tmp + n, ".tmp", 5);
    o->fp = fopen(o->tmp, "wb");
    if (o->fp == NULL) {
        fprintf(stderr, "error: cannot create '%s': %s\n", o->tmp, strerror(errno));
        free(o->tmp);
        o->tmp = NULL;
        return -1;
    }
    return 0;
}

static inline void llmc_out_write(LlmcOut *o, const void *p, size_t n) {
    if (o->failed || n == 0) return;
    if (fwrite(p, 1, n, o->fp) != n) {
        fprintf(stderr, "error: writing '%s' failed: %s\n", o->tmp, strerror(errno));
        o->failed = 1;
    }
}

// Finishes the file: flush + close (checked), then rename to the final path.
// With abort != 0 (or after a failed write) the temporary is removed instead.
static inline int llmc_out_close(LlmcOut *o, int abort) {
    int rc = 0;
    if (o->fp == NULL) return -1;
    if (!o->failed && !abort && (fflush(o->fp) != 0 || ferror(o->fp))) {
        fprintf(stderr, "error: writing '%s' failed: %s\n", o->tmp, strerror(errno));
        o->failed = 1;
    }
    if (fclose(o->fp) != 0 && !o->failed && !abort) {
        fprintf(stderr, "error: closing '%s' failed: %s\n", o->tmp, strerror(errno));
        o->failed = 1;
    }
    o->fp = NULL;
    if (o->failed || abort) {
        remove(o->tmp);
        rc = -1;
    } else if (rename(o->tmp, o->path) != 0) {
        fprintf(stderr, "error: renaming '%s' to '%s' failed: %s\n", o->tmp, o->path,
                strerror(errno));
        remove(o->tmp);
        rc = -1;
    }
    free(o->tmp);
    o->tmp = NULL;
    return rc;
}

static inline void llmc_put_u32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v & 0xFF);
    p[1] = (unsigned char)((v >> 8) & 0xFF);
    p[2] = (unsigned char)((v >> 16) & 0xFF);
    p[3] = (unsigned char)((v >> 24) & 0xFF);
}

static inline uint32_t llmc_get_u32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

// ----------------------------------------------------------------------------
// token shards

// Writes ids[0..n) (each < 65536, n <= INT32_MAX) as an llm.c shard.
static inline int shard_write(const char *path, const uint32_t *ids, size_t n) {
    if (n > 0x7FFFFFFF) {
        fprintf(stderr, "error: '%s': %zu tokens do not fit the shard header\n", path, n);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (ids[i] > 0xFFFF) {
            fprintf(stderr, "error: '%s': token %zu has id %u, too large for uint16\n", path, i,
                    ids[i]);
            return -1;
        }
    }
    unsigned char header[SHARD_HEADER_INTS * 4];
    memset(header, 0, sizeof(header));
    llmc_put_u32(header, SHARD_MAGIC);
    llmc_put_u32(header + 4, SHARD_VERSION);
    llmc_put_u32(header + 8, (uint32_t)n);
    LlmcOut o;
    if (llmc_out_open(&o, path) != 0) return -1;
    llmc_out_write(&o, header, sizeof(header));
    unsigned char buf[8192];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        buf[k++] = (unsigned char)(ids[i] & 0xFF);
        buf[k++] = (unsigned char)(ids[i] >> 8);
        if (k == sizeof(buf)) { llmc_out_write(&o, buf, k); k = 0; }
    }
    llmc_out_write(&o, buf, k);
    return llmc_out_close(&o, 0);
}

// Reads an llm.c shard; *ids is malloc'd (free it). Checks magic, version, ntok >= 1 and
// that the file is exactly 1024 + 2 * ntok bytes long.
static inline int shard_read(const char *path, uint16_t **ids, size_t *n) {
    *ids = NULL;
    *n = 0;
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) {
        fprintf(stderr, "error: cannot open shard '%s': %s\n", path, strerror(errno));
        return -1;
    }
    unsigned char header[SHARD_HEADER_INTS * 4];
    if (fread(header, 1, sizeof(header), fp) != sizeof(header)) {
        fprintf(stderr, "error: shard '%s': truncated header (need %zu bytes)\n", path,
                sizeof(header));
        fclose(fp);
        return -1;
    }
    uint32_t magic = llmc_get_u32(header), version = llmc_get_u32(header + 4);
    int32_t ntok = (int32_t)llmc_get_u32(header + 8);
    if (magic != SHARD_MAGIC || version != SHARD_VERSION) {
        fprintf(stderr, "error: shard '%s': bad header (magic %u version %u, expected %d %d)\n",
                path, magic, version, SHARD_MAGIC, SHARD_VERSION);
        fclose(fp);
        return -1;
    }
    if (ntok < 1) {
        fprintf(stderr, "error: shard '%s': bad token count %d\n", path, (int)ntok);
        fclose(fp);
        return -1;
    }
    size_t count = (size_t)ntok;
    unsigned char *raw = (unsigned char *)malloc(2 * count);
    uint16_t *out = (uint16_t *)malloc(count * sizeof(uint16_t));
    if (raw == NULL || out == NULL) {
        fprintf(stderr, "error: shard '%s': out of memory for %zu tokens\n", path, count);
        free(raw);
        free(out);
        fclose(fp);
        return -1;
    }
    size_t got = fread(raw, 2, count, fp);
    int extra = (got == count) ? fgetc(fp) : EOF;
    int err = ferror(fp);
    fclose(fp);
    if (err || got != count || extra != EOF) {
        if (err)
            fprintf(stderr, "error: shard '%s': read error\n", path);
        else if (got != count)
            fprintf(stderr, "error: shard '%s': truncated: header says %zu tokens, file holds "
                    "%zu\n", path, count, got);
        else
            fprintf(stderr, "error: shard '%s': file is longer than 1024 + 2 * %zu bytes\n",
                    path, count);
        free(raw);
        free(out);
        return -1;
    }
    for (size_t i = 0; i < count; i++)
        out[i] = (uint16_t)(raw[2 * i] | (raw[2 * i + 1] << 8));
    free(raw);
    *ids = out;
    *n = count;
    return 0;
}

// ----------------------------------------------------------------------------
// decode tokenizer

typedef struct {
    uint32_t version, vocab_size, eot;
    uint32_t *off;          // [vocab_size + 1] offsets into bytes
    unsigned char *bytes;   // token bytes in id order
} LlmcTokenizer;

static inline void llmc_tokenizer_free(LlmcTokenizer *t) {
    free(t->off);
    free(t->bytes);
    memset(t, 0, sizeof(*t));
}

// Writes a version 2 tokenizer file: token id's bytes are bytes[off[id] .. off[id+1]).
static inline int llmc_tokenizer_write(const char *path, uint32_t vocab_size, uint32_t eot,
                                       const uint32_t *off, const unsigned char *bytes) {
    if (eot >= vocab_size) {
        fprintf(stderr, "error: '%s': eot id %u outside the vocabulary (%u)\n", path, eot,
                vocab_size);
        return -1;
    }
    for (uint32_t id = 0; id < vocab_size; id++) {
        uint32_t len = off[id + 1] - off[id];
        if (len < 1 || len > 255) {
            fprintf(stderr, "error: '%s': token %u has %u bytes (must be 1..255)\n", path, id, len);
            return -1;
        }
    }
    unsigned char header[256 * 4];
    memset(header, 0, sizeof(header));
    llmc_put_u32(header, TOKENIZER_MAGIC);
    llmc_put_u32(header + 4, TOKENIZER_VERSION);
    llmc_put_u32(header + 8, vocab_size);
    llmc_put_u32(header + 12, eot);
    LlmcOut o;
    if (llmc_out_open(&o, path) != 0) return -1;
    llmc_out_write(&o, header, sizeof(header));
    for (uint32_t id = 0; id < vocab_size; id++) {
        unsigned char len = (unsigned char)(off[id + 1] - off[id]);
        llmc_out_write(&o, &len, 1);
        llmc_out_write(&o, bytes + off[id], len);
    }
    return llmc_out_close(&o, 0);
}

// Reads a version 1 or 2 tokenizer file strictly (no truncation, no trailing bytes,
// no zero-length tokens, eot inside the vocabulary).
static inline int llmc_tokenizer_read(const char *path, LlmcTokenizer *t) {
    memset(t, 0, sizeof(*t));
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) {
        fprintf(stderr, "error: cannot open tokenizer '%s': %s\n", path, strerror(errno));
        return -1;
    }
    unsigned char header[256 * 4];
    if (fread(header, 1, sizeof(header), fp) != sizeof(header)) {
        fprintf(stderr, "error: tokenizer '%s': truncated header\n", path);
        fclose(fp);
        return -1;
    }
    uint32_t magic = llmc_get_u32(header);
    t->version = llmc_get_u32(header + 4);
    t->vocab_size = llmc_get_u32(header + 8);
    t->eot = t->version == 1 ? TOKENIZER_V1_EOT : llmc_get_u32(header + 12);
    if (magic != TOKENIZER_MAGIC || (t->version != 1 && t->version != 2)) {
        fprintf(stderr, "error: tokenizer '%s': bad header (magic %u version %u, expected %d "
                "and 1 or 2)\n", path, magic, t->version, TOKENIZER_MAGIC);
        fclose(fp);
        memset(t, 0, sizeof(*t));
        return -1;
    }
    if (t->vocab_size < 1 || t->vocab_size > (1u << 24) || t->eot >= t->vocab_size) {
        fprintf(stderr, "error: tokenizer '%s': bad vocab_size %u / eot %u\n", path,
                t->vocab_size, t->eot);
        fclose(fp);
        memset(t, 0, sizeof(*t));
        return -1;
    }
    size_t cap = (size_t)t->vocab_size * 8, pos = 0;
    t->off = (uint32_t *)malloc(((size_t)t->vocab_size + 1) * sizeof(uint32_t));
    t->bytes = (unsigned char *)malloc(cap);
    if (t->off == NULL || t->bytes == NULL) {
        fprintf(stderr, "error: tokenizer '%s': out of memory\n", path);
        goto fail;
    }
    for (uint32_t id = 0; id < t->vocab_size; id++) {
        unsigned char len;
        if (fread(&len, 1, 1, fp) != 1) {
            fprintf(stderr, "error: tokenizer '%s': truncated at token %u of %u\n", path, id,
                    t->vocab_size);
            goto fail;
        }
        if (len == 0) {
            fprintf(stderr, "error: tokenizer '%s': token %u has length 0\n", path, id);
            goto fail;
        }
        if (pos + len > cap) {
            cap = 2 * cap + len;
            unsigned char *p = (unsigned char *)realloc(t->bytes, cap);
            if (p == NULL) {
                fprintf(stderr, "error: tokenizer '%s': out of memory\n", path);
                goto fail;
            }
            t->bytes = p;
        }
        t->off[id] = (uint32_t)pos;
        if (fread(t->bytes + pos, 1, len, fp) != len) {
            fprintf(stderr, "error: tokenizer '%s': truncated inside token %u of %u\n", path, id,
                    t->vocab_size);
            goto fail;
        }
        pos += len;
    }
    t->off[t->vocab_size] = (uint32_t)pos;
    if (fgetc(fp) != EOF) {
        fprintf(stderr, "error: tokenizer '%s': unexpected bytes after the last token\n", path);
        goto fail;
    }
    if (ferror(fp)) {
        fprintf(stderr, "error: tokenizer '%s': read error\n", path);
        goto fail;
    }
    fclose(fp);
    return 0;
fail:
    fclose(fp);
    llmc_tokenizer_free(t);
    return -1;
}

// Appends the bytes of ids[0..n) to out (capacity outcap); returns the number of bytes
// written, or (size_t)-1 on an id outside the vocabulary or when out is too small.
static inline size_t llmc_tokenizer_decode(const LlmcTokenizer *t, const uint32_t *ids, size_t n,
                                           unsigned char *out, size_t outcap) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= t->vocab_size) return (size_t)-1;
        size_t len = t->off[ids[i] + 1] - t->off[ids[i]];
        if (k + len > outcap) return (size_t)-1;
        memcpy(out + k, t->bytes + t->off[ids[i]], len);
        k += len;
    }
    return k;
}

#endif // LLMC_SHARD_H
