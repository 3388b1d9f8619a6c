/*
hf_tokenizer.h - Hugging Face tokenizer.json of the byte-level BPE kind (GPT-2, Llama 3,
Qwen2 / Qwen2.5) in plain C: load, encode, decode. Header-only C11 that also compiles as C++
(the trainer includes it through llmc/tokenizer_json.h); needs cJSON (-lcjson).
The ids are those of the `tokenizers` package (checked token for token by
test/test_hf_tokenizer.c against fixtures that scripts/make_test_tokenizers.py wrote with it).

    HfTokenizer t;
    char err[512];
    if (hft_load_checked(&t, "tokenizer.json", err, sizeof(err)) != 0) { puts(err); exit(1); }
    BpeIds ids = {0};                                   // data/bpe.h's growable id vector
    hft_encode(&t, (const unsigned char *)text, strlen(text), 0, &ids);   // appends
    size_t len;
    const unsigned char *p = hft_token_bytes(&t, ids.ids[0], &len);       // decode one id
    bpe_ids_free(&ids);
    hft_free(&t);

hft_encode(t, text, n, allow_special, out) is tokenizers' encode(text, add_special_tokens=False):
no BOS/EOS is added (the post_processor is not applied; data/bpe_encode.c puts the document
separator in itself). allow_special = 1 matches special added tokens written in the text (the
library's default); 0 encodes their text as ordinary text (the library with
encode_special_tokens = True, llm.c's split_special_tokens=True / tiktoken's
encode_ordinary): what data preparation wants, so that a document cannot forge a <|eot|>.
Non-special added tokens are matched either way. An HfTokenizer carries the encoder's cache
and work buffers: one per thread.

Pipeline (as tokenizers does it, in this order):
  1. added tokens with normalized = false are split out of the raw text (leftmost-longest
     literal match, continuing after each match; lstrip / rstrip absorb the White_Space next
     to the token into it; a special token skipped for allow_special = 0 still consumes its
     match, as the library's matcher does);
  2. the rest is normalized: nothing, or NFC (Unicode 9.0.0, tokenizers' version;
     data/unicode_nfc.h);
  3. added tokens with normalized = true are split out of the normalized text, matched by the
     NFC of their content;
  4. the pre-tokenizer splits each remaining segment into pieces: GPT-2's pattern (ByteLevel
     with use_regex), or a Split with Llama 3's or Qwen2's pattern, or nothing (ByteLevel
     without regex); ByteLevel's add_prefix_space puts a space before a segment that does not
     start with one;
  5. BPE per piece: the piece's bytes (the byte-level alphabet is a bijection, so bytes stand
     for its characters) start as the 256 byte tokens; then, with ignore_merges, a piece that
     is itself in model.vocab is that token; otherwise the merges apply in rank order
     (lowest rank first, leftmost on ties), through a heap of candidate pairs and a linked
     list of parts, O(len log len) per piece; pieces up to 64 bytes are cached (piece -> ids).
The three patterns are matched by hand-written code over UTF-8 code points (hft_piece_end),
with \p{L} / \p{N} from data/bpe_unicode.h (Unicode 16.0: tokenizers' regex engine agrees on
every code point) and \s = White_Space:
  GPT-2   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  Llama 3 (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  Qwen2   the same with \p{N} in place of \p{N}{1,3}
Invalid UTF-8 (the library cannot be given it: its input is a str) is handled byte by byte,
each bad byte an "other" character that NFC leaves alone, so encoding never fails and
decoding gives back the (normalized) bytes.

Decoding: every id has bytes (hft_token_bytes): the ByteLevel decoder applied to its token
string, which is the model.vocab key, or for an added token its content (its normalized
content when it is a normalized token under NFC, as the library decodes it): each character
of the byte alphabet becomes its byte, and a string with a character outside the alphabet is
kept as its UTF-8 (so "<|endoftext|>" and every other special token of the three families
decode to their content). Concatenating them is tokenizers' decode(ids,
skip_special_tokens=False) before its lossy UTF-8 conversion.

What is read from tokenizer.json, and what is refused (hft_load_checked; each error names
the file and the field):
  version          "1.0" when present
  model            type "BPE" (WordPiece, Unigram, WordLevel refused); vocab: keys unique and
                   non-empty, ids exactly 0..n-1, each once; the 256 byte-level one-character
                   tokens present (else it is not a byte-level vocabulary); merges: all
                   "a b" strings (lines starting "#version" skipped) or all [a, b] pairs,
                   both parts and their concatenation in vocab (a repeated pair takes its last
                   rank, as in the library); dropout null or 0; byte_fallback false;
                   continuing_subword_prefix / end_of_word_suffix null or ""; ignore_merges;
                   unk_token and fuse_unk are read but never needed (every byte has a token)
  added_tokens     every field present as the library requires; content non-empty and unique;
                   single_word true refused; the id must be the one the library assigns on
                   loading (it ignores the file's id: model.vocab's id when the content is a
                   vocab key, else the next id after the vocabulary, in order), so ids are
                   dense 0..vocab_size-1
  normalizer       null, NFC, or a Sequence of those; anything else refused
  pre_tokenizer    ByteLevel, or a Sequence of a Split (pattern {"Regex": one of the three
                   strings above, compared exactly; behavior Isolated; invert false) and a
                   ByteLevel with use_regex false and add_prefix_space false; a missing
                   ByteLevel means the BPE is not byte-level: refused
  decoder          ByteLevel (or a Sequence holding only it)
  post_processor   only read for the BOS: a TemplateProcessing (alone or in a Sequence) whose
                   single template starts with a special token gives bos_id
  truncation, padding   ignored (they only shape batches of the library's encode)
eos_id is the added token "<|endoftext|>" (GPT-2, Qwen2) or "<|end_of_text|>" (Llama 3);
hft_document_separator() is bos_id when there is one (Llama 3, as llm.c's data scripts put
<|begin_of_text|> before each document), else eos_id (GPT-2 and Qwen2: <|endoftext|>).
*/
#ifndef HF_TOKENIZER_H
#define HF_TOKENIZER_H

#include "../llmc/utils.h"  // first: it sets _POSIX_C_SOURCE; llmc_set_error, checked reads

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "bpe.h"          // UTF-8 decoding, the \p{L} / \p{N} / \s classes, GPT-2's piece matcher,
                          // the byte alphabet, BpeIds
#include "unicode_nfc.h"  // Unicode 9.0.0 NFC tables

#define HFT_MAX_VOCAB (1 << 24)      // ids and merge ranks fit 24 bits (the heap key, below)
#define HFT_MAX_FILE_BYTES (1 << 30)  // a tokenizer.json larger than 1 GiB is refused
#ifndef HFT_CACHE_MAX_PIECE
#define HFT_CACHE_MAX_PIECE 64        // pieces up to this many bytes are cached (0: no cache; at most 255)
#endif
#define HFT_CACHE_SLOTS (1 << 17)     // cache table size; at half full the cache is emptied
typedef char hft_cache_piece_fits_a_byte[HFT_CACHE_MAX_PIECE >= 0 && HFT_CACHE_MAX_PIECE <= 255 ? 1 : -1];

enum { HFT_PRE_NONE = 0, HFT_PRE_GPT2 = 1, HFT_PRE_LLAMA3 = 2, HFT_PRE_QWEN2 = 3 };

// the patterns, exactly as tokenizer.json spells them (after JSON unescaping)
#define HFT_PATTERN_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define HFT_PATTERN_LLAMA3                                                                     \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define HFT_PATTERN_QWEN2                                                                      \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"       \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

typedef struct {
    int id;
    unsigned char *content;  // as in the file (UTF-8), len bytes
    size_t len;
    unsigned char *pattern;  // what the text is matched against: content, or its NFC for a
    size_t plen;             // normalized token under an NFC normalizer
    unsigned char special, lstrip, rstrip, normalized;
} HftAdded;

// a byte trie over the added tokens' patterns: leftmost-longest matching
typedef struct {
    int32_t root[256];  // node of the first byte, or -1
    int32_t *child;     // first child of a node, or -1
    int32_t *sibling;   // next sibling, or -1
    unsigned char *byte;
    int32_t *added;     // index into HfTokenizer.added of the pattern ending here, or -1
    int n, cap;
} HftTrie;

// one split of a text by the added tokens: [start, stop) and the added token, or -1 for text
typedef struct {
    size_t start, stop;
    int added;
} HftSplit;

typedef struct {
    HftSplit *v;
    size_t n, cap;
} HftSplits;

typedef struct {
    unsigned char *p;
    size_t n, cap;
} HftBuf;

// the piece -> ids cache: open addressing over slots; keys and ids live in two arenas
typedef struct {
    uint64_t *hash;     // [HFT_CACHE_SLOTS]; 0 = empty (a real hash of 0 is stored as 1)
    uint32_t *key_off;  // offsets into keys / ids, and their lengths
    uint32_t *ids_off;
    unsigned char *key_len, *n_ids;
    unsigned char *keys;
    uint32_t *ids;
    size_t n_used, keys_n, ids_n;
} HftCache;

// BPE of one piece: parts as a linked list over byte offsets, candidate merges in a heap
typedef struct {
    uint64_t key;     // rank << 40 | position: the heap order, as tokenizers' (rank, pos)
    uint32_t new_id;  // the merge's result: an entry is current when the pair now at its
} HftMerge;           // position still merges into this id (the library's own test)

typedef struct {
    size_t cap;
    uint32_t *id;     // [cap] id of the part starting at byte i
    size_t *next;     // [cap] start of the part after part i (n at the end)
    size_t *prev;     // [cap] start of the part before part i (SIZE_MAX for the first)
    unsigned char *alive;
    HftMerge *heap;   // [3 * cap]: n - 1 at the start, at most two more per merge
} HftWork;

