/*
bpe.h - GPT-2 byte-level BPE encoder, header-only C99. Produces exactly the ids of
tiktoken's "gpt2" encoding (encode_ordinary: "<|endoftext|>" in the text is plain text).

    BpeEncoder enc;
    if (bpe_load(&enc, "data/gpt2/encoder.json", "data/gpt2/vocab.bpe") != 0) exit(1);
    BpeIds ids = {0};
    bpe_encode(&enc, (const unsigned char *)text, strlen(text), &ids);   // appends
    ... ids.ids[0 .. ids.n) ...
    bpe_ids_free(&ids);
    bpe_free(&enc);

Loading. encoder.json maps token strings to ids; the strings are written in GPT-2's byte
alphabet (every byte 0..255 is shown as one printable code point: bytes 33..126, 161..172,
174..255 as themselves, the other 68 bytes as U+0100.. in byte order), so each key is
decoded back to raw bytes. vocab.bpe lists the 50000 merges in rank order. As tiktoken
does, the loader checks that the two files agree: byte b has the id given by its place in
the byte alphabet order, and merge i ("A B") produces the token A+B whose id is 256 + i.
That makes an id the same number as the merge rank, so one hash map (token bytes -> id)
serves both BPE ("which adjacent pair merges first": the pair whose concatenation has the
lowest id) and the final token lookup. Entries of encoder.json that are not byte tokens
or merge results (GPT-2: only "<|endoftext|>" = 50256) are special tokens: they keep
their bytes for decoding but never take part in merges.

Pre-tokenizer. A hand-written matcher equivalent to tiktoken's GPT-2 pattern

    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+

applied leftmost-first over UTF-8 code points (see bpe_piece_end). Character classes:
  \s    = Unicode White_Space: U+0009..000D, 0020, 0085, 00A0, 1680, 2000..200A, 2028,
          2029, 202F, 205F, 3000 (U+001C..001F are NOT whitespace, as in tiktoken);
  \p{L} = General_Category L*, \p{N} = N*, over ALL of Unicode 16.0 (every plane), from
          the generated table bpe_unicode.h (scripts/gen_unicode_tables.py). That is the
          Unicode version tiktoken 0.14 uses; it was checked to agree with tiktoken's
          letter/number/space vs. other split on every code point (but U+0020).
Invalid UTF-8 (which tiktoken cannot be given at all, its input is a Python str) is
handled byte by byte: each bad byte is one "other" character, and its raw byte is kept,
so encoding never fails and decode(encode(x)) == x for any byte string.

BPE. Per piece: if the whole piece is a token, that id; otherwise start from single
bytes and repeatedly merge the adjacent pair whose concatenation has the lowest id (the
leftmost such pair on ties) until no adjacent pair forms a token. O(len log len) per piece
(a linked list of parts and a heap of candidate merges, see bpe_encode_piece).
*/
#ifndef BPE_H
#define BPE_H

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpe_unicode.h"

#define BPE_MAX_TOKEN_BYTES 255   // the decode file stores each token's length in a uint8
#define BPE_MAX_VOCAB (1 << 24)
#define BPE_EOT_STRING "<|endoftext|>"

typedef struct {
    int vocab_size;            // ids 0..vocab_size-1: every entry of encoder.json
    int n_mergeable;           // 256 + number of merges; ids >= this are special tokens
    int n_merges;
    int eot;                   // id of "<|endoftext|>"
    uint32_t *tok_off;         // [vocab_size + 1] byte offsets into tok_bytes, by id
    unsigned char *tok_bytes;  // raw bytes of every token, concatenated in id order
    int32_t *table;            // open addressing hash: mergeable id, or -1 for empty
    size_t table_mask;         // table size - 1 (a power of two)
} BpeEncoder;

typedef struct {
    uint32_t *ids;
    size_t n, cap;
} BpeIds;

// ----------------------------------------------------------------------------
// small utilities

static inline int bpe_ids_push(BpeIds *v, uint32_t id) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 1024;
        uint32_t *p = (uint32_t *)realloc(v->ids, cap * sizeof(uint32_t));
        if (p == NULL) return -1;
        v->ids = p;
        v->cap = cap;
    }
    v->ids[v->n++] = id;
    return 0;
}

static inline void bpe_ids_free(BpeIds *v) {
    free(v->ids);
    v->ids = NULL;
    v->n = v->cap = 0;
}

