/*
tokenizer.h - llm.c's decode tokenizer: token id -> bytes, for printing samples.

File layout (little endian; llm.c tokenizer.h and write_tokenizer in train_gpt2.py):
    uint32 header[256]: [0] = 20240328 (magic), [1] = version (1 or 2), [2] = vocab_size,
                        [3] = eot id (version 2 only; version 1 means eot = 50256), rest 0
    for each id 0 .. vocab_size-1: uint8 len (1..255), then len raw bytes (no NUL)
The reader checks the magic, the version, 1 <= vocab_size <= what the file size allows,
eot < vocab_size, that no token is empty, that the file ends exactly after the last token,
and reports the file name and the field with every error.

  tokenizer_init_checked(&t, path, err, len)  0 / -1 with a message (never exits)
  tokenizer_init(&t, path)   llm.c behaviour: a missing file is a warning and leaves
                             t.init_ok = 0 (the trainer then prints token ids instead of
                             text); a malformed file is an error: message, exit(1)
  tokenizer_decode(&t, id, &len)   the bytes of one token (not NUL-terminated; a token may
                                   contain a NUL byte), NULL for an id outside the vocabulary
  tokenizer_print_token(stream, &t, id)   llm.c's safe_printf rule: a single-byte token that
                             is neither printable ASCII nor whitespace is skipped (it would be
                             a control code for the terminal), anything else is written raw
  token_escape(bytes, len, out, cap)   a one-line escaped rendering for logs (\n, \t, \\,
                             \xNN for every other byte outside printable ASCII)
  tokenizer_write(_checked)  writes a version 2 file (data/bpe_encode.c uses it)
*/
#ifndef LLMC_TOKENIZER_H
#define LLMC_TOKENIZER_H

#include "utils.h"

#define TOKENIZER_MAGIC 20240328
#define TOKENIZER_VERSION 2
#define TOKENIZER_V1_EOT 50256
#define TOKENIZER_HEADER_BYTES 1024

typedef struct {
    int init_ok;
    uint32_t version, vocab_size, eot_token;
    uint32_t *offsets;     // [vocab_size + 1]: token id's bytes are bytes[offsets[id] .. offsets[id+1])
    unsigned char *bytes;  // all token bytes in id order
} Tokenizer;

static inline void tokenizer_free(Tokenizer *t) {
    free(t->offsets);
    free(t->bytes);
    memset(t, 0, sizeof(*t));
}