typedef struct {
    int vocab_size;           // ids 0..vocab_size-1: model.vocab, then added tokens not in it
    int n_model;              // model.vocab entries (ids 0..n_model-1)
    uint32_t *tok_off;        // [vocab_size + 1]: id's decoded bytes are tok_bytes[tok_off[id] ..
    unsigned char *tok_bytes; //                   tok_off[id + 1])
    unsigned char *tok_kind;  // [vocab_size] HFT_KIND_*
    int32_t *vocab_table;     // byte string -> model id, for the byte-level model tokens
    size_t vocab_mask;
    int byte_id[256];         // the token of each byte
    uint64_t *merge_key;      // (a << 32 | b) -> rank, result; UINT64_MAX = empty slot
    uint32_t *merge_rank, *merge_new;
    size_t merge_mask;
    int n_merges;
    int ignore_merges;
    int nfc;                  // normalizer: 0 none, 1 NFC
    int pre;                  // HFT_PRE_*
    int add_prefix_space;
    int n_added;
    HftAdded *added;
    HftTrie trie_raw, trie_norm;  // added tokens with normalized false / true
    int bos_id, eos_id;       // -1 when none
    // encoder state (mutable: an HfTokenizer is not shared between threads)
    HftCache cache;
    HftWork work;
    HftSplits split1, split2;
    HftBuf nfc_buf, seg_buf;
    uint32_t *cp_buf, *cp_tmp;  // NFC code points
    unsigned char *ccc_buf;
    size_t cp_cap;
} HfTokenizer;

enum {
    HFT_KIND_MODEL = 0,      // model.vocab entry in the byte alphabet
    HFT_KIND_MODEL_RAW = 1,  // model.vocab entry with a character outside it (decoded as UTF-8)
    HFT_KIND_ADDED = 2,      // added token (the flag is or-ed in: model entry and added token)
    HFT_KIND_SPECIAL = 4     // special added token
};

// ----------------------------------------------------------------------------
// small utilities

static inline int hft_buf_reserve(HftBuf *b, size_t n) {
    if (n <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < n) {
        if (cap > SIZE_MAX / 2) return -1;
        cap *= 2;
    }
    unsigned char *p = (unsigned char *)realloc(b->p, cap);
    if (p == NULL) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int hft_splits_push(HftSplits *s, size_t start, size_t stop, int added) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        HftSplit *p = (HftSplit *)realloc(s->v, cap * sizeof(HftSplit));
        if (p == NULL) return -1;
        s->v = p;
        s->cap = cap;
    }
    s->v[s->n].start = start;
    s->v[s->n].stop = stop;
    s->v[s->n].added = added;
    s->n++;
    return 0;
}

// UTF-8 encoding of cp (< 0x110000) into out; returns the length (1..4)
static inline size_t hft_utf8_put(unsigned int cp, unsigned char *out) {
    if (cp < 0x80) { out[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xC0 | (cp >> 6));
        out[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xE0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | (cp >> 18));
    out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

// A JSON string for error messages: at most 40 bytes of s, quoted, control bytes as '?'.
// Uses one of four static buffers, so up to four can appear in one message.
static inline const char *hft_quote(const char *s) {
    static char bufs[4][64];
    static int which = 0;
    char *b = bufs[which];
    which = (which + 1) & 3;
    size_t k = 0;
    b[k++] = '"';
    if (s == NULL) s = "";
    size_t n = strlen(s), m = n > 40 ? 40 : n;
    for (size_t i = 0; i < m; i++) b[k++] = ((unsigned char)s[i] < 0x20) ? '?' : s[i];
    if (m < n) { b[k++] = '.'; b[k++] = '.'; b[k++] = '.'; }
    b[k++] = '"';
    b[k] = 0;
    return b;
}

// ----------------------------------------------------------------------------
// NFC (Unicode 9.0.0): quick check, then decompose, order, compose where needed

#define HFT_SBASE 0xAC00u
#define HFT_LBASE 0x1100u
#define HFT_VBASE 0x1161u
#define HFT_TBASE 0x11A7u
#define HFT_LCOUNT 19u
#define HFT_VCOUNT 21u
#define HFT_TCOUNT 28u
#define HFT_NCOUNT (HFT_VCOUNT * HFT_TCOUNT)
#define HFT_SCOUNT (HFT_LCOUNT * HFT_NCOUNT)
#define HFT_RAW_BYTE 0x110000u  // an invalid UTF-8 byte b is carried as HFT_RAW_BYTE + b

// canonical combining class; *qc receives the NFC quick check (0 yes, 1 maybe, 2 no)
static inline int hft_nfc_prop(unsigned int cp, int *qc) {
    *qc = 0;
    if (cp < 0x300 || cp >= HFT_RAW_BYTE) return 0;
    size_t lo = 0, hi = NFC_NPROPS;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (nfc_props[mid].hi < cp) lo = mid + 1; else hi = mid;
    }
    if (lo < NFC_NPROPS && nfc_props[lo].lo <= cp) {
        *qc = nfc_props[lo].qc;
        return nfc_props[lo].ccc;
    }
    return 0;
}

static inline int hft_nfc_ccc(unsigned int cp) {
    int qc;
    return hft_nfc_prop(cp, &qc);
}

// index of cp in nfc_decomp, or -1
static inline int hft_nfc_decomp_index(unsigned int cp) {
    if (cp < 0xC0 || cp >= HFT_RAW_BYTE) return -1;
    size_t lo = 0, hi = NFC_NDECOMP;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (nfc_decomp[mid].cp < cp) lo = mid + 1; else hi = mid;
    }
    return (lo < NFC_NDECOMP && nfc_decomp[lo].cp == cp) ? (int)lo : -1;
}

// appends the full canonical decomposition of cp to out[*n..] (room for 4 more is enough:
// no Unicode 9.0 decomposition is longer)
static inline void hft_nfc_decompose(unsigned int cp, uint32_t *out, size_t *n) {
    if (cp >= HFT_SBASE && cp < HFT_SBASE + HFT_SCOUNT) {
        unsigned int s = cp - HFT_SBASE;
        out[(*n)++] = HFT_LBASE + s / HFT_NCOUNT;
        out[(*n)++] = HFT_VBASE + (s % HFT_NCOUNT) / HFT_TCOUNT;
        if (s % HFT_TCOUNT != 0) out[(*n)++] = HFT_TBASE + s % HFT_TCOUNT;
        return;
    }
    int k = hft_nfc_decomp_index(cp);
    if (k < 0) {
        out[(*n)++] = cp;
        return;
    }
    hft_nfc_decompose(nfc_decomp[k].a, out, n);
    if (nfc_decomp[k].b != 0) hft_nfc_decompose(nfc_decomp[k].b, out, n);
}

// the primary composite of a + b, or 0
static inline unsigned int hft_nfc_compose(unsigned int a, unsigned int b) {
    if (a >= HFT_LBASE && a < HFT_LBASE + HFT_LCOUNT && b >= HFT_VBASE && b < HFT_VBASE + HFT_VCOUNT)
        return HFT_SBASE + ((a - HFT_LBASE) * HFT_VCOUNT + (b - HFT_VBASE)) * HFT_TCOUNT;
    if (a >= HFT_SBASE && a < HFT_SBASE + HFT_SCOUNT && (a - HFT_SBASE) % HFT_TCOUNT == 0 &&
        b > HFT_TBASE && b < HFT_TBASE + HFT_TCOUNT)
        return a + (b - HFT_TBASE);
    size_t lo = 0, hi = NFC_NCOMP;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct nfc_decomp *d = &nfc_decomp[nfc_comp[mid]];
        if (d->a < a || (d->a == a && d->b < b)) lo = mid + 1; else hi = mid;
    }
    if (lo < NFC_NCOMP) {
        const struct nfc_decomp *d = &nfc_decomp[nfc_comp[lo]];
        if (d->a == a && d->b == b) return d->cp;
    }
    return 0;
}

// 1 when s[0..n) may change under NFC (the NFC quick check is not "yes")
static inline int hft_nfc_needed(const unsigned char *s, size_t n) {
    int last_ccc = 0;
    for (size_t i = 0; i < n;) {
        if (s[i] < 0x80) {  // ASCII: ccc 0, quick check yes
            last_ccc = 0;
            i++;
            continue;
        }
        unsigned int cp;
        int valid, qc;
        i += bpe_utf8_decode(s, n, i, &cp, &valid);
        int ccc = valid ? hft_nfc_prop(cp, &qc) : 0;
        if (!valid) qc = 0;
        if (qc != 0 || (ccc != 0 && last_ccc > ccc)) return 1;
        last_ccc = ccc;
    }
    return 0;
}

static inline int hft_cp_reserve(HfTokenizer *t, size_t n) {
    if (n <= t->cp_cap) return 0;
    size_t cap = t->cp_cap ? t->cp_cap : 256;
    while (cap < n) {
        if (cap > SIZE_MAX / (2 * sizeof(uint32_t))) return -1;
        cap *= 2;
    }
    uint32_t *a = (uint32_t *)realloc(t->cp_buf, cap * sizeof(uint32_t));
    if (a != NULL) t->cp_buf = a;
    uint32_t *b = (uint32_t *)realloc(t->cp_tmp, cap * sizeof(uint32_t));
    if (b != NULL) t->cp_tmp = b;
    unsigned char *c = (unsigned char *)realloc(t->ccc_buf, cap);
    if (c != NULL) t->ccc_buf = c;
    if (a == NULL || b == NULL || c == NULL) return -1;
    t->cp_cap = cap;
    return 0;
}

// stable sort of cp[0..n) by ccc[] (a run of non-starters): insertion sort for short runs,
// merge sort for long ones so that a text of a million combining marks stays linearithmic
static inline void hft_nfc_sort(uint32_t *cp, unsigned char *ccc, size_t n, uint32_t *tmp) {
    if (n <= 32) {
        for (size_t i = 1; i < n; i++) {
            uint32_t c = cp[i];
            unsigned char k = ccc[i];
            size_t j = i;
            while (j > 0 && ccc[j - 1] > k) {
                cp[j] = cp[j - 1];
                ccc[j] = ccc[j - 1];
                j--;
            }
            cp[j] = c;
            ccc[j] = k;
        }
        return;
    }
    // counting sort by class is stable and linear: 256 buckets
    size_t count[257];
    memset(count, 0, sizeof(count));
    for (size_t i = 0; i < n; i++) count[ccc[i] + 1]++;
    for (int k = 1; k <= 256; k++) count[k] += count[k - 1];
    for (size_t i = 0; i < n; i++) tmp[count[ccc[i]]++] = cp[i];
    memcpy(cp, tmp, n * sizeof(uint32_t));
    for (size_t i = 0; i < n; i++) ccc[i] = (unsigned char)hft_nfc_ccc(cp[i]);
}