// Reads a whole file. what names it in messages ("text", "encoder.json", ...).
// Returns 0, or -1 after printing an error naming the file.
static inline int bpe_read_file(const char *path, const char *what, unsigned char **buf,
                                size_t *len) {
    *buf = NULL;
    *len = 0;
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) {
        fprintf(stderr, "error: cannot open %s file '%s': %s\n", what, path, strerror(errno));
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    unsigned char *p = (unsigned char *)malloc(cap + 1);
    if (p == NULL) goto oom;
    for (;;) {
        if (n == cap) {
            cap *= 2;
            unsigned char *q = (unsigned char *)realloc(p, cap + 1);
            if (q == NULL) goto oom;
            p = q;
        }
        size_t got = fread(p + n, 1, cap - n, fp);
        n += got;
        if (got == 0) break;
    }
    if (ferror(fp)) {
        fprintf(stderr, "error: reading %s file '%s' failed: %s\n", what, path, strerror(errno));
        free(p);
        fclose(fp);
        return -1;
    }
    fclose(fp);
    p[n] = 0;  // convenience terminator, not counted in len
    *buf = p;
    *len = n;
    return 0;
oom:
    fprintf(stderr, "error: out of memory reading %s file '%s'\n", what, path);
    free(p);
    fclose(fp);
    return -1;
}

// Decodes one UTF-8 sequence at s[i] (i < n). Returns its length (1..4) and the code
// point; an invalid or truncated sequence, overlong form, surrogate or value above
// U+10FFFF gives length 1 and *valid = 0.
static inline size_t bpe_utf8_decode(const unsigned char *s, size_t n, size_t i,
                                     unsigned int *cp, int *valid) {
    unsigned int c = s[i];
    *valid = 1;
    if (c < 0x80) { *cp = c; return 1; }
    size_t len;
    unsigned int v, min;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; v = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; v = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; v = c & 0x07; min = 0x10000; }
    else { *cp = 0xFFFD; *valid = 0; return 1; }
    if (n - i < len) { *cp = 0xFFFD; *valid = 0; return 1; }
    for (size_t k = 1; k < len; k++) {
        unsigned int b = s[i + k];
        if ((b & 0xC0) != 0x80) { *cp = 0xFFFD; *valid = 0; return 1; }
        v = (v << 6) | (b & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
        *cp = 0xFFFD; *valid = 0; return 1;
    }
    *cp = v;
    return len;
}

// ----------------------------------------------------------------------------
// character classes

enum { BPE_OTHER = 0, BPE_LETTER = 1, BPE_NUMBER = 2, BPE_SPACE = 3 };

static inline int bpe_is_space(unsigned int cp) {
    if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
    if (cp < 0x85) return 0;
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

static inline int bpe_char_class(unsigned int cp) {
    if (cp < 0x80) {
        if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return BPE_LETTER;
        if (cp >= '0' && cp <= '9') return BPE_NUMBER;
        if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return BPE_SPACE;
        return BPE_OTHER;
    }
    if (bpe_is_space(cp)) return BPE_SPACE;
    size_t lo = 0, hi = BPE_UC_NRANGES;  // first range with hi >= cp
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (bpe_uc_ranges[mid].hi < cp) lo = mid + 1; else hi = mid;
    }
    if (lo < BPE_UC_NRANGES && bpe_uc_ranges[lo].lo <= cp) return bpe_uc_ranges[lo].cls;
    return BPE_OTHER;
}

// class of the character at s[i]; *len receives its byte length
static inline int bpe_class_at(const unsigned char *s, size_t n, size_t i, size_t *len) {
    unsigned int cp;
    int valid;
    *len = bpe_utf8_decode(s, n, i, &cp, &valid);
    return valid ? bpe_char_class(cp) : BPE_OTHER;
}

// ----------------------------------------------------------------------------
// pre-tokenizer