static inline int tokenizer_init_checked(Tokenizer *t, const char *path, char *err, size_t err_len) {
    memset(t, 0, sizeof(*t));
    FILE *fp = llmc_fopen_read_checked(path, "tokenizer", err, err_len);
    if (fp == NULL) return -1;
    int64_t file_bytes = 0;
    uint32_t header[256];
    if (llmc_file_size(fp, &file_bytes) != 0) {
        llmc_set_error(err, err_len, "tokenizer '%s': cannot determine the file size", path);
        fclose(fp);
        return -1;
    }
    if (file_bytes < TOKENIZER_HEADER_BYTES || llmc_read_exact(fp, header, sizeof(header)) != 0) {
        llmc_set_error(err, err_len, "tokenizer '%s': truncated header (file is %lld bytes, the "
                       "header alone is %d)", path, (long long)file_bytes, TOKENIZER_HEADER_BYTES);
        fclose(fp);
        return -1;
    }
    uint32_t magic = header[0], version = header[1], vocab_size = header[2];
    if (magic != TOKENIZER_MAGIC) {
        llmc_set_error(err, err_len, "tokenizer '%s': bad magic %u (expected %d)", path, magic,
                       TOKENIZER_MAGIC);
        fclose(fp);
        return -1;
    }
    if (version != 1 && version != 2) {
        llmc_set_error(err, err_len, "tokenizer '%s': bad version %u (expected 1 or 2)", path,
                       version);
        fclose(fp);
        return -1;
    }
    // every token takes at least 2 bytes (length + one byte): bounds vocab_size by the file
    int64_t max_vocab = (file_bytes - TOKENIZER_HEADER_BYTES) / 2;
    if (vocab_size < 1 || (int64_t)vocab_size > max_vocab) {
        llmc_set_error(err, err_len, "tokenizer '%s': bad vocab_size %u (the %lld-byte file holds "
                       "at most %lld tokens)", path, vocab_size, (long long)file_bytes,
                       (long long)max_vocab);
        fclose(fp);
        return -1;
    }
    uint32_t eot = version == 1 ? TOKENIZER_V1_EOT : header[3];
    if (eot >= vocab_size) {
        llmc_set_error(err, err_len, "tokenizer '%s': eot id %u is outside the vocabulary of %u "
                       "(version %u)", path, eot, vocab_size, version);
        fclose(fp);
        return -1;
    }
    size_t body = (size_t)(file_bytes - TOKENIZER_HEADER_BYTES);
    unsigned char *raw = (unsigned char *)malloc(body);
    t->offsets = (uint32_t *)malloc(((size_t)vocab_size + 1) * sizeof(uint32_t));
    t->bytes = (unsigned char *)malloc(body);
    if (raw == NULL || t->offsets == NULL || t->bytes == NULL) {
        llmc_set_error(err, err_len, "tokenizer '%s': out of memory", path);
        free(raw);
        fclose(fp);
        tokenizer_free(t);
        return -1;
    }
    int rc = llmc_read_exact(fp, raw, body);
    fclose(fp);
    if (rc != 0) {
        llmc_set_error(err, err_len, "tokenizer '%s': read error", path);
        free(raw);
        tokenizer_free(t);
        return -1;
    }
    size_t pos = 0, out = 0;
    for (uint32_t id = 0; id < vocab_size; id++) {
        if (pos >= body) {
            llmc_set_error(err, err_len, "tokenizer '%s': truncated at token %u of %u", path, id,
                           vocab_size);
            free(raw);
            tokenizer_free(t);
            return -1;
        }
        size_t len = raw[pos++];
        if (len == 0) {
            llmc_set_error(err, err_len, "tokenizer '%s': token %u has length 0", path, id);
            free(raw);
            tokenizer_free(t);
            return -1;
        }
        if (len > body - pos) {
            llmc_set_error(err, err_len, "tokenizer '%s': truncated inside token %u of %u (needs %zu "
                           "bytes, %zu left)", path, id, vocab_size, len, body - pos);
            free(raw);
            tokenizer_free(t);
            return -1;
        }
        t->offsets[id] = (uint32_t)out;
        memcpy(t->bytes + out, raw + pos, len);
        out += len;
        pos += len;
    }
    t->offsets[vocab_size] = (uint32_t)out;
    free(raw);
    if (pos != body) {
        llmc_set_error(err, err_len, "tokenizer '%s': %zu unexpected bytes after the last token",
                       path, body - pos);
        tokenizer_free(t);
        return -1;
    }
    t->version = version;
    t->vocab_size = vocab_size;
    t->eot_token = eot;
    t->init_ok = 1;
    return 0;
}

// A tokenizer file read by read (a *_checked reader): a missing file is a warning that leaves
// t->init_ok 0 (samples printed as ids), a malformed one an error that exits.
typedef int (*TokenizerReader)(Tokenizer *t, const char *path, char *err, size_t err_len);
static inline void tokenizer_init_with(Tokenizer *t, const char *path, TokenizerReader read) {
    char err[1024];
    if (read(t, path, err, sizeof(err)) == 0) return;
    FILE *probe = fopen(path, "rb");
    if (probe == NULL) {
        fprintf(stderr, "---\nWARNING: failed to open the tokenizer file %s: %s\n"
                "Samples will be printed as token ids.\n---\n", path, strerror(errno));
        memset(t, 0, sizeof(*t));  // init_ok = 0
        return;
    }
    fclose(probe);
    fprintf(stderr, "Error: %s\n", err);
    exit(EXIT_FAILURE);
}

static inline void tokenizer_init(Tokenizer *t, const char *path) { tokenizer_init_with(t, path, tokenizer_init_checked); }

// Bytes of token id (len set), or NULL if the tokenizer is not loaded or id is out of range.
static inline const unsigned char *tokenizer_decode(const Tokenizer *t, uint32_t id, size_t *len) {
    if (!t->init_ok || id >= t->vocab_size) {
        *len = 0;
        return NULL;
    }
    *len = t->offsets[id + 1] - t->offsets[id];
    return t->bytes + t->offsets[id];
}