// NFC of s[0..n) into t->nfc_buf; returns 0, or -1 when out of memory
static inline int hft_nfc(HfTokenizer *t, const unsigned char *s, size_t n) {
    if (n > SIZE_MAX / 4 - 4 || hft_cp_reserve(t, 4 * n + 4) != 0) return -1;
    uint32_t *d = t->cp_buf;
    unsigned char *ccc = t->ccc_buf;
    size_t m = 0;
    for (size_t i = 0; i < n;) {  // decompose
        unsigned int cp;
        int valid;
        size_t len = bpe_utf8_decode(s, n, i, &cp, &valid);
        if (!valid) cp = HFT_RAW_BYTE + s[i];
        hft_nfc_decompose(cp, d, &m);
        i += len;
    }
    for (size_t i = 0; i < m; i++) ccc[i] = (unsigned char)hft_nfc_ccc(d[i]);
    for (size_t i = 0; i < m;) {  // canonical order: sort each run of non-starters
        if (ccc[i] == 0) { i++; continue; }
        size_t j = i;
        while (j < m && ccc[j] != 0) j++;
        hft_nfc_sort(d + i, ccc + i, j - i, t->cp_tmp);
        i = j;
    }
    // canonical composition (UAX #15): each character joins the last starter unless a
    // character in between blocks it (same or higher class, or a starter)
    size_t out = 0;
    if (m > 0) {
        size_t starter = 0;
        int last = ccc[0] != 0 ? 256 : 0;
        out = 1;
        for (size_t i = 1; i < m; i++) {
            unsigned int ch = d[i];
            int cls = ccc[i];
            unsigned int comp = ch < HFT_RAW_BYTE && d[starter] < HFT_RAW_BYTE ? hft_nfc_compose(d[starter], ch) : 0;
            if (comp != 0 && (last < cls || last == 0)) {
                d[starter] = comp;
            } else {
                if (cls == 0) starter = out;
                last = cls;
                d[out++] = ch;
            }
        }
    }
    if (hft_buf_reserve(&t->nfc_buf, 4 * out + 1) != 0) return -1;
    size_t k = 0;
    for (size_t i = 0; i < out; i++) {
        if (d[i] >= HFT_RAW_BYTE) t->nfc_buf.p[k++] = (unsigned char)(d[i] - HFT_RAW_BYTE);
        else k += hft_utf8_put(d[i], t->nfc_buf.p + k);
    }
    t->nfc_buf.n = k;
    return 0;
}

// ----------------------------------------------------------------------------
// pre-tokenizers: the end of the piece that starts at s[i] (i < n); the pieces tile the text

// the character at s[i] case-folded for the contractions of (?i:'s|'t|'re|'ve|'m|'ll|'d): an
// ASCII letter as lower case, U+017F (long s, which folds to s) as 's', anything else 0;
// *len receives its byte length
static inline int hft_fold_at(const unsigned char *s, size_t n, size_t i, size_t *len) {
    unsigned char c = s[i];
    *len = 1;
    if (c >= 'A' && c <= 'Z') return c - 'A' + 'a';
    if (c >= 'a' && c <= 'z') return c;
    if (c == 0xC5 && i + 1 < n && s[i + 1] == 0xBF) { *len = 2; return 's'; }
    return 0;
}

// end of the run of characters of class cls that starts at j
static inline size_t hft_run_end(const unsigned char *s, size_t n, size_t j, int cls) {
    size_t len;
    while (j < n && bpe_class_at(s, n, j, &len) == cls) j += len;
    return j;
}

// Llama 3's pattern (max_digits 3) and Qwen2's (max_digits 1), alternatives tried in order,
// the first that matches at i wins:
//   1. (?i:'s|'t|'re|'ve|'m|'ll|'d)
//   2. [^\r\n\p{L}\p{N}]?\p{L}+: a letter run, with one leading character that is not a
//      letter, number, CR or LF (a space, a tab, punctuation, ...)
//   3. \p{N}{1,max_digits}
//   4.  ?[^\s\p{L}\p{N}]+[\r\n]*: an "other" run, a space before it, CR/LF after it
//   5. \s*[\r\n]+: a whitespace run holding a CR or LF, up to and including the last one
//      (the greedy \s* backs off to the last place where [\r\n]+ can follow)
//   6. \s+(?!\S): a whitespace run at the end of the text, or all of a run but its last
//      character (that one then starts the next piece, e.g. " word")
//   7. \s+: a single whitespace character before a non-space
static inline size_t hft_piece_end_llama3(const unsigned char *s, size_t n, size_t i, int max_digits) {
    if (s[i] == '\'' && i + 1 < n) {
        size_t l1, l2;
        int c1 = hft_fold_at(s, n, i + 1, &l1);
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return i + 1 + l1;
        if ((c1 == 'r' || c1 == 'v' || c1 == 'l') && i + 1 + l1 < n) {
            int c2 = hft_fold_at(s, n, i + 1 + l1, &l2);
            if (c2 == (c1 == 'l' ? 'l' : 'e')) return i + 1 + l1 + l2;
        }
    }
    size_t len0, len;
    int cls0 = bpe_class_at(s, n, i, &len0);
    if (cls0 == BPE_LETTER) return hft_run_end(s, n, i + len0, BPE_LETTER);
    if (cls0 != BPE_NUMBER && s[i] != '\r' && s[i] != '\n' && i + len0 < n &&
        bpe_class_at(s, n, i + len0, &len) == BPE_LETTER)
        return hft_run_end(s, n, i + len0 + len, BPE_LETTER);
    if (cls0 == BPE_NUMBER) {
        size_t j = i + len0;
        for (int k = 1; k < max_digits && j < n && bpe_class_at(s, n, j, &len) == BPE_NUMBER; k++) j += len;
        return j;
    }
    size_t k = i;
    if (s[i] == ' ' && i + 1 < n && bpe_class_at(s, n, i + 1, &len) == BPE_OTHER) k = i + 1;
    if (bpe_class_at(s, n, k, &len) == BPE_OTHER) {
        size_t j = hft_run_end(s, n, k + len, BPE_OTHER);
        while (j < n && (s[j] == '\r' || s[j] == '\n')) j++;
        return j;
    }
    // whitespace at i
    size_t j = i, last = i, nl_end = 0;
    while (j < n && bpe_class_at(s, n, j, &len) == BPE_SPACE) {
        last = j;
        if (s[j] == '\r' || s[j] == '\n') nl_end = j + 1;
        j += len;
    }
    if (nl_end > 0) return nl_end;  // 5
    if (j == n) return n;           // 6, the run reaches the end
    if (last > i) return last;      // 6, backed off one character
    return j;                       // 7
}

static inline size_t hft_piece_end(int pre, const unsigned char *s, size_t n, size_t i) {
    switch (pre) {
    case HFT_PRE_GPT2: return bpe_piece_end(s, n, i);
    case HFT_PRE_LLAMA3: return hft_piece_end_llama3(s, n, i, 3);
    case HFT_PRE_QWEN2: return hft_piece_end_llama3(s, n, i, 1);
    default: return n;
    }
}

// ----------------------------------------------------------------------------
// vocabulary and merge tables

static inline uint64_t hft_hash_bytes(const unsigned char *p, size_t n) {
    uint64_t h = 1469598103934665603ULL;  // FNV-1a
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h ^ (h >> 29);
}

// model id of the byte-level token with exactly these bytes, or -1
static inline int hft_vocab_lookup(const HfTokenizer *t, const unsigned char *p, size_t n) {
    size_t i = (size_t)hft_hash_bytes(p, n) & t->vocab_mask;
    for (;;) {
        int32_t id = t->vocab_table[i];
        if (id < 0) return -1;
        uint32_t off = t->tok_off[id], len = t->tok_off[id + 1] - off;
        if (len == n && memcmp(t->tok_bytes + off, p, n) == 0) return id;
        i = (i + 1) & t->vocab_mask;
    }
}

static inline size_t hft_merge_slot(uint64_t key, size_t mask) {
    return (size_t)((key * 0x9E3779B97F4A7C15ULL) >> 20) & mask;
}

// the merge of the pair (a, b): 1 with its rank and result, or 0
static inline int hft_merge_lookup(const HfTokenizer *t, uint32_t a, uint32_t b, uint32_t *rank,
                                   uint32_t *new_id) {
    uint64_t key = (uint64_t)a << 32 | b;
    size_t i = hft_merge_slot(key, t->merge_mask);
    for (;;) {
        uint64_t k = t->merge_key[i];
        if (k == key) {
            *rank = t->merge_rank[i];
            *new_id = t->merge_new[i];
            return 1;
        }
        if (k == UINT64_MAX) return 0;
        i = (i + 1) & t->merge_mask;
    }
}

// ----------------------------------------------------------------------------
// BPE of one piece

static inline void hft_work_free(HftWork *w) {
    free(w->id);
    free(w->next);
    free(w->prev);
    free(w->alive);
    free(w->heap);
    memset(w, 0, sizeof(*w));
}

static inline int hft_work_reserve(HftWork *w, size_t n) {
    if (n <= w->cap) return 0;
    if ((uint64_t)n >> BPE_POS_BITS || n > SIZE_MAX / (3 * sizeof(HftMerge))) return -1;
    size_t cap = w->cap ? w->cap : 64;
    while (cap < n) cap *= 2;
    hft_work_free(w);
    w->id = (uint32_t *)malloc(cap * sizeof(uint32_t));
    w->next = (size_t *)malloc(cap * sizeof(size_t));
    w->prev = (size_t *)malloc(cap * sizeof(size_t));
    w->alive = (unsigned char *)malloc(cap);
    w->heap = (HftMerge *)malloc(3 * cap * sizeof(HftMerge));
    if (w->id == NULL || w->next == NULL || w->prev == NULL || w->alive == NULL || w->heap == NULL) {
        hft_work_free(w);
        return -1;
    }
    w->cap = cap;
    return 0;
}

static inline void hft_heap_push(HftMerge *h, size_t *n, uint32_t rank, size_t pos, uint32_t new_id) {
    HftMerge x;
    x.key = (uint64_t)rank << BPE_POS_BITS | (uint64_t)pos;
    x.new_id = new_id;
    size_t k = (*n)++;
    while (k > 0 && h[(k - 1) / 2].key > x.key) {
        h[k] = h[(k - 1) / 2];
        k = (k - 1) / 2;
    }
    h[k] = x;
}

static inline HftMerge hft_heap_pop(HftMerge *h, size_t *n) {
    HftMerge top = h[0], x = h[--(*n)];
    size_t k = 0;
    for (;;) {
        size_t c = 2 * k + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1].key < h[c].key) c++;
        if (h[c].key >= x.key) break;
        h[k] = h[c];
        k = c;
    }
    if (*n > 0) h[k] = x;
    return top;
}