// End (exclusive) of the piece that starts at s[i], i < n; the pieces tile the text.
// Alternatives are tried in the pattern's order; the first that matches at i wins:
//   1. 's 't 're 've 'm 'll 'd                     (case sensitive)
//   2-4. optional U+0020 then a maximal run of letters | numbers | "other"
//        (other = not whitespace, not letter, not number)
//   5. \s+(?!\S): a whitespace run that is not followed by a non-space; greedy with
//      backtracking, so a run of 2+ characters before a non-space gives all but its last
//      character (that one then starts the next piece, e.g. " word")
//   6. \s+: the whole whitespace run (a single whitespace character before a non-space)
static inline size_t bpe_piece_end(const unsigned char *s, size_t n, size_t i) {
    if (s[i] == '\'' && i + 1 < n) {
        unsigned char c = s[i + 1];
        if (c == 's' || c == 't' || c == 'm' || c == 'd') return i + 2;
        if (i + 2 < n) {
            unsigned char c2 = s[i + 2];
            if ((c == 'r' && c2 == 'e') || (c == 'v' && c2 == 'e') || (c == 'l' && c2 == 'l'))
                return i + 3;
        }
    }
    size_t k = (s[i] == ' ' && i + 1 < n) ? i + 1 : i;  // " ?" prefix candidate
    size_t len;
    int cls = bpe_class_at(s, n, k, &len);
    if (cls != BPE_SPACE) {
        size_t j = k + len;
        while (j < n && bpe_class_at(s, n, j, &len) == cls) j += len;
        return j;
    }
    // whitespace at i (either s[i] is whitespace other than a lone space before a
    // non-space, or a space followed by more whitespace / the end)
    size_t j = i, last = i;
    while (j < n && bpe_class_at(s, n, j, &len) == BPE_SPACE) {
        last = j;
        j += len;
    }
    if (j == n) return n;     // 5: run reaches the end of the text
    if (last > i) return last; // 5: backtrack one character so (?!\S) holds
    return j;                 // 6
}

// ----------------------------------------------------------------------------
// token table

static inline uint64_t bpe_hash(const unsigned char *p, size_t n) {
    uint64_t h = 1469598103934665603ULL;  // FNV-1a
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h ^ (h >> 29);
}

// id of a mergeable token with exactly these bytes, or -1
static inline int bpe_lookup(const BpeEncoder *e, const unsigned char *p, size_t n) {
    size_t i = (size_t)bpe_hash(p, n) & e->table_mask;
    for (;;) {
        int32_t id = e->table[i];
        if (id < 0) return -1;
        uint32_t off = e->tok_off[id], len = e->tok_off[id + 1] - off;
        if (len == n && memcmp(e->tok_bytes + off, p, n) == 0) return id;
        i = (i + 1) & e->table_mask;
    }
}

// Builds the hash table over ids [0, count); returns the id of a duplicate byte string,
// -1 when there is none, -2 when out of memory.
static inline int bpe_build_table(BpeEncoder *e, int count) {
    size_t size = 1;
    while (size < 2 * (size_t)count + 2) size <<= 1;
    free(e->table);
    e->table = (int32_t *)malloc(size * sizeof(int32_t));
    if (e->table == NULL) return -2;
    for (size_t i = 0; i < size; i++) e->table[i] = -1;
    e->table_mask = size - 1;
    for (int id = 0; id < count; id++) {
        const unsigned char *p = e->tok_bytes + e->tok_off[id];
        size_t n = e->tok_off[id + 1] - e->tok_off[id];
        if (bpe_lookup(e, p, n) >= 0) return id;
        size_t i = (size_t)bpe_hash(p, n) & e->table_mask;
        while (e->table[i] >= 0) i = (i + 1) & e->table_mask;
        e->table[i] = id;
    }
    return -1;
}

// bytes of token id (any id, special tokens included)
static inline const unsigned char *bpe_token_bytes(const BpeEncoder *e, int id, size_t *len) {
    *len = e->tok_off[id + 1] - e->tok_off[id];
    return e->tok_bytes + e->tok_off[id];
}

// GPT-2's byte alphabet. cp_to_byte: code point (< 512) -> byte or -1.
// byte_rank: the byte token's id (its place in the order: direct bytes, then the rest).
static inline void bpe_byte_alphabet(int cp_to_byte[512], int byte_rank[256]) {
    int r = 0, n = 0;
    for (int c = 0; c < 512; c++) cp_to_byte[c] = -1;
    for (int b = 0; b < 256; b++) {
        int direct = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        if (direct) { cp_to_byte[b] = b; byte_rank[b] = r++; }
    }
    for (int b = 0; b < 256; b++) {
        int direct = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        if (!direct) { cp_to_byte[256 + n++] = b; byte_rank[b] = r++; }
    }
}

// ----------------------------------------------------------------------------
// loading encoder.json and vocab.bpe

typedef struct {
    const char *path;
    const unsigned char *s;
    size_t n, i;
    int cp_to_byte[512];
} BpeJson;

static inline void bpe_json_ws(BpeJson *j) {
    while (j->i < j->n && (j->s[j->i] == ' ' || j->s[j->i] == '\t' || j->s[j->i] == '\n' ||
                           j->s[j->i] == '\r'))
        j->i++;
}