// Concatenates the bytes of ids[0..n) into out (capacity cap); returns the byte count, or
// (size_t)-1 for an id outside the vocabulary or when out is too small.
static inline size_t tokenizer_decode_ids(const Tokenizer *t, const uint32_t *ids, size_t n,
                                          unsigned char *out, size_t cap) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const unsigned char *p = tokenizer_decode(t, ids[i], &len);
        if (p == NULL || len > cap - k) return (size_t)-1;
        memcpy(out + k, p, len);
        k += len;
    }
    return k;
}

static inline int token_byte_is_printable_(unsigned char c) {
    return (c >= 0x20 && c <= 0x7E) || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

// Writes token id as llm.c's safe_printf does; returns the number of bytes written.
static inline size_t tokenizer_print_token(FILE *stream, const Tokenizer *t, uint32_t id) {
    size_t len;
    const unsigned char *p = tokenizer_decode(t, id, &len);
    if (p == NULL) return 0;
    if (len == 1 && !token_byte_is_printable_(p[0])) return 0;  // a lone control byte
    return fwrite(p, 1, len, stream);
}

// Escaped, NUL-terminated rendering of bytes into out (cap >= 1); truncated to fit, never
// cutting an escape in half. Returns the length written (without the NUL).
static inline size_t token_escape(const unsigned char *bytes, size_t len, char *out, size_t cap) {
    size_t k = 0;
    if (cap == 0) return 0;
    for (size_t i = 0; i < len; i++) {
        char piece[5];
        unsigned char c = bytes[i];
        if (c == '\n') snprintf(piece, sizeof(piece), "\\n");
        else if (c == '\t') snprintf(piece, sizeof(piece), "\\t");
        else if (c == '\r') snprintf(piece, sizeof(piece), "\\r");
        else if (c == '\\') snprintf(piece, sizeof(piece), "\\\\");
        else if (c >= 0x20 && c <= 0x7E) { piece[0] = (char)c; piece[1] = 0; }
        else snprintf(piece, sizeof(piece), "\\x%02X", c);
        size_t plen = strlen(piece);
        if (k + plen + 1 > cap) break;
        memcpy(out + k, piece, plen);
        k += plen;
    }
    out[k] = 0;
    return k;
}

// Writes a version 2 tokenizer: token id's bytes are bytes[offsets[id] .. offsets[id+1]).
static inline int tokenizer_write_checked(const char *path, uint32_t vocab_size, uint32_t eot,
                                          const uint32_t *offsets, const unsigned char *bytes,
                                          char *err, size_t err_len) {
    if (vocab_size < 1 || eot >= vocab_size) {
        llmc_set_error(err, err_len, "tokenizer '%s': eot id %u outside the vocabulary (%u)", path,
                       eot, vocab_size);
        return -1;
    }
    for (uint32_t id = 0; id < vocab_size; id++) {
        uint32_t len = offsets[id + 1] - offsets[id];
        if (offsets[id + 1] < offsets[id] || len < 1 || len > 255) {
            llmc_set_error(err, err_len, "tokenizer '%s': token %u has %u bytes (must be 1..255)",
                           path, id, len);
            return -1;
        }
    }
    uint32_t header[256];
    memset(header, 0, sizeof(header));
    header[0] = TOKENIZER_MAGIC;
    header[1] = TOKENIZER_VERSION;
    header[2] = vocab_size;
    header[3] = eot;
    AtomicFile af;
    if (atomic_file_open(&af, path, 0) != 0) {
        llmc_set_error(err, err_len, "%s", af.err);
        return -1;
    }
    atomic_file_write(&af, header, sizeof(header));
    for (uint32_t id = 0; id < vocab_size; id++) {
        unsigned char len = (unsigned char)(offsets[id + 1] - offsets[id]);
        atomic_file_write(&af, &len, 1);
        atomic_file_write(&af, bytes + offsets[id], len);
    }
    if (atomic_file_commit(&af) != 0) {
        llmc_set_error(err, err_len, "%s", af.err);
        return -1;
    }
    return 0;
}

// Printing variant for command-line tools: "error: ..." on stderr, returns -1.
static inline int tokenizer_write(const char *path, uint32_t vocab_size, uint32_t eot,
                                  const uint32_t *offsets, const unsigned char *bytes) {
    char err[512];
    if (tokenizer_write_checked(path, vocab_size, eot, offsets, bytes, err, sizeof(err)) != 0) {
        fprintf(stderr, "error: %s\n", err);
        return -1;
    }
    return 0;
}

#endif // LLMC_TOKENIZER_H