// The ids of piece p[0..n), n >= 1, appended to out. tokenizers' BPE (Word::merge_all): the
// parts start as the byte tokens; the candidate with the lowest (rank, position) is taken;
// it is applied when the pair now at that position still merges into the entry's result
// (else it is stale and dropped); a merge pushes the new pairs with the parts on both sides.
static inline int hft_bpe(HfTokenizer *t, const unsigned char *p, size_t n, BpeIds *out) {
    if (t->ignore_merges) {
        int whole = hft_vocab_lookup(t, p, n);
        if (whole >= 0) return bpe_ids_push(out, (uint32_t)whole);
    }
    if (n == 1) return bpe_ids_push(out, (uint32_t)t->byte_id[p[0]]);
    HftWork *w = &t->work;
    if (hft_work_reserve(w, n) != 0) return -1;
    size_t nheap = 0;
    for (size_t i = 0; i < n; i++) {
        w->id[i] = (uint32_t)t->byte_id[p[i]];
        w->next[i] = i + 1;
        w->prev[i] = i > 0 ? i - 1 : SIZE_MAX;
        w->alive[i] = 1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        uint32_t rank, new_id;
        if (hft_merge_lookup(t, w->id[i], w->id[i + 1], &rank, &new_id))
            hft_heap_push(w->heap, &nheap, rank, i, new_id);
    }
    const uint64_t pos_mask = ((uint64_t)1 << BPE_POS_BITS) - 1;
    while (nheap > 0) {
        HftMerge top = hft_heap_pop(w->heap, &nheap);
        size_t i = (size_t)(top.key & pos_mask);
        if (!w->alive[i] || w->next[i] >= n) continue;
        size_t j = w->next[i];
        uint32_t rank, new_id;
        if (!hft_merge_lookup(t, w->id[i], w->id[j], &rank, &new_id) || new_id != top.new_id) continue;
        w->id[i] = new_id;
        w->next[i] = w->next[j];
        w->alive[j] = 0;
        if (w->next[j] < n) w->prev[w->next[j]] = i;
        if (w->prev[i] != SIZE_MAX) {
            size_t h = w->prev[i];
            if (hft_merge_lookup(t, w->id[h], w->id[i], &rank, &new_id))
                hft_heap_push(w->heap, &nheap, rank, h, new_id);
        }
        if (w->next[i] < n) {
            if (hft_merge_lookup(t, w->id[i], w->id[w->next[i]], &rank, &new_id))
                hft_heap_push(w->heap, &nheap, rank, i, new_id);
        }
    }
    for (size_t i = 0; i < n; i = w->next[i])
        if (bpe_ids_push(out, w->id[i]) != 0) return -1;
    return 0;
}

// ----------------------------------------------------------------------------
// the piece cache

static inline void hft_cache_free(HftCache *c) {
    free(c->hash);
    free(c->key_off);
    free(c->ids_off);
    free(c->key_len);
    free(c->n_ids);
    free(c->keys);
    free(c->ids);
    memset(c, 0, sizeof(*c));
}

// arena sizes: every cached entry fits (half the slots, 64 bytes and at most 64 ids each)
#define HFT_CACHE_KEYS_BYTES ((size_t)HFT_CACHE_SLOTS / 2 * HFT_CACHE_MAX_PIECE)

static inline int hft_cache_init(HftCache *c) {
    if (c->hash != NULL) return 0;
    c->hash = (uint64_t *)calloc(HFT_CACHE_SLOTS, sizeof(uint64_t));
    c->key_off = (uint32_t *)malloc(HFT_CACHE_SLOTS * sizeof(uint32_t));
    c->ids_off = (uint32_t *)malloc(HFT_CACHE_SLOTS * sizeof(uint32_t));
    c->key_len = (unsigned char *)malloc(HFT_CACHE_SLOTS);
    c->n_ids = (unsigned char *)malloc(HFT_CACHE_SLOTS);
    c->keys = (unsigned char *)malloc(HFT_CACHE_KEYS_BYTES);
    c->ids = (uint32_t *)malloc(HFT_CACHE_KEYS_BYTES * sizeof(uint32_t));
    if (c->hash == NULL || c->key_off == NULL || c->ids_off == NULL || c->key_len == NULL ||
        c->n_ids == NULL || c->keys == NULL || c->ids == NULL) {
        hft_cache_free(c);
        return -1;
    }
    return 0;
}

// ids of piece p[0..n) (n <= HFT_CACHE_MAX_PIECE) through the cache, appended to out
static inline int hft_bpe_cached(HfTokenizer *t, const unsigned char *p, size_t n, BpeIds *out) {
    HftCache *c = &t->cache;
    if (c->hash == NULL && hft_cache_init(c) != 0) return hft_bpe(t, p, n, out);
    uint64_t h = hft_hash_bytes(p, n);
    if (h == 0) h = 1;
    size_t mask = HFT_CACHE_SLOTS - 1, i = (size_t)(h ^ (h >> 32)) & mask;
    for (;;) {
        if (c->hash[i] == 0) break;
        if (c->hash[i] == h && c->key_len[i] == n && memcmp(c->keys + c->key_off[i], p, n) == 0) {
            const uint32_t *ids = c->ids + c->ids_off[i];
            for (size_t k = 0; k < c->n_ids[i]; k++)
                if (bpe_ids_push(out, ids[k]) != 0) return -1;
            return 0;
        }
        i = (i + 1) & mask;
    }
    size_t first = out->n;
    if (hft_bpe(t, p, n, out) != 0) return -1;
    size_t nids = out->n - first;  // <= n <= 64
    if (c->n_used >= HFT_CACHE_SLOTS / 2) {  // full: start over
        memset(c->hash, 0, HFT_CACHE_SLOTS * sizeof(uint64_t));
        c->n_used = c->keys_n = c->ids_n = 0;
        i = (size_t)(h ^ (h >> 32)) & mask;
    }
    c->hash[i] = h;
    c->key_off[i] = (uint32_t)c->keys_n;
    c->key_len[i] = (unsigned char)n;
    memcpy(c->keys + c->keys_n, p, n);
    c->keys_n += n;
    c->ids_off[i] = (uint32_t)c->ids_n;
    c->n_ids[i] = (unsigned char)nids;
    memcpy(c->ids + c->ids_n, out->ids + first, nids * sizeof(uint32_t));
    c->ids_n += nids;
    c->n_used++;
    return 0;
}

// ----------------------------------------------------------------------------
// added tokens

static inline void hft_trie_free(HftTrie *tr) {
    free(tr->child);
    free(tr->sibling);
    free(tr->byte);
    free(tr->added);
    memset(tr, 0, sizeof(*tr));
    for (int b = 0; b < 256; b++) tr->root[b] = -1;
}

static inline int hft_trie_node(HftTrie *tr, unsigned char byte) {
    if (tr->n == tr->cap) {
        int cap = tr->cap ? 2 * tr->cap : 64;
        int32_t *c = (int32_t *)realloc(tr->child, (size_t)cap * sizeof(int32_t));
        if (c != NULL) tr->child = c;
        int32_t *s = (int32_t *)realloc(tr->sibling, (size_t)cap * sizeof(int32_t));
        if (s != NULL) tr->sibling = s;
        unsigned char *b = (unsigned char *)realloc(tr->byte, (size_t)cap);
        if (b != NULL) tr->byte = b;
        int32_t *a = (int32_t *)realloc(tr->added, (size_t)cap * sizeof(int32_t));
        if (a != NULL) tr->added = a;
        if (c == NULL || s == NULL || b == NULL || a == NULL) return -1;
        tr->cap = cap;
    }
    int k = tr->n++;
    tr->child[k] = tr->sibling[k] = tr->added[k] = -1;
    tr->byte[k] = byte;
    return k;
}

// adds pattern p[0..n) (n >= 1) of added token index a; a pattern already present keeps
// its first token (patterns are unique contents, so that only happens for two normalized
// tokens whose NFC forms agree)
static inline int hft_trie_add(HftTrie *tr, const unsigned char *p, size_t n, int a) {
    int node = tr->root[p[0]];
    if (node < 0) {
        if ((node = hft_trie_node(tr, p[0])) < 0) return -1;
        tr->root[p[0]] = node;
    }
    for (size_t i = 1; i < n; i++) {
        int c = tr->child[node];
        while (c >= 0 && tr->byte[c] != p[i]) c = tr->sibling[c];
        if (c < 0) {
            if ((c = hft_trie_node(tr, p[i])) < 0) return -1;
            tr->sibling[c] = tr->child[node];
            tr->child[node] = c;
        }
        node = c;
    }
    if (tr->added[node] < 0) tr->added[node] = a;
    return 0;
}

// the longest pattern that starts at s[i]: its token index (and *len), or -1
static inline int hft_trie_match(const HftTrie *tr, const unsigned char *s, size_t n, size_t i, size_t *len) {
    int node = tr->root[s[i]], best = -1;
    size_t k = i + 1;
    while (node >= 0) {
        if (tr->added[node] >= 0) {
            best = tr->added[node];
            *len = k - i;
        }
        if (k >= n) break;
        int c = tr->child[node];
        while (c >= 0 && tr->byte[c] != s[k]) c = tr->sibling[c];
        node = c;
        k++;
    }
    return best;
}

// start of the White_Space run that ends at `end`, not before `from` (from <= end)
static inline size_t hft_space_run_start(const unsigned char *s, size_t from, size_t end) {
    size_t start = from;
    for (size_t i = from; i < end;) {
        unsigned int cp;
        int valid;
        size_t len = bpe_utf8_decode(s, end, i, &cp, &valid);
        i += len;
        if (!valid || !bpe_is_space(cp)) start = i;
    }
    return start;
}

// end of the White_Space run that starts at s[i]
static inline size_t hft_space_run_end(const unsigned char *s, size_t n, size_t i) {
    while (i < n) {
        unsigned int cp;
        int valid;
        size_t len = bpe_utf8_decode(s, n, i, &cp, &valid);
        if (!valid || !bpe_is_space(cp)) break;
        i += len;
    }
    return i;
}