static inline int bpe_json_err(BpeJson *j, const char *msg) {
    size_t line = 1;
    for (size_t k = 0; k < j->i && k < j->n; k++) line += j->s[k] == '\n';
    fprintf(stderr, "error: encoder.json file '%s': %s (line %zu, byte offset %zu)\n", j->path,
            msg, line, j->i);
    return -1;
}

static inline int bpe_hex4(const unsigned char *p, unsigned int *v) {
    *v = 0;
    for (int k = 0; k < 4; k++) {
        unsigned int c = p[k], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return -1;
        *v = (*v << 4) | d;
    }
    return 0;
}

// Parses a JSON string at j->i whose characters are GPT-2 byte-alphabet code points, and
// writes the raw bytes they stand for into out (capacity BPE_MAX_TOKEN_BYTES).
static inline int bpe_json_token(BpeJson *j, unsigned char *out, size_t *outlen) {
    if (j->i >= j->n || j->s[j->i] != '"') return bpe_json_err(j, "expected '\"'");
    j->i++;
    size_t n = 0;
    for (;;) {
        if (j->i >= j->n) return bpe_json_err(j, "unterminated string (file truncated?)");
        unsigned int c = j->s[j->i], cp;
        if (c == '"') { j->i++; break; }
        if (c < 0x20) return bpe_json_err(j, "control character inside a string");
        if (c == '\\') {
            if (j->i + 1 >= j->n) return bpe_json_err(j, "unterminated escape");
            unsigned int e = j->s[j->i + 1];
            j->i += 2;
            switch (e) {
            case '"': cp = '"'; break;
            case '\\': cp = '\\'; break;
            case '/': cp = '/'; break;
            case 'b': cp = 0x08; break;
            case 'f': cp = 0x0C; break;
            case 'n': cp = 0x0A; break;
            case 'r': cp = 0x0D; break;
            case 't': cp = 0x09; break;
            case 'u': {
                if (j->n - j->i < 4 || bpe_hex4(j->s + j->i, &cp) != 0)
                    return bpe_json_err(j, "bad \\u escape");
                j->i += 4;
                if (cp >= 0xD800 && cp <= 0xDBFF) {  // surrogate pair
                    unsigned int lo;
                    if (j->n - j->i < 6 || j->s[j->i] != '\\' || j->s[j->i + 1] != 'u' ||
                        bpe_hex4(j->s + j->i + 2, &lo) != 0 || lo < 0xDC00 || lo > 0xDFFF)
                        return bpe_json_err(j, "unpaired surrogate in \\u escape");
                    j->i += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                    return bpe_json_err(j, "unpaired surrogate in \\u escape");
                }
                break;
            }
            default: return bpe_json_err(j, "unknown escape");
            }
        } else {
            int valid;
            size_t len = bpe_utf8_decode(j->s, j->n, j->i, &cp, &valid);
            if (!valid) return bpe_json_err(j, "invalid UTF-8");
            j->i += len;
        }
        if (cp >= 512 || j->cp_to_byte[cp] < 0) {
            char msg[96];
            snprintf(msg, sizeof(msg), "character U+%04X is not in GPT-2's byte alphabet", cp);
            return bpe_json_err(j, msg);
        }
        if (n == BPE_MAX_TOKEN_BYTES) return bpe_json_err(j, "token longer than 255 bytes");
        out[n++] = (unsigned char)j->cp_to_byte[cp];
    }
    *outlen = n;
    return 0;
}

// Decodes one space-free field of a vocab.bpe line into raw bytes; -1 on a character
// outside the byte alphabet or invalid UTF-8.
static inline int bpe_merge_field(const unsigned char *s, size_t n, const int cp_to_byte[512],
                                  unsigned char *out, size_t *outlen) {
    size_t i = 0, m = 0;
    while (i < n) {
        unsigned int cp;
        int valid;
        size_t len = bpe_utf8_decode(s, n, i, &cp, &valid);
        if (!valid || cp >= 512 || cp_to_byte[cp] < 0 || m == BPE_MAX_TOKEN_BYTES) return -1;
        out[m++] = (unsigned char)cp_to_byte[cp];
        i += len;
    }
    *outlen = m;
    return 0;
}

static inline void bpe_free(BpeEncoder *e) {
    free(e->tok_off);
    free(e->tok_bytes);
    free(e->table);
    memset(e, 0, sizeof(*e));
}

// Parses encoder.json into e->tok_off / tok_bytes / vocab_size.
static inline int bpe_load_encoder_json(BpeEncoder *e, const char *path,
                                        const int cp_to_byte[512]) {
    unsigned char *buf;
    size_t len;
    if (bpe_read_file(path, "encoder.json", &buf, &len) != 0) return -1;
    BpeJson j;
    j.path = path;
    j.s = buf;
    j.n = len;
    j.i = 0;
    memcpy(j.cp_to_byte, cp_to_byte, sizeof(j.cp_to_byte));

    // entries in file order: bytes in `bytes`, (offset, length, id) in `ent`
    size_t ent_cap = 65536, nent = 0, bytes_cap = 1 << 20, nbytes = 0;
    uint32_t *ent = (uint32_t *)malloc(ent_cap * 3 * sizeof(uint32_t));
    unsigned char *bytes = (unsigned char *)malloc(bytes_cap);
    uint32_t *off = NULL;
    unsigned char *tb = NULL;
    int rc = -1;
    if (ent == NULL || bytes == NULL) { fprintf(stderr, "error: out of memory\n"); goto done; }

    bpe_json_ws(&j);
    if (j.i >= j.n || j.s[j.i] != '{') { bpe_json_err(&j, "expected '{'"); goto done; }
    j.i++;
    bpe_json_ws(&j);
    if (j.i < j.n && j.s[j.i] == '}') { bpe_json_err(&j, "empty object"); goto done; }
    for (;;) {
        unsigned char tok[BPE_MAX_TOKEN_BYTES];
        size_t tlen = 0;
        bpe_json_ws(&j);
        if (bpe_json_token(&j, tok, &tlen) != 0) goto done;
        bpe_json_ws(&j);
        if (j.i >= j.n || j.s[j.i] != ':') { bpe_json_err(&j, "expected ':'"); goto done; }
        j.i++;
        bpe_json_ws(&j);
        if (j.i >= j.n || j.s[j.i] < '0' || j.s[j.i] > '9') {
            bpe_json_err(&j, "expected a non-negative integer id");
            goto done;
        }
        long id = 0;
        while (j.i < j.n && j.s[j.i] >= '0' && j.s[j.i] <= '9') {
            id = id * 10 + (j.s[j.i++] - '0');
            if (id >= BPE_MAX_VOCAB) { bpe_json_err(&j, "id too large"); goto done; }
        }
        if (nent == ent_cap) {
            ent_cap *= 2;
            uint32_t *p = (uint32_t *)realloc(ent, ent_cap * 3 * sizeof(uint32_t));
            if (p == NULL) { fprintf(stderr, "error: out of memory\n"); goto done; }
            ent = p;
        }
        if (nbytes + tlen > bytes_cap) {
            bytes_cap *= 2;
            unsigned char *p = (unsigned char *)realloc(bytes, bytes_cap);
            if (p == NULL) { fprintf(stderr, "error: out of memory\n"); goto done; }
            bytes = p;
        }
        if (nent >= BPE_MAX_VOCAB) { bpe_json_err(&j, "too many entries"); goto done; }
        memcpy(bytes + nbytes, tok, tlen);
        ent[3 * nent] = (uint32_t)nbytes;
        ent[3 * nent + 1] = (uint32_t)tlen;
        ent[3 * nent + 2] = (uint32_t)id;
        nent++;
        nbytes += tlen;
        bpe_json_ws(&j);
        if (j.i < j.n && j.s[j.i] == ',') { j.i++; continue; }
        if (j.i < j.n && j.s[j.i] == '}') { j.i++; break; }
        bpe_json_err(&j, j.i >= j.n ? "unexpected end of file (truncated?)" : "expected ',' or '}'");
        goto done;
    }
    bpe_json_ws(&j);
    if (j.i != j.n) { bpe_json_err(&j, "trailing data after the object"); goto done; }

    {  // ids must be exactly 0..nent-1 (a block: no goto above crosses its declarations in C++)
        off = (uint32_t *)malloc((nent + 1) * sizeof(uint32_t));
        tb = (unsigned char *)malloc(nbytes ? nbytes : 1);
        uint32_t *slot = (uint32_t *)malloc(nent * sizeof(uint32_t));
        if (off == NULL || tb == NULL || slot == NULL) {
            free(slot);
            fprintf(stderr, "error: out of memory\n");
            goto done;
        }
        for (size_t k = 0; k < nent; k++) slot[k] = UINT32_MAX;
        for (size_t k = 0; k < nent; k++) {
            uint32_t id = ent[3 * k + 2];
            if (id >= nent || slot[id] != UINT32_MAX) {
                fprintf(stderr, "error: encoder.json file '%s': ids must be 0..%zu, each once; "
                        "id %u is %s\n", path, nent - 1, id, id >= nent ? "out of range" : "repeated");
                free(slot);
                goto done;
            }
            slot[id] = (uint32_t)k;
        }
        size_t pos = 0;
        for (size_t id = 0; id < nent; id++) {
            uint32_t k = slot[id];
            off[id] = (uint32_t)pos;
            memcpy(tb + pos, bytes + ent[3 * k], ent[3 * k + 1]);
            pos += ent[3 * k + 1];
        }
        off[nent] = (uint32_t)pos;
        free(slot);
        e->vocab_size = (int)nent;
        e->tok_off = off;
        e->tok_bytes = tb;
        off = NULL;
        tb = NULL;
        rc = 0;
    }
done:
    free(off);
    free(tb);
    free(ent);
    free(bytes);
    free(buf);
    return rc;
}