// Splits s[0..n) by the added tokens of trie as tokenizers' AddedVocabulary::find_matches:
// leftmost-longest matches, the search going on after each match; a special token when
// allow_special is 0 is passed over (its text stays in the surrounding split); lstrip moves
// a match's start back over the White_Space before it (not into the previous split), rstrip
// its end over the White_Space after it. The splits cover s (an empty s gives none).
static inline int hft_find_matches(const HfTokenizer *t, const HftTrie *trie, const unsigned char *s, size_t n,
                                   int allow_special, HftSplits *out) {
    out->n = 0;
    if (n == 0) return 0;
    size_t start_offset = 0, pos = 0;
    if (trie->n > 0) {
        while (pos < n) {
            size_t i = pos, mlen = 0;
            int a = -1;
            for (; i < n; i++) {
                if (trie->root[s[i]] < 0) continue;
                if ((a = hft_trie_match(trie, s, n, i, &mlen)) >= 0) break;
            }
            if (a < 0) break;
            size_t start = i, stop = i + mlen;
            pos = stop;
            const HftAdded *tok = &t->added[a];
            if (tok->special && !allow_special) continue;
            if (tok->lstrip) start = start_offset > start ? start_offset : hft_space_run_start(s, start_offset, start);
            if (tok->rstrip) stop = hft_space_run_end(s, n, stop);
            if (start_offset < start && hft_splits_push(out, start_offset, start, -1) != 0) return -1;
            if (hft_splits_push(out, start, stop, a) != 0) return -1;
            start_offset = stop;
        }
    }
    if (start_offset != n && hft_splits_push(out, start_offset, n, -1) != 0) return -1;
    return 0;
}

// ----------------------------------------------------------------------------
// encoding

// pre-tokenizes and encodes one segment of normalized text that holds no added token
static inline int hft_encode_segment(HfTokenizer *t, const unsigned char *s, size_t n, BpeIds *out) {
    if (n == 0) return 0;
    if (t->add_prefix_space && s[0] != ' ') {
        if (n == SIZE_MAX || hft_buf_reserve(&t->seg_buf, n + 1) != 0) return -1;
        t->seg_buf.p[0] = ' ';
        memcpy(t->seg_buf.p + 1, s, n);
        s = t->seg_buf.p;
        n++;
    }
    for (size_t i = 0; i < n;) {
        size_t j = hft_piece_end(t->pre, s, n, i);
        int rc = j - i <= HFT_CACHE_MAX_PIECE ? hft_bpe_cached(t, s + i, j - i, out) : hft_bpe(t, s + i, j - i, out);
        if (rc != 0) return -1;
        i = j;
    }
    return 0;
}

// Encodes text[0..n) as tokenizers' encode(text, add_special_tokens=False) and appends the
// ids to out (allow_special: see the top of the file). Returns 0, or -1 when out of memory.
static inline int hft_encode(HfTokenizer *t, const unsigned char *text, size_t n, int allow_special, BpeIds *out) {
    if (hft_find_matches(t, &t->trie_raw, text, n, allow_special, &t->split1) != 0) return -1;
    for (size_t k = 0; k < t->split1.n; k++) {
        HftSplit sp = t->split1.v[k];
        if (sp.added >= 0) {
            if (bpe_ids_push(out, (uint32_t)t->added[sp.added].id) != 0) return -1;
            continue;
        }
        const unsigned char *s = text + sp.start;
        size_t len = sp.stop - sp.start;
        if (t->nfc && hft_nfc_needed(s, len)) {
            if (hft_nfc(t, s, len) != 0) return -1;
            s = t->nfc_buf.p;
            len = t->nfc_buf.n;
        }
        if (hft_find_matches(t, &t->trie_norm, s, len, allow_special, &t->split2) != 0) return -1;
        for (size_t q = 0; q < t->split2.n; q++) {
            HftSplit sq = t->split2.v[q];
            int rc = sq.added >= 0 ? bpe_ids_push(out, (uint32_t)t->added[sq.added].id)
                                   : hft_encode_segment(t, s + sq.start, sq.stop - sq.start, out);
            if (rc != 0) return -1;
        }
    }
    return 0;
}

// ----------------------------------------------------------------------------
// decoding

// The bytes of token id (not NUL-terminated), or NULL (len 0) for an id outside the vocabulary.
static inline const unsigned char *hft_token_bytes(const HfTokenizer *t, uint32_t id, size_t *len) {
    if (id >= (uint32_t)t->vocab_size) {
        *len = 0;
        return NULL;
    }
    *len = t->tok_off[id + 1] - t->tok_off[id];
    return t->tok_bytes + t->tok_off[id];
}

// Concatenates the bytes of ids[0..n) into out (capacity cap); returns the byte count, or
// (size_t)-1 for an id outside the vocabulary or when out is too small.
static inline size_t hft_decode(const HfTokenizer *t, const uint32_t *ids, size_t n, unsigned char *out, size_t cap) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const unsigned char *p = hft_token_bytes(t, ids[i], &len);
        if (p == NULL || len > cap - k) return (size_t)-1;
        memcpy(out + k, p, len);
        k += len;
    }
    return k;
}

// Writes token id as llm.c's safe_printf (and llmc/tokenizer.h) does: a single-byte token that
// is neither printable ASCII nor whitespace is skipped; returns the bytes written.
static inline size_t hft_print_token(FILE *stream, const HfTokenizer *t, uint32_t id) {
    size_t len;
    const unsigned char *p = hft_token_bytes(t, id, &len);
    if (p == NULL) return 0;
    if (len == 1 && !((p[0] >= 0x20 && p[0] <= 0x7E) || (p[0] >= '\t' && p[0] <= '\r'))) return 0;
    return fwrite(p, 1, len, stream);
}

// the token llm.c-style data puts before every document: BOS if the tokenizer has one, else
// EOS; -1 when it has neither
static inline int hft_document_separator(const HfTokenizer *t) {
    return t->bos_id >= 0 ? t->bos_id : t->eos_id;
}

static inline const char *hft_pre_name(int pre) {
    switch (pre) {
    case HFT_PRE_GPT2: return "gpt2";
    case HFT_PRE_LLAMA3: return "llama3";
    case HFT_PRE_QWEN2: return "qwen2";
    default: return "none";
    }
}

// ----------------------------------------------------------------------------
// loading

static inline void hft_free(HfTokenizer *t) {
    free(t->tok_off);
    free(t->tok_bytes);
    free(t->tok_kind);
    free(t->vocab_table);
    free(t->merge_key);
    free(t->merge_rank);
    free(t->merge_new);
    for (int i = 0; i < t->n_added; i++) {
        if (t->added[i].pattern != t->added[i].content) free(t->added[i].pattern);
        free(t->added[i].content);
    }
    free(t->added);
    hft_trie_free(&t->trie_raw);
    hft_trie_free(&t->trie_norm);
    hft_cache_free(&t->cache);
    hft_work_free(&t->work);
    free(t->split1.v);
    free(t->split2.v);
    free(t->nfc_buf.p);
    free(t->seg_buf.p);
    free(t->cp_buf);
    free(t->cp_tmp);
    free(t->ccc_buf);
    memset(t, 0, sizeof(*t));
    t->bos_id = t->eos_id = -1;
    for (int b = 0; b < 256; b++) t->trie_raw.root[b] = t->trie_norm.root[b] = -1;
}

// load-time map from the JSON strings (model.vocab keys) to ids
typedef struct {
    const char **key;
    size_t *len;
    int32_t *val;
    int32_t *slot;  // entry index or -1
    size_t mask, n;
} HftKeyMap;

static inline void hft_keymap_free(HftKeyMap *m) {
    free(m->key);
    free(m->len);
    free(m->val);
    free(m->slot);
    memset(m, 0, sizeof(*m));
}

static inline int hft_keymap_init(HftKeyMap *m, size_t count) {
    memset(m, 0, sizeof(*m));
    size_t size = 1;
    while (size < 2 * count + 2) size <<= 1;
    m->key = (const char **)malloc((count + 1) * sizeof(char *));
    m->len = (size_t *)malloc((count + 1) * sizeof(size_t));
    m->val = (int32_t *)malloc((count + 1) * sizeof(int32_t));
    m->slot = (int32_t *)malloc(size * sizeof(int32_t));
    if (m->key == NULL || m->len == NULL || m->val == NULL || m->slot == NULL) {
        hft_keymap_free(m);
        return -1;
    }
    for (size_t i = 0; i < size; i++) m->slot[i] = -1;
    m->mask = size - 1;
    return 0;
}

// value of key k[0..n), or -1
static inline int hft_keymap_get(const HftKeyMap *m, const char *k, size_t n) {
    size_t i = (size_t)hft_hash_bytes((const unsigned char *)k, n) & m->mask;
    for (;;) {
        int32_t e = m->slot[i];
        if (e < 0) return -1;
        if (m->len[e] == n && memcmp(m->key[e], k, n) == 0) return m->val[e];
        i = (i + 1) & m->mask;
    }
}

// inserts key -> val (capacity was given to init); returns -1 when the key is present
static inline int hft_keymap_put(HftKeyMap *m, const char *k, size_t n, int32_t val) {
    size_t i = (size_t)hft_hash_bytes((const unsigned char *)k, n) & m->mask;
    for (;;) {
        int32_t e = m->slot[i];
        if (e < 0) break;
        if (m->len[e] == n && memcmp(m->key[e], k, n) == 0) return -1;
        i = (i + 1) & m->mask;
    }
    m->key[m->n] = k;
    m->len[m->n] = n;
    m->val[m->n] = val;
    m->slot[i] = (int32_t)m->n++;
    return 0;
}

// The ByteLevel decoder on one token string s[0..n): the bytes of its characters when every
// one is in the byte alphabet (returns 1), else s itself (returns 0). out has room for n.
static inline int hft_bytelevel_decode(const unsigned char *s, size_t n, const int cp_to_byte[512],
                                       unsigned char *out, size_t *outlen) {
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        unsigned int cp;
        int valid;
        i += bpe_utf8_decode(s, n, i, &cp, &valid);
        if (!valid || cp >= 512 || cp_to_byte[cp] < 0) {
            memcpy(out, s, n);
            *outlen = n;
            return 0;
        }
        out[k++] = (unsigned char)cp_to_byte[cp];
    }
    *outlen = k;
    return 1;
}

static inline const cJSON *hft_get(const cJSON *o, const char *name) {
    return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, name) : NULL;
}

// the "type" string of a JSON object, or NULL
static inline const char *hft_type(const cJSON *o) {
    const cJSON *ty = hft_get(o, "type");
    return cJSON_IsString(ty) ? ty->valuestring : NULL;
}

// a non-negative integer that fits an int below limit: 0 with *v, or -1
static inline int hft_int(const cJSON *x, double limit, int *v) {
    if (!cJSON_IsNumber(x)) return -1;
    double d = x->valuedouble;
    if (!(d >= 0.0 && d < limit) || d != (double)(int64_t)d) return -1;
    *v = (int)d;
    return 0;
}

// a ByteLevel pre-tokenizer: use_regex (default true) and add_prefix_space (default false)
static inline int hft_parse_bytelevel(const cJSON *o, const char *where, const char *path, int *use_regex,
                                      int *add_prefix_space, char *err, size_t err_len) {
    const cJSON *ur = hft_get(o, "use_regex"), *aps = hft_get(o, "add_prefix_space");
    if ((ur != NULL && !cJSON_IsBool(ur)) || (aps != NULL && !cJSON_IsBool(aps))) {
        llmc_set_error(err, err_len, "tokenizer.json '%s': %s: use_regex and add_prefix_space must be "
                       "true or false", path, where);
        return -1;
    }
    *use_regex = ur == NULL || cJSON_IsTrue(ur);
    *add_prefix_space = aps != NULL && cJSON_IsTrue(aps);
    return 0;
}

// a Split pre-tokenizer with one of the three known patterns: HFT_PRE_*, or -1
static inline int hft_parse_split(const cJSON *o, const char *where, const char *path, char *err, size_t err_len) {
    const cJSON *pat = hft_get(o, "pattern"), *beh = hft_get(o, "behavior"), *inv = hft_get(o, "invert");
    const cJSON *re = hft_get(pat, "Regex");
    if (!cJSON_IsString(re)) {
        llmc_set_error(err, err_len, "tokenizer.json '%s': %s.pattern must be {\"Regex\": ...} (a %s pattern "
                       "is not supported)", path, where, hft_get(pat, "String") != NULL ? "String" : "missing");
        return -1;
    }
    int pre = strcmp(re->valuestring, HFT_PATTERN_GPT2) == 0     ? HFT_PRE_GPT2
              : strcmp(re->valuestring, HFT_PATTERN_LLAMA3) == 0 ? HFT_PRE_LLAMA3
              : strcmp(re->valuestring, HFT_PATTERN_QWEN2) == 0  ? HFT_PRE_QWEN2
                                                                 : -1;
    if (pre < 0) {
        llmc_set_error(err, err_len, "tokenizer.json '%s': %s.pattern.Regex %s is unknown: only GPT-2's, Llama "
                       "3's and Qwen2's patterns are implemented (compared exactly)", path, where,
                       hft_quote(re->valuestring));
        return -1;
    }
    if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated") != 0) {
        llmc_set_error(err, err_len, "tokenizer.json '%s': %s.behavior is %s: only \"Isolated\" is supported",
                       path, where, cJSON_IsString(beh) ? hft_quote(beh->valuestring) : "missing");
        return -1;
    }
    if (inv != NULL && !cJSON_IsFalse(inv)) {
        llmc_set_error(err, err_len, "tokenizer.json '%s': %s.invert must be false", path, where);
        return -1;
    }
    return pre;
}

// one normalizer that is not a Sequence: 0 none, 1 NFC, -1 refused
static inline int hft_parse_normalizer_one(const cJSON *nm, const char *where, int k, const char *path, char *err,
                                           size_t err_len) {
    if (nm == NULL || cJSON_IsNull(nm)) return 0;
    const char *ty = hft_type(nm);
    if (ty != NULL && strcmp(ty, "NFC") == 0) return 1;
    if (k >= 0)
        llmc_set_error(err, err_len, "tokenizer.json '%s': %s.normalizers[%d] type %s is not supported (only NFC)",
                       path, where, k, ty ? hft_quote(ty) : "missing");
    else
        llmc_set_error(err, err_len, "tokenizer.json '%s': %s type %s is not supported (only null, NFC, or a "
                       "Sequence of NFC)", path, where, ty ? hft_quote(ty) : "missing");
    return -1;
}

// the normalizer: null, NFC or a Sequence of NFCs; 0 none, 1 NFC, -1 refused
static inline int hft_parse_normalizer(const cJSON *nm, const char *where, const char *path, char *err,
                                       size_t err_len) {
    const char *ty = hft_type(nm);
    if (ty == NULL || strcmp(ty, "Sequence") != 0) return hft_parse_normalizer_one(nm, where, -1, path, err, err_len);
    const cJSON *list = hft_get(nm, "normalizers");
    if (!cJSON_IsArray(list)) {
        llmc_set_error(err, err_len, "tokenizer.json '%s': %s.normalizers must be an array", path, where);
        return -1;
    }
    int nfc = 0, k = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, list) {
        int r = hft_parse_normalizer_one(x, where, k++, path, err, err_len);
        if (r < 0) return -1;
        nfc |= r;
    }
    return nfc;
}

// bos from a TemplateProcessing: the id of the special token that starts the single template
static inline int hft_template_bos(const cJSON *pp, const HftKeyMap *added_map) {
    const char *ty = hft_type(pp);
    if (ty == NULL) return -1;
    if (strcmp(ty, "Sequence") == 0) {
        const cJSON *x;
        cJSON_ArrayForEach(x, hft_get(pp, "processors")) {
            int b = hft_template_bos(x, added_map);
            if (b >= 0) return b;
        }
        return -1;
    }
    if (strcmp(ty, "TemplateProcessing") != 0) return -1;
    const cJSON *single = hft_get(pp, "single");
    const cJSON *first = cJSON_IsArray(single) ? cJSON_GetArrayItem(single, 0) : NULL;
    const cJSON *name = hft_get(hft_get(first, "SpecialToken"), "id");
    if (!cJSON_IsString(name)) return -1;
    return hft_keymap_get(added_map, name->valuestring, strlen(name->valuestring));
}