// Loads and cross-checks encoder.json and vocab.bpe. Returns 0, or -1 after printing an
// error that names the offending file.
static inline int bpe_load(BpeEncoder *e, const char *encoder_json_path,
                           const char *vocab_bpe_path) {
    memset(e, 0, sizeof(*e));
    e->eot = -1;
    int cp_to_byte[512], byte_rank[256];
    bpe_byte_alphabet(cp_to_byte, byte_rank);
    if (bpe_load_encoder_json(e, encoder_json_path, cp_to_byte) != 0) goto fail;
    if (e->vocab_size < 256) {
        fprintf(stderr, "error: encoder.json file '%s': only %d entries, need the 256 byte "
                "tokens\n", encoder_json_path, e->vocab_size);
        goto fail;
    }
    {
        int dup = bpe_build_table(e, e->vocab_size);
        if (dup == -2) { fprintf(stderr, "error: out of memory\n"); goto fail; }
        if (dup >= 0) {
            fprintf(stderr, "error: encoder.json file '%s': id %d has the same bytes as an "
                    "earlier id\n", encoder_json_path, dup);
            goto fail;
        }
    }
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        int id = bpe_lookup(e, &c, 1);
        if (id != byte_rank[b]) {
            fprintf(stderr, "error: encoder.json file '%s': byte 0x%02X has id %d, expected "
                    "%d (GPT-2 byte order)\n", encoder_json_path, b, id, byte_rank[b]);
            goto fail;
        }
    }
    {
        unsigned char *buf;
        size_t len;
        if (bpe_read_file(vocab_bpe_path, "vocab.bpe", &buf, &len) != 0) goto fail;
        size_t i = 0, line = 0;
        int nm = 0, bad = 0;
        while (i < len && !bad) {
            size_t start = i;
            while (i < len && buf[i] != '\n') i++;
            size_t end = i;
            if (i < len) i++;  // skip '\n'
            line++;
            if (end > start && buf[end - 1] == '\r') end--;
            if (line == 1 && end > start && buf[start] == '#') continue;  // "#version: 0.2"
            if (end == start) continue;                                  // blank (last) line
            size_t sp = start;
            while (sp < end && buf[sp] != ' ') sp++;
            unsigned char a[BPE_MAX_TOKEN_BYTES], b[BPE_MAX_TOKEN_BYTES],
                ab[2 * BPE_MAX_TOKEN_BYTES];
            size_t na, nb;
            if (sp == start || sp + 1 >= end || memchr(buf + sp + 1, ' ', end - sp - 1) != NULL) {
                fprintf(stderr, "error: vocab.bpe file '%s' line %zu: expected two fields "
                        "separated by one space\n", vocab_bpe_path, line);
                bad = 1;
                break;
            }
            if (bpe_merge_field(buf + start, sp - start, cp_to_byte, a, &na) != 0 ||
                bpe_merge_field(buf + sp + 1, end - sp - 1, cp_to_byte, b, &nb) != 0) {
                fprintf(stderr, "error: vocab.bpe file '%s' line %zu: character outside GPT-2's "
                        "byte alphabet (or too long)\n", vocab_bpe_path, line);
                bad = 1;
                break;
            }
            memcpy(ab, a, na);
            memcpy(ab + na, b, nb);
            int ida = bpe_lookup(e, a, na), idb = bpe_lookup(e, b, nb);
            int idab = bpe_lookup(e, ab, na + nb), want = 256 + nm;
            if (ida < 0 || idb < 0 || ida >= want || idb >= want || idab != want) {
                fprintf(stderr, "error: vocab.bpe file '%s' line %zu: merge %d does not match "
                        "encoder.json '%s' (parts have ids %d, %d; merged token has id %d, "
                        "expected %d)\n", vocab_bpe_path, line, nm, encoder_json_path, ida, idb,
                        idab, want);
                bad = 1;
                break;
            }
            nm++;
        }
        free(buf);
        if (bad) goto fail;
        e->n_merges = nm;
        e->n_mergeable = 256 + nm;
    }
    // everything above the merges must be a special token (as tiktoken's loader demands:
    // "<|endoftext|>", or "<|startoftext|>"): kept for decoding, never merged
    for (int id = e->n_mergeable; id < e->vocab_size; id++) {
        size_t n;
        const unsigned char *p = bpe_token_bytes(e, id, &n);
        if (n == strlen(BPE_EOT_STRING) && memcmp(p, BPE_EOT_STRING, n) == 0) {
            e->eot = id;
        } else if (!(n == strlen("<|startoftext|>") && memcmp(p, "<|startoftext|>", n) == 0)) {
            fprintf(stderr, "error: encoder.json file '%s' has %d entries but vocab.bpe file "
                    "'%s' has only %d merges (256 + %d tokens): id %d is neither a merge result "
                    "nor a special token (truncated or mismatched files?)\n", encoder_json_path,
                    e->vocab_size, vocab_bpe_path, e->n_merges, e->n_merges, id);
            goto fail;
        }
    }
    if (e->eot < 0) {
        fprintf(stderr, "error: encoder.json file '%s': no special token \"%s\" after the %d "
                "merge tokens of '%s'\n", encoder_json_path, BPE_EOT_STRING, e->n_mergeable,
                vocab_bpe_path);
        goto fail;
    }
    if (bpe_build_table(e, e->n_mergeable) != -1) { fprintf(stderr, "error: out of memory\n"); goto fail; }
    return 0;
fail:
    bpe_free(e);
    return -1;
}

// ----------------------------------------------------------------------------
// encoding
//
// A piece can be as long as the text (a run of letters or digits with no space in it), so
// BPE must not rescan every pair for each merge. The parts of a piece form a doubly linked
// list, each part named by the offset of its first byte: end[i] is where part i ends (the
// next part starts there), prev[i] where the part before it starts, and rank[i] the id of
// part i joined with the next part, INT_MAX when that is no token, when i is the last part
// or when i no longer starts a part. Candidate merges wait in a binary min-heap keyed by
// (rank, offset): its top is the lowest-id pair, the leftmost on ties, the very pair that a
// scan over all pairs would pick. A merge changes rank[] of two parts only, the merged one
// and the one before it; their new pairs are pushed and their old entries are left in the
// heap, to be dropped when they surface. An entry (r, i) is current iff rank[i] == r: an id
// names its bytes, and rank[i] only ever changes to the id of a longer string that starts at
// i (part i and the part after it only grow), or to INT_MAX, so it never comes back to r.

// heap key: rank << BPE_POS_BITS | offset, so that comparing keys compares (rank, offset).
// Ids are below BPE_MAX_VOCAB = 2^24, so the key fits 64 bits for pieces shorter than 2^40
// bytes (longer ones are refused: their workspace could not be allocated anyway).
#define BPE_POS_BITS 40

static inline uint64_t bpe_heap_key(int rank, size_t i) {
    return (uint64_t)rank << BPE_POS_BITS | (uint64_t)i;
}

typedef struct {
    size_t cap;      // the arrays hold pieces up to cap bytes
    size_t *end;     // [cap] end[i]: end of the part that starts at byte i
    size_t *prev;    // [cap] prev[i]: start of the part before part i
    int *rank;       // [cap] rank[i]: id of part i joined with the next part, or INT_MAX
    uint64_t *heap;  // [2 * cap] candidate merges; n - 1 at the start, at most one more per merge
} BpeWork;

static inline void bpe_work_free(BpeWork *w) {
    free(w->end);
    free(w->prev);
    free(w->rank);
    free(w->heap);
    memset(w, 0, sizeof(*w));
}

static inline int bpe_work_reserve(BpeWork *w, size_t n) {
    if (n <= w->cap) return 0;
    if ((uint64_t)n >> BPE_POS_BITS || n > SIZE_MAX / (2 * sizeof(uint64_t))) return -1;
    size_t cap = w->cap ? w->cap : 64;
    while (cap < n) cap *= 2;
    bpe_work_free(w);
    w->end = (size_t *)malloc(cap * sizeof(size_t));
    w->prev = (size_t *)malloc(cap * sizeof(size_t));
    w->rank = (int *)malloc(cap * sizeof(int));
    w->heap = (uint64_t *)malloc(2 * cap * sizeof(uint64_t));
    if (w->end == NULL || w->prev == NULL || w->rank == NULL || w->heap == NULL) {
        bpe_work_free(w);
        return -1;
    }
    w->cap = cap;
    return 0;
}