// Loads tokenizer.json (see the top of the file for what is accepted). Returns 0, or -1
// with a message naming the file and the field in err.
static inline int hft_load_checked(HfTokenizer *t, const char *path, char *err, size_t err_len) {
    memset(t, 0, sizeof(*t));
    hft_free(t);
    int rc = -1;
    char *buf = NULL;
    cJSON *root = NULL;
    HftKeyMap vmap, amap;  // model.vocab keys -> id; added contents -> id
    memset(&vmap, 0, sizeof(vmap));
    memset(&amap, 0, sizeof(amap));
    int cp_to_byte[512], byte_rank[256];
    bpe_byte_alphabet(cp_to_byte, byte_rank);
    unsigned char *scratch = NULL;  // a decoded token or a merge's concatenation
    size_t scratch_cap = 0;
    const cJSON *model, *vocab, *merges, *added, *x;
    int nv, na, merges_form = 0;

    {  // read and parse
        FILE *fp = llmc_fopen_read_checked(path, "tokenizer.json", err, err_len);
        if (fp == NULL) return -1;
        int64_t size = 0;
        if (llmc_file_size(fp, &size) != 0 || size > HFT_MAX_FILE_BYTES) {
            llmc_set_error(err, err_len, "tokenizer.json '%s': %s", path,
                           size > HFT_MAX_FILE_BYTES ? "larger than 1 GiB" : "cannot determine the file size");
            fclose(fp);
            return -1;
        }
        buf = (char *)malloc((size_t)size + 1);
        if (buf == NULL || llmc_read_exact(fp, buf, (size_t)size) != 0) {
            llmc_set_error(err, err_len, "tokenizer.json '%s': %s", path, buf ? "read error" : "out of memory");
            fclose(fp);
            free(buf);
            return -1;
        }
        fclose(fp);
        buf[size] = 0;
        const char *end = NULL;
        root = cJSON_ParseWithLengthOpts(buf, (size_t)size, &end, 0);
        if (root == NULL) {
            size_t at = end != NULL && end >= buf && end <= buf + size ? (size_t)(end - buf) : 0, line = 1;
            for (size_t i = 0; i < at; i++) line += buf[i] == '\n';
            llmc_set_error(err, err_len, "tokenizer.json '%s': not valid JSON (line %zu, byte offset %zu of a "
                           "%lld-byte file)", path, line, at, (long long)size);
            goto done;
        }
        size_t at = (size_t)(end - buf);
        while (at < (size_t)size && (buf[at] == ' ' || buf[at] == '\t' || buf[at] == '\n' || buf[at] == '\r')) at++;
        if (at != (size_t)size) {
            llmc_set_error(err, err_len, "tokenizer.json '%s': not valid JSON: data after the top-level value (byte "
                           "offset %zu of a %lld-byte file)", path, at, (long long)size);
            goto done;
        }
        if (!cJSON_IsObject(root)) {
            llmc_set_error(err, err_len, "tokenizer.json '%s': the top level is not a JSON object", path);
            goto done;
        }
    }
    x = hft_get(root, "version");
    if (x != NULL && !(cJSON_IsString(x) && strcmp(x->valuestring, "1.0") == 0)) {
        llmc_set_error(err, err_len, "tokenizer.json '%s': version %s: only \"1.0\" is known", path,
                       cJSON_IsString(x) ? hft_quote(x->valuestring) : "(not a string)");
        goto done;
    }

    // ---- model
    model = hft_get(root, "model");
    if (!cJSON_IsObject(model)) {
        llmc_set_error(err, err_len, "tokenizer.json '%s': no \"model\" object", path);
        goto done;
    }
    if (hft_type(model) == NULL || strcmp(hft_type(model), "BPE") != 0) {
        llmc_set_error(err, err_len, "tokenizer.json '%s': model.type is %s: only byte-level \"BPE\" is supported",
                       path, hft_type(model) ? hft_quote(hft_type(model)) : "missing");
        goto done;
    }
    x = hft_get(model, "dropout");
    if (x != NULL && !cJSON_IsNull(x) && !(cJSON_IsNumber(x) && x->valuedouble == 0.0)) {
        llmc_set_error(err, err_len, "tokenizer.json '%s': model.dropout must be null or 0 (BPE dropout makes "
                       "encoding random)", path);
        goto done;
    }
    x = hft_get(model, "byte_fallback");
    if (x != NULL && !cJSON_IsFalse(x)) {
        llmc_set_error(err, err_len, "tokenizer.json '%s': model.byte_fallback must be false (a byte-fallback "
                       "BPE is not byte-level)", path);
        goto done;
    }
    {
        const char *fields[2] = {"continuing_subword_prefix", "end_of_word_suffix"};
        for (int k = 0; k < 2; k++) {
            x = hft_get(model, fields[k]);
            if (x != NULL && !cJSON_IsNull(x) && !(cJSON_IsString(x) && x->valuestring[0] == 0)) {
                llmc_set_error(err, err_len, "tokenizer.json '%s': model.%s must be null or \"\"", path, fields[k]);
                goto done;
            }
        }
    }
    x = hft_get(model, "ignore_merges");
    if (x != NULL && !cJSON_IsBool(x)) {
        llmc_set_error(err, err_len, "tokenizer.json '%s': model.ignore_merges must be true or false", path);
        goto done;
    }
    t->ignore_merges = cJSON_IsTrue(x);

    // ---- model.vocab: keys -> ids 0..n-1, each once
    vocab = hft_get(model, "vocab");
    if (!cJSON_IsObject(vocab)) {
        llmc_set_error(err, err_len, "tokenizer.json '%s': model.vocab must be an object", path);
        goto done;
    }
    nv = cJSON_GetArraySize(vocab);
    if (nv < 256 || nv >= HFT_MAX_VOCAB) {
        llmc_set_error(err, err_len, "tokenizer.json '%s': model.vocab has %d entries (a byte-level vocabulary has "
                       "256 to %d)", path, nv, HFT_MAX_VOCAB - 1);
        goto done;
    }
    if (hft_keymap_init(&vmap, (size_t)nv) != 0) goto oom;
    {
        const char **by_id = (const char **)calloc((size_t)nv, sizeof(char *));
        if (by_id == NULL) goto oom;
        size_t total = 0;
        cJSON_ArrayForEach(x, vocab) {
            int id;
            const char *key = x->string;
            size_t klen = key ? strlen(key) : 0;
            if (klen == 0) {
                llmc_set_error(err, err_len, "tokenizer.json '%s': model.vocab has an empty token", path);
                free(by_id);
                goto done;
            }
            if (hft_int(x, (double)nv, &id) != 0) {
                llmc_set_error(err, err_len, "tokenizer.json '%s': model.vocab[%s] is not an id in 0..%d (ids must "
                               "be 0..n-1 for the n entries)", path, hft_quote(key), nv - 1);
                free(by_id);
                goto done;
            }
            if (by_id[id] != NULL) {
                llmc_set_error(err, err_len, "tokenizer.json '%s': model.vocab: id %d is given to both %s and %s",
                               path, id, hft_quote(by_id[id]), hft_quote(key));
                free(by_id);
                goto done;
            }
            if (hft_keymap_put(&vmap, key, klen, id) != 0) {
                llmc_set_error(err, err_len, "tokenizer.json '%s': model.vocab has the key %s twice", path,
                               hft_quote(key));
                free(by_id);
                goto done;
            }
            by_id[id] = key;
            total += klen;
        }
        t->n_model = nv;
        t->vocab_size = nv;  // added tokens may extend it below
        if (total > UINT32_MAX / 2) {
            free(by_id);
            llmc_set_error(err, err_len, "tokenizer.json '%s': model.vocab's tokens are too long", path);
            goto done;
        }
        free(by_id);
    }
    for (int b = 0; b < 256; b++) {  // the byte tokens
        unsigned char u[4];
        int cp = -1;
        for (int c = 0; c < 512; c++)
            if (cp_to_byte[c] == b) cp = c;
        size_t ulen = hft_utf8_put((unsigned int)cp, u);
        int id = hft_keymap_get(&vmap, (const char *)u, ulen);
        if (id < 0) {
            llmc_set_error(err, err_len, "tokenizer.json '%s': model.vocab has no token for byte 0x%02X (\"%.*s\"): "
                           "not a byte-level BPE vocabulary", path, b, (int)ulen, (const char *)u);
            goto done;
        }
        t->byte_id[b] = id;
    }

    // ---- normalizer (needed for the added tokens' patterns)
    {
        int nfc = hft_parse_normalizer(hft_get(root, "normalizer"), "normalizer", path, err, err_len);
        if (nfc < 0) goto done;
        t->nfc = nfc;
    }

    // ---- added_tokens: ids as tokenizers assigns them
    added = hft_get(root, "added_tokens");
    if (added != NULL && !cJSON_IsNull(added) && !cJSON_IsArray(added)) {
        llmc_set_error(err, err_len, "tokenizer.json '%s': added_tokens must be an array", path);
        goto done;
    }
    na = cJSON_IsArray(added) ? cJSON_GetArraySize(added) : 0;
    if (na > HFT_MAX_VOCAB - nv) {
        llmc_set_error(err, err_len, "tokenizer.json '%s': too many added_tokens (%d)", path, na);
        goto done;
    }
    if (hft_keymap_init(&amap, (size_t)na) != 0) goto oom;
    t->added = (HftAdded *)calloc((size_t)na + 1, sizeof(HftAdded));
    if (t->added == NULL) goto oom;
    {
        int k = 0, next_id = nv;
        cJSON_ArrayForEach(x, added) {
            const cJSON *f_id = hft_get(x, "id"), *f_content = hft_get(x, "content");
            const char *flag_names[5] = {"single_word", "lstrip", "rstrip", "normalized", "special"};
            int flags[5], id;
            if (!cJSON_IsObject(x) || hft_int(f_id, (double)HFT_MAX_VOCAB, &id) != 0 || !cJSON_IsString(f_content)) {
                llmc_set_error(err, err_len, "tokenizer.json '%s': added_tokens[%d] needs an \"id\" (a non-negative "
                               "integer) and a \"content\" string", path, k);
                goto done;
            }
            for (int f = 0; f < 5; f++) {
                const cJSON *fl = hft_get(x, flag_names[f]);
                if (!cJSON_IsBool(fl)) {
                    llmc_set_error(err, err_len, "tokenizer.json '%s': added_tokens[%d].%s must be true or false "
                                   "(every flag is required, as tokenizers requires it)", path, k, flag_names[f]);
                    goto done;
                }
                flags[f] = cJSON_IsTrue(fl);
            }
            const char *content = f_content->valuestring;
            size_t clen = strlen(content);
            if (clen == 0) {
                llmc_set_error(err, err_len, "tokenizer.json '%s': added_tokens[%d].content is empty", path, k);
                goto done;
            }
            if (flags[0]) {
                llmc_set_error(err, err_len, "tokenizer.json '%s': added_tokens[%d] (%s): single_word true is not "
                               "supported", path, k, hft_quote(content));
                goto done;
            }
            if (hft_keymap_get(&amap, content, clen) >= 0) {
                llmc_set_error(err, err_len, "tokenizer.json '%s': added_tokens[%d]: the content %s appears twice",
                               path, k, hft_quote(content));
                goto done;
            }
            int in_vocab = hft_keymap_get(&vmap, content, clen);
            int want = in_vocab >= 0 ? in_vocab : next_id;
            if (id != want) {
                llmc_set_error(err, err_len, "tokenizer.json '%s': added_tokens[%d] (%s) has id %d, but tokenizers "
                               "gives it id %d (%s)", path, k, hft_quote(content), id, want,
                               in_vocab >= 0 ? "its id in model.vocab"
                                             : "added tokens not in model.vocab take the ids after it, in order");
                goto done;
            }
            if (in_vocab < 0) next_id++;
            hft_keymap_put(&amap, content, clen, id);
            HftAdded *a = &t->added[k];
            a->id = id;
            a->content = (unsigned char *)malloc(clen + 1);
            if (a->content == NULL) goto oom;
            memcpy(a->content, content, clen + 1);
            a->len = clen;
            a->pattern = a->content;
            a->plen = clen;
            if (flags[3] && t->nfc && hft_nfc_needed(a->content, clen)) {  // matched (and decoded) as its NFC
                if (hft_nfc(t, a->content, clen) != 0) goto oom;
                a->pattern = (unsigned char *)malloc(t->nfc_buf.n + 1);
                if (a->pattern == NULL) {
                    a->pattern = a->content;
                    goto oom;
                }
                memcpy(a->pattern, t->nfc_buf.p, t->nfc_buf.n);
                a->pattern[t->nfc_buf.n] = 0;
                a->plen = t->nfc_buf.n;
            }
            a->lstrip = (unsigned char)flags[1];
            a->rstrip = (unsigned char)flags[2];
            a->normalized = (unsigned char)flags[3];
            a->special = (unsigned char)flags[4];
            t->n_added = ++k;
        }
        t->vocab_size = next_id;
    }

    // ---- the decoded bytes of every id
    {
        size_t total = 0;
        cJSON_ArrayForEach(x, vocab) total += strlen(x->string);
        for (int k = 0; k < t->n_added; k++) total += t->added[k].plen;
        t->tok_off = (uint32_t *)malloc(((size_t)t->vocab_size + 1) * sizeof(uint32_t));
        t->tok_bytes = (unsigned char *)malloc(total + 1);
        t->tok_kind = (unsigned char *)calloc((size_t)t->vocab_size, 1);
        const char **str = (const char **)calloc((size_t)t->vocab_size, sizeof(char *));
        if (t->tok_off == NULL || t->tok_bytes == NULL || t->tok_kind == NULL || str == NULL) {
            free(str);
            goto oom;
        }
        cJSON_ArrayForEach(x, vocab) str[(int)x->valuedouble] = x->string;
        for (int k = 0; k < t->n_added; k++) {
            str[t->added[k].id] = (const char *)t->added[k].pattern;
            t->tok_kind[t->added[k].id] |= HFT_KIND_ADDED | (t->added[k].special ? HFT_KIND_SPECIAL : 0);
        }
        size_t pos = 0;
        for (int id = 0; id < t->vocab_size; id++) {
            size_t n = strlen(str[id]), len;
            t->tok_off[id] = (uint32_t)pos;
            if (!hft_bytelevel_decode((const unsigned char *)str[id], n, cp_to_byte, t->tok_bytes + pos, &len) &&
                id < nv)
                t->tok_kind[id] |= HFT_KIND_MODEL_RAW;
            pos += len;
        }
        t->tok_off[t->vocab_size] = (uint32_t)pos;
        free(str);
        // byte string -> id over the model entries in the byte alphabet (a bijection of their
        // keys, so no two have the same bytes); added-only ids are not BPE tokens
        size_t size = 1;
        while (size < 2 * (size_t)nv + 2) size <<= 1;
        t->vocab_table = (int32_t *)malloc(size * sizeof(int32_t));
        if (t->vocab_table == NULL) goto oom;
        for (size_t i = 0; i < size; i++) t->vocab_table[i] = -1;
        t->vocab_mask = size - 1;
        for (int id = 0; id < nv; id++) {
            if (t->tok_kind[id] & HFT_KIND_MODEL_RAW) continue;
            const unsigned char *p = t->tok_bytes + t->tok_off[id];
            size_t n = t->tok_off[id + 1] - t->tok_off[id];
            size_t i = (size_t)hft_hash_bytes(p, n) & t->vocab_mask;
            while (t->vocab_table[i] >= 0) i = (i + 1) & t->vocab_mask;
            t->vocab_table[i] = id;
        }
    }

    // ---- model.merges: (a, b) -> (rank, id of a + b)
    merges = hft_get(model, "merges");
    if (!cJSON_IsArray(merges)) {
        llmc_set_error(err, err_len, "tokenizer.json '%s': model.merges must be an array", path);
        goto done;
    }
    {
        int nm = cJSON_GetArraySize(merges);
        if (nm >= HFT_MAX_VOCAB) {
            llmc_set_error(err, err_len, "tokenizer.json '%s': model.merges has %d entries (at most %d)", path, nm,
                           HFT_MAX_VOCAB - 1);
            goto done;
        }
        size_t size = 1;
        while (size < 2 * (size_t)nm + 2) size <<= 1;
        t->merge_key = (uint64_t *)malloc(size * sizeof(uint64_t));
        t->merge_rank = (uint32_t *)malloc(size * sizeof(uint32_t));
        t->merge_new = (uint32_t *)malloc(size * sizeof(uint32_t));
        if (t->merge_key == NULL || t->merge_rank == NULL || t->merge_new == NULL) goto oom;
        for (size_t i = 0; i < size; i++) t->merge_key[i] = UINT64_MAX;
        t->merge_mask = size - 1;
        int k = 0, rank = 0;
        cJSON_ArrayForEach(x, merges) {
            const char *a, *b;
            size_t alen, blen;
            if (cJSON_IsString(x)) {
                if (merges_form == 2) goto mixed;
                merges_form = 1;
                const char *s = x->valuestring;
                if (strncmp(s, "#version", 8) == 0) { k++; continue; }  // a header line, not a merge
                const char *sp = strchr(s, ' ');
                if (sp == NULL || strchr(sp + 1, ' ') != NULL) {
                    llmc_set_error(err, err_len, "tokenizer.json '%s': model.merges[%d] %s is not two tokens "
                                   "separated by one space", path, k, hft_quote(s));
                    goto done;
                }
                a = s;
                alen = (size_t)(sp - s);
                b = sp + 1;
                blen = strlen(b);
            } else if (cJSON_IsArray(x) && cJSON_GetArraySize(x) == 2 && cJSON_IsString(cJSON_GetArrayItem(x, 0)) &&
                       cJSON_IsString(cJSON_GetArrayItem(x, 1))) {
                if (merges_form == 1) goto mixed;
                merges_form = 2;
                a = cJSON_GetArrayItem(x, 0)->valuestring;
                b = cJSON_GetArrayItem(x, 1)->valuestring;
                alen = strlen(a);
                blen = strlen(b);
            } else {
                llmc_set_error(err, err_len, "tokenizer.json '%s': model.merges[%d] is neither an \"a b\" string nor "
                               "a pair [a, b] of strings", path, k);
                goto done;
            }
            if (alen + blen + 1 > scratch_cap) {
                size_t cap = 2 * (alen + blen + 1);
                unsigned char *p = (unsigned char *)realloc(scratch, cap);
                if (p == NULL) goto oom;
                scratch = p;
                scratch_cap = cap;
            }
            memcpy(scratch, a, alen);
            memcpy(scratch + alen, b, blen);
            scratch[alen + blen] = 0;
            int ida = hft_keymap_get(&vmap, a, alen), idb = hft_keymap_get(&vmap, b, blen);
            int idab = hft_keymap_get(&vmap, (const char *)scratch, alen + blen);
            if (ida < 0 || idb < 0 || idab < 0) {
                char sa[64], sb[64];
                snprintf(sa, sizeof(sa), "%.*s", (int)(alen < 40 ? alen : 40), a);
                snprintf(sb, sizeof(sb), "%.*s", (int)(blen < 40 ? blen : 40), b);
                llmc_set_error(err, err_len, "tokenizer.json '%s': model.merges[%d] (%s %s): %s is not in "
                               "model.vocab", path, k, hft_quote(sa), hft_quote(sb),
                               ida < 0 ? hft_quote(sa) : idb < 0 ? hft_quote(sb) : hft_quote((const char *)scratch));
                goto done;
            }
            uint64_t key = (uint64_t)ida << 32 | (uint32_t)idb;
            size_t i = hft_merge_slot(key, t->merge_mask);
            while (t->merge_key[i] != UINT64_MAX && t->merge_key[i] != key) i = (i + 1) & t->merge_mask;
            if (t->merge_key[i] == UINT64_MAX) t->n_merges++;
            t->merge_key[i] = key;  // a repeated pair: the later rank wins, as in the library
            t->merge_rank[i] = (uint32_t)rank;
            t->merge_new[i] = (uint32_t)idab;
            rank++;
            k++;
        }
    }

    // ---- normalizer, pre_tokenizer, decoder, post_processor
    {
        const cJSON *pt = hft_get(root, "pre_tokenizer");
        const char *ty = hft_type(pt);
        int use_regex = 0, aps = 0;
        if (ty != NULL && strcmp(ty, "ByteLevel") == 0) {
            if (hft_parse_bytelevel(pt, "pre_tokenizer", path, &use_regex, &aps, err, err_len) != 0) goto done;
            t->pre = use_regex ? HFT_PRE_GPT2 : HFT_PRE_NONE;
            t->add_prefix_space = aps;
        } else if (ty != NULL && strcmp(ty, "Sequence") == 0) {
            const cJSON *list = hft_get(pt, "pretokenizers");
            int n = cJSON_IsArray(list) ? cJSON_GetArraySize(list) : 0;
            const cJSON *p0 = n >= 1 ? cJSON_GetArrayItem(list, 0) : NULL, *p1 = n == 2 ? cJSON_GetArrayItem(list, 1) : NULL;
            const char *t0 = hft_type(p0), *t1 = hft_type(p1);
            if (n == 1 && t0 != NULL && strcmp(t0, "ByteLevel") == 0) {
                if (hft_parse_bytelevel(p0, "pre_tokenizer.pretokenizers[0]", path, &use_regex, &aps, err, err_len) != 0)
                    goto done;
                t->pre = use_regex ? HFT_PRE_GPT2 : HFT_PRE_NONE;
                t->add_prefix_space = aps;
            } else if (n == 2 && t0 != NULL && strcmp(t0, "Split") == 0 && t1 != NULL && strcmp(t1, "ByteLevel") == 0) {
                int pre = hft_parse_split(p0, "pre_tokenizer.pretokenizers[0]", path, err, err_len);
                if (pre < 0) goto done;
                if (hft_parse_bytelevel(p1, "pre_tokenizer.pretokenizers[1]", path, &use_regex, &aps, err, err_len) != 0)
                    goto done;
                if (use_regex || aps) {
                    llmc_set_error(err, err_len, "tokenizer.json '%s': pre_tokenizer.pretokenizers[1]: a ByteLevel "
                                   "after a Split must have use_regex false and add_prefix_space false", path);
                    goto done;
                }
                t->pre = pre;
            } else {
                llmc_set_error(err, err_len, "tokenizer.json '%s': pre_tokenizer is a Sequence of %d other than "
                               "[ByteLevel] or [Split, ByteLevel]: not supported", path, n);
                goto done;
            }
        } else {
            llmc_set_error(err, err_len, "tokenizer.json '%s': pre_tokenizer is %s: a byte-level BPE needs a "
                           "ByteLevel pre-tokenizer (alone, or after a Split)", path,
                           ty ? hft_quote(ty) : pt == NULL || cJSON_IsNull(pt) ? "null" : "not an object with a type");
            goto done;
        }
    }
    {
        const cJSON *dec = hft_get(root, "decoder");
        const char *ty = hft_type(dec);
        if (ty != NULL && strcmp(ty, "Sequence") == 0) {
            const cJSON *list = hft_get(dec, "decoders");
            if (cJSON_IsArray(list) && cJSON_GetArraySize(list) == 1) {
                dec = cJSON_GetArrayItem(list, 0);
                ty = hft_type(dec);
            }
        }
        if (ty == NULL || strcmp(ty, "ByteLevel") != 0) {
            llmc_set_error(err, err_len, "tokenizer.json '%s': decoder is %s: a byte-level BPE needs the ByteLevel "
                           "decoder", path, ty                              ? hft_quote(ty)
                                            : dec == NULL                   ? "missing"
                                            : cJSON_IsNull(dec)             ? "null"
                                                                            : "not an object with a type");
            goto done;
        }
    }
    t->bos_id = hft_template_bos(hft_get(root, "post_processor"), &amap);
    t->eos_id = hft_keymap_get(&amap, "<|endoftext|>", 13);
    if (t->eos_id < 0) t->eos_id = hft_keymap_get(&amap, "<|end_of_text|>", 15);

    // ---- added-token tries: raw-text tokens; normalized tokens by their normalized content
    for (int k = 0; k < t->n_added; k++) {
        HftAdded *a = &t->added[k];
        if (a->plen > 0 && hft_trie_add(a->normalized ? &t->trie_norm : &t->trie_raw, a->pattern, a->plen, k) != 0)
            goto oom;
    }
    rc = 0;
    goto done;
mixed:
    llmc_set_error(err, err_len, "tokenizer.json '%s': model.merges mixes \"a b\" strings and [a, b] pairs", path);
    goto done;
oom:
    llmc_set_error(err, err_len, "tokenizer.json '%s': out of memory", path);
done:
    free(scratch);
    hft_keymap_free(&vmap);
    hft_keymap_free(&amap);
    cJSON_Delete(root);
    free(buf);
    if (rc != 0) hft_free(t);
    return rc;
}

// Printing variant for command-line tools: "error: ..." on stderr, returns -1.
static inline int hft_load(HfTokenizer *t, const char *path) {
    char err[1024];
    if (hft_load_checked(t, path, err, sizeof(err)) != 0) {
        fprintf(stderr, "error: %s\n", err);
        return -1;
    }
    return 0;
}

#endif // HF_TOKENIZER_H