// id of the bytes p[i..k), or INT_MAX when they are not a mergeable token
static inline int bpe_rank(const BpeEncoder *e, const unsigned char *p, size_t i, size_t k) {
    int id = bpe_lookup(e, p + i, k - i);
    return id < 0 ? INT_MAX : id;
}

static inline void bpe_heap_down(uint64_t *h, size_t n, size_t k) {
    uint64_t x = h[k];
    for (;;) {
        size_t c = 2 * k + 1;
        if (c >= n) break;
        if (c + 1 < n && h[c + 1] < h[c]) c++;
        if (h[c] >= x) break;
        h[k] = h[c];
        k = c;
    }
    h[k] = x;
}

// pushes the pair that starts at part i, if it is a token
static inline void bpe_heap_push(uint64_t *h, size_t *n, int rank, size_t i) {
    if (rank == INT_MAX) return;
    uint64_t x = bpe_heap_key(rank, i);
    size_t k = (*n)++;
    while (k > 0 && h[(k - 1) / 2] > x) {
        h[k] = h[(k - 1) / 2];
        k = (k - 1) / 2;
    }
    h[k] = x;
}

// BPE of one piece p[0..n), n >= 1; appends ids.
static inline int bpe_encode_piece(const BpeEncoder *e, const unsigned char *p, size_t n,
                                   BpeWork *w, BpeIds *out) {
    int whole = bpe_lookup(e, p, n);
    if (whole >= 0) return bpe_ids_push(out, (uint32_t)whole);
    if (bpe_work_reserve(w, n) != 0) return -1;
    size_t *end = w->end, *prev = w->prev, nheap = 0;
    int *rank = w->rank;
    uint64_t *heap = w->heap;
    for (size_t i = 0; i < n; i++) {
        end[i] = i + 1;
        prev[i] = i > 0 ? i - 1 : 0;  // prev[0] is never read
        rank[i] = i + 1 < n ? bpe_rank(e, p, i, i + 2) : INT_MAX;
        if (rank[i] != INT_MAX) heap[nheap++] = bpe_heap_key(rank[i], i);
    }
    for (size_t k = nheap / 2; k-- > 0;) bpe_heap_down(heap, nheap, k);
    const uint64_t pos_mask = ((uint64_t)1 << BPE_POS_BITS) - 1;
    while (nheap > 0) {
        size_t i = (size_t)(heap[0] & pos_mask);
        if ((uint64_t)rank[i] != heap[0] >> BPE_POS_BITS) {  // stale entry: drop it
            heap[0] = heap[--nheap];
            bpe_heap_down(heap, nheap, 0);
            continue;
        }
        // join part i and the part j after it; k starts the part after that (or is n)
        size_t j = end[i], k = end[j];
        end[i] = k;
        rank[j] = INT_MAX;
        if (k < n) prev[k] = i;
        rank[i] = k < n ? bpe_rank(e, p, i, end[k]) : INT_MAX;
        // the merged part's new pair takes the top's place: one sift instead of two
        if (rank[i] != INT_MAX) heap[0] = bpe_heap_key(rank[i], i);
        else heap[0] = heap[--nheap];
        bpe_heap_down(heap, nheap, 0);
        if (i > 0) {
            size_t h = prev[i];
            rank[h] = bpe_rank(e, p, h, k);
            bpe_heap_push(heap, &nheap, rank[h], h);
        }
    }
    for (size_t i = 0; i < n; i = end[i]) {
        int id = bpe_lookup(e, p + i, end[i] - i);
        if (id < 0 || bpe_ids_push(out, (uint32_t)id) != 0) return -1;  // id < 0: impossible
    }
    return 0;
}

// Encodes text[0..n) like tiktoken's encode_ordinary and appends the ids to out.
// Returns 0, or -1 when out of memory.
static inline int bpe_encode(const BpeEncoder *e, const unsigned char *text, size_t n,
                             BpeIds *out) {
    BpeWork w = {0, NULL, NULL, NULL, NULL};
    int rc = 0;
    size_t i = 0;
    while (i < n && rc == 0) {
        size_t j = bpe_piece_end(text, n, i);
        rc = bpe_encode_piece(e, text + i, j - i, &w, out);
        i = j;
    }
    bpe_work_free(&w);
    return rc;
}

#endif // BPE_H
