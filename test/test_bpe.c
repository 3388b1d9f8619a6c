/*
test_bpe.c - CPU test of the C GPT-2 encoder (data/bpe.h) and of the llm.c file readers
(llmc/shard.h, llmc/tokenizer.h).

  1. encodes every string of the tiktoken token fixture (written by
     scripts/check_tokens_tiktoken.py) and compares the ids exactly;
  2. loads the decode tokenizer data/gpt2_tokenizer.bin, checks it holds the encoder's bytes
     for every id, and that decode(encode(s)) == s for the fixture strings (all of them:
     byte-level BPE round-trips any UTF-8);
  3. checks that the heap-driven BPE merges exactly as the plain quadratic loop kept below
     (ref_encode_piece): the fixture strings, windows of Tiny Shakespeare and random strings
     (bytes, small alphabets full of ties, UTF-8), each both pre-tokenized and as one piece,
     and 16 KB pieces; then that a 1 MB piece of letters (ids stored from the quadratic loop)
     encodes within a time bound that the quadratic loop misses by far;
  4. if the committed shards are present: reads them, checks their sizes/ids and that
     decoding train+val without the <|endoftext|> tokens gives back the text exactly;
  5. checks that bad files are rejected with an error: shards (bad magic/version,
     truncated header or body, trailing bytes, bad count, missing), tokenizer files
     (bad magic/version, truncated header or tokens, zero-length token, trailing bytes,
     missing) and encoder inputs (missing, truncated encoder.json, merges out of order).
     The expected error messages appear on stderr.

Build and run from the repository root:
    gcc -O2 -Wall -Wextra -Werror -o build/test_bpe test/test_bpe.c -lm
    build/test_bpe [token_fixture.bin]      (default test/fixtures/tokens_tiktoken.bin)

Token fixture format (little endian): int32 header[256] = {20261201, 1, ncases, 0...};
per case: uint32 nbytes, the UTF-8 bytes, uint32 ntok, ntok x uint32 ids.
*/
#define _POSIX_C_SOURCE 200809L  // mkdtemp, rmdir, clock_gettime under -std=c99 / -std=c11
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../data/bpe.h"
#include "../llmc/shard.h"
#include "../llmc/tokenizer.h"
#include "test_util.h"

// llmc/tokenizer.h reports errors into a buffer; print them as the test expects on stderr
static int read_tokenizer(const char *path, Tokenizer *t) {
    char err[512];
    if (tokenizer_init_checked(t, path, err, sizeof(err)) != 0) {
        fprintf(stderr, "error: %s\n", err);
        return -1;
    }
    return 0;
}

#define ENCODER_JSON "data/gpt2/encoder.json"
#define VOCAB_BPE "data/gpt2/vocab.bpe"
#define TOKENIZER_BIN "data/gpt2_tokenizer.bin"
#define TEXT_FILE "data/tinyshakespeare.txt"
#define VAL_BIN "data/tiny_shakespeare_val.bin"
#define TRAIN_BIN "data/tiny_shakespeare_train.bin"
#define TOKEN_FIXTURE "test/fixtures/tokens_tiktoken.bin"
#define TOKEN_FIXTURE_MAGIC 20261201

typedef struct {
    size_t nbytes, ntok;
    unsigned char *bytes;
    uint32_t *ids;
} TokCase;

static void free_cases(TokCase *c, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(c[i].bytes);
        free(c[i].ids);
    }
    free(c);
}

// Loads the tiktoken token fixture; returns the case count or -1 (message on stderr).
static long load_token_fixture(const char *path, TokCase **out) {
    unsigned char *buf;
    size_t len;
    *out = NULL;
    if (bpe_read_file(path, "token fixture", &buf, &len) != 0) return -1;
    if (len < 1024 || llmc_get_u32(buf) != TOKEN_FIXTURE_MAGIC || llmc_get_u32(buf + 4) != 1) {
        fprintf(stderr, "error: token fixture '%s': bad header\n", path);
        free(buf);
        return -1;
    }
    size_t ncases = llmc_get_u32(buf + 8), pos = 1024;
    TokCase *c = (TokCase *)calloc(ncases ? ncases : 1, sizeof(TokCase));
    if (c == NULL) { free(buf); return -1; }
    for (size_t i = 0; i < ncases; i++) {
        if (len - pos < 4) goto bad;
        c[i].nbytes = llmc_get_u32(buf + pos);
        pos += 4;
        if (len - pos < c[i].nbytes + 4) goto bad;
        c[i].bytes = (unsigned char *)malloc(c[i].nbytes + 1);
        memcpy(c[i].bytes, buf + pos, c[i].nbytes);
        c[i].bytes[c[i].nbytes] = 0;
        pos += c[i].nbytes;
        c[i].ntok = llmc_get_u32(buf + pos);
        pos += 4;
        if ((len - pos) / 4 < c[i].ntok) goto bad;
        c[i].ids = (uint32_t *)malloc((c[i].ntok ? c[i].ntok : 1) * sizeof(uint32_t));
        for (size_t k = 0; k < c[i].ntok; k++) c[i].ids[k] = llmc_get_u32(buf + pos + 4 * k);
        pos += 4 * c[i].ntok;
    }
    if (pos != len) goto bad;
    free(buf);
    *out = c;
    return (long)ncases;
bad:
    fprintf(stderr, "error: token fixture '%s': truncated or malformed\n", path);
    free_cases(c, ncases);
    free(buf);
    return -1;
}

// printable preview of a test string for messages
static const char *preview(const unsigned char *s, size_t n) {
    static char buf[64];
    size_t k = 0;
    for (size_t i = 0; i < n && k + 5 < sizeof(buf); i++) {
        unsigned char c = s[i];
        if (c == '\n') { buf[k++] = '\\'; buf[k++] = 'n'; }
        else if (c < 0x20 || c == 0x7F) buf[k++] = '?';
        else buf[k++] = (char)c;
    }
    if (n > 0 && k + 5 >= sizeof(buf)) { buf[k++] = '.'; buf[k++] = '.'; buf[k++] = '.'; }
    buf[k] = 0;
    return buf;
}

static int write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (f == NULL) return -1;
    size_t w = fwrite(p, 1, n, f);
    return (fclose(f) == 0 && w == n) ? 0 : -1;
}

static int file_exists(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f) fclose(f);
    return f != NULL;
}

// ---------------------------------------------------------------- merge order reference

// BPE of one piece as the encoder first did it: rescan every adjacent pair for each merge and
// join the lowest-id one, the leftmost on ties. Quadratic, but plainly GPT-2's rule, so
// bpe_encode_piece's heap must give exactly these ids.
static int ref_pair_rank(const BpeEncoder *e, const unsigned char *p, const size_t *bound,
                         size_t j) {
    int id = bpe_lookup(e, p + bound[j], bound[j + 2] - bound[j]);
    return id < 0 ? INT_MAX : id;
}

static int ref_encode_piece(const BpeEncoder *e, const unsigned char *p, size_t n, BpeIds *out) {
    int whole = bpe_lookup(e, p, n);
    if (whole >= 0) return bpe_ids_push(out, (uint32_t)whole);
    size_t *bound = (size_t *)malloc((n + 1) * sizeof(size_t)), parts = n;
    int *rank = (int *)malloc(n * sizeof(int)), rc = 0;
    if (bound == NULL || rank == NULL) rc = -1;
    for (size_t j = 0; rc == 0 && j <= n; j++) bound[j] = j;
    for (size_t j = 0; rc == 0 && j + 1 < parts; j++) rank[j] = ref_pair_rank(e, p, bound, j);
    while (rc == 0 && parts > 1) {
        size_t best = 0;
        int best_rank = INT_MAX;
        for (size_t j = 0; j + 1 < parts; j++)
            if (rank[j] < best_rank) { best_rank = rank[j]; best = j; }
        if (best_rank == INT_MAX) break;
        memmove(bound + best + 1, bound + best + 2, (parts - best - 1) * sizeof(size_t));
        if (best + 3 < parts)
            memmove(rank + best + 1, rank + best + 2, (parts - best - 3) * sizeof(int));
        parts--;
        if (best + 1 < parts) rank[best] = ref_pair_rank(e, p, bound, best);
        if (best > 0) rank[best - 1] = ref_pair_rank(e, p, bound, best - 1);
    }
    for (size_t j = 0; rc == 0 && j < parts; j++) {
        int id = bpe_lookup(e, p + bound[j], bound[j + 1] - bound[j]);
        if (id < 0 || bpe_ids_push(out, (uint32_t)id) != 0) rc = -1;
    }
    free(bound);
    free(rank);
    return rc;
}

// 1 when the encoder and the reference give the same ids for s[0..n), n >= 1: pre-tokenized
// as bpe_encode does, or (one_piece) the whole of s as a single piece, which puts spaces,
// punctuation and words side by side in one merge sequence
static int same_as_ref(const BpeEncoder *e, const unsigned char *s, size_t n, int one_piece) {
    BpeIds got = {NULL, 0, 0}, want = {NULL, 0, 0};
    int rc = 0;
    if (one_piece) {
        BpeWork w = {0, NULL, NULL, NULL, NULL};
        rc |= bpe_encode_piece(e, s, n, &w, &got);
        bpe_work_free(&w);
        rc |= ref_encode_piece(e, s, n, &want);
    } else {
        rc |= bpe_encode(e, s, n, &got);
        for (size_t i = 0; i < n && rc == 0;) {
            size_t j = bpe_piece_end(s, n, i);
            rc = ref_encode_piece(e, s + i, j - i, &want);
            i = j;
        }
    }
    int same = rc == 0 && got.n == want.n &&
               (got.n == 0 || memcmp(got.ids, want.ids, got.n * sizeof(uint32_t)) == 0);
    bpe_ids_free(&got);
    bpe_ids_free(&want);
    return same;
}

static uint64_t xorshift64(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

// n characters drawn from alpha (UTF-8 sequences separated by '|', or "" for any byte)
static size_t random_text(unsigned char *out, size_t n, const char *alpha, uint64_t *x) {
    const char *sym[64];
    size_t len[64], nsym = 0, k = 0;
    for (const char *a = alpha; *a != 0 && nsym < 64;) {
        const char *bar = strchr(a, '|');
        sym[nsym] = a;
        len[nsym++] = bar ? (size_t)(bar - a) : strlen(a);
        a = bar ? bar + 1 : a + strlen(a);
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t r = xorshift64(x);
        if (nsym == 0) { out[k++] = (unsigned char)r; continue; }
        size_t c = (size_t)(r % nsym);
        memcpy(out + k, sym[c], len[c]);
        k += len[c];
    }
    return k;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// The time bound of the 1 MB piece. The quadratic loop needs minutes for it, the heap a
// fraction of a second, so a slow CI machine stays far inside and a quadratic encoder far out;
// an alarm ends the run at the bound rather than waiting those minutes.
#define LONG_PIECE_BYTES (1 << 20)
#define LONG_PIECE_BOUND_S 5
static void long_piece_too_slow(int sig) {
    (void)sig;
    static const char msg[] = "FAIL   1 MB piece of letters not encoded within the time bound "
                              "(quadratic BPE?)\n";
    ssize_t w = write(STDOUT_FILENO, msg, sizeof(msg) - 1);
    (void)w;
    _exit(1);
}

// ids of the 1 MB piece as the quadratic loop gave them: count and a 64-bit FNV-1a-style hash
#define LONG_PIECE_NTOK 625542
#define LONG_PIECE_HASH 0x18844b641e325ca7ULL

static void test_merge_order(const BpeEncoder *e, const TokCase *cases, long ncases,
                             const Tokenizer *tok) {
    long nsame = 0;
    for (long c = 0; c < ncases; c++)
        nsame += cases[c].nbytes == 0 || (same_as_ref(e, cases[c].bytes, cases[c].nbytes, 0) &&
                                          same_as_ref(e, cases[c].bytes, cases[c].nbytes, 1));
    test_check(nsame == ncases, "heap BPE == quadratic BPE: %ld of %ld fixture strings, "
               "pre-tokenized and as one piece", nsame, ncases);

    uint64_t x = 20261201;
    unsigned char *text;
    size_t ntext;
    if (bpe_read_file(TEXT_FILE, "text", &text, &ntext) == 0) {
        int n = 200, same = 0;
        for (int k = 0; k < n; k++) {
            size_t len = 1 + (size_t)(xorshift64(&x) % 2048);
            if (len > ntext) len = ntext;
            size_t at = (size_t)(xorshift64(&x) % (ntext - len + 1));
            same += same_as_ref(e, text + at, len, 1);
        }
        test_check(same == n, "heap BPE == quadratic BPE: %d of %d windows of %s (up to 2 KB) "
                   "as one piece", same, n, TEXT_FILE);
        free(text);
    }

    // small alphabets make many equal-id pairs at once: the leftmost-first rule at work
    // ("ab" is one symbol, so "ababab..."; "a|b" draws a or b)
    static const char *alphabets[] = {
        "",  "a", "ab", "a|b", "ab |a| ", "a| |\n", "0|1|2|3|4|5|6|7|8|9", "e|t|a|o|n| |s|h|r|'|.",
        "l|o|L|O|!|?| |\t", "\xc3\xa9|e|\xcc\x81| ", "\xe6\x97\xa5|\xe6\x9c\xac| |a",
        "\xf0\x9f\x98\x80|\xf0\x9f\x91\x8d|\xe2\x80\x8d| ", "\xff|\xc3|a|\x80",
    };
    size_t nalpha = sizeof(alphabets) / sizeof(alphabets[0]);
    static unsigned char buf[4 * 16384];  // up to 4 bytes a character
    int nrand = 0, same = 0;
    for (size_t a = 0; a < nalpha; a++) {
        for (int k = 0; k < 200; k++) {
            size_t n = random_text(buf, 1 + (size_t)(xorshift64(&x) % 64), alphabets[a], &x);
            same += same_as_ref(e, buf, n, 0) + same_as_ref(e, buf, n, 1);
            nrand += 2;
        }
    }
    test_check(same == nrand, "heap BPE == quadratic BPE: %d of %d random strings over %zu "
               "alphabets (bytes, ties, UTF-8), pre-tokenized and as one piece", same, nrand,
               nalpha);
    static const char *long_alphabets[] = {
        "", "a", "a|b", "e|t|a|o|i|n|s|h|r|d|l|u|c|m|w|f|g|y|p|b", "0|1|2|3|4|5|6|7|8|9",
        "\xe6\x97\xa5|\xe6\x9c\xac|\xe8\xaa\x9e",
    };
    int nlong = (int)(sizeof(long_alphabets) / sizeof(long_alphabets[0]));
    same = 0;
    for (int a = 0; a < nlong; a++) {
        size_t n = random_text(buf, 16384 / (a == nlong - 1 ? 3 : 1), long_alphabets[a], &x);
        same += same_as_ref(e, buf, n, 1);
    }
    test_check(same == nlong, "heap BPE == quadratic BPE: %d of %d 16 KB pieces (any byte, one "
               "letter, two, letters, digits, CJK)", same, nlong);

    // 1 MB of letters: one piece, far too long for the quadratic loop within the bound
    unsigned char *big = (unsigned char *)malloc(LONG_PIECE_BYTES);
    x = 88172645463325252ULL;
    for (size_t i = 0; i < LONG_PIECE_BYTES; i++) big[i] = (unsigned char)('a' + xorshift64(&x) % 26);
    test_check(bpe_piece_end(big, LONG_PIECE_BYTES, 0) == LONG_PIECE_BYTES,
               "1 MB of letters is a single piece");
    BpeIds ids = {NULL, 0, 0};
    fflush(stdout);
    signal(SIGALRM, long_piece_too_slow);
    alarm(LONG_PIECE_BOUND_S);
    double t = now_s();
    int rc = bpe_encode(e, big, LONG_PIECE_BYTES, &ids);
    t = now_s() - t;
    alarm(0);
    signal(SIGALRM, SIG_DFL);
    test_check(rc == 0 && t < LONG_PIECE_BOUND_S, "1 MB piece of letters encodes in %.2f s "
               "(bound %d s)", t, LONG_PIECE_BOUND_S);
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < ids.n; i++) {
        h ^= ids.ids[i];
        h *= 1099511628211ULL;
    }
    test_check(ids.n == LONG_PIECE_NTOK && h == LONG_PIECE_HASH,
               "1 MB piece gives the quadratic loop's ids (%zu tokens, hash %016llx)", ids.n,
               (unsigned long long)h);
    if (tok != NULL) {
        unsigned char *out = (unsigned char *)malloc(LONG_PIECE_BYTES + 1);
        size_t m = tokenizer_decode_ids(tok, ids.ids, ids.n, out, LONG_PIECE_BYTES + 1);
        test_check(m == LONG_PIECE_BYTES && memcmp(out, big, m) == 0,
                   "1 MB piece: decode(encode(s)) == s");
        free(out);
    }
    bpe_ids_free(&ids);
    free(big);
}

int main(int argc, char **argv) {
    const char *fixture_path = argc > 1 ? argv[1] : TOKEN_FIXTURE;
    // test_util.h helpers this test does not need
    (void)rel_l2_f64; (void)rel_l2_f32; (void)f32_to_bf16_bits; (void)bf16_bits_to_f32;
    (void)fill_uniform;

    // ---------------------------------------------------------------- encoder
    BpeEncoder enc;
    int loaded = bpe_load(&enc, ENCODER_JSON, VOCAB_BPE) == 0;
    if (!test_check(loaded, "load %s + %s", ENCODER_JSON, VOCAB_BPE)) return test_summary();
    test_check(enc.vocab_size == 50257 && enc.n_merges == 50000 && enc.eot == 50256,
               "vocab 50257 / merges 50000 / eot 50256 (got %d / %d / %d)", enc.vocab_size,
               enc.n_merges, enc.eot);

    // pre-tokenizer spot checks (piece boundaries)
    {
        const char *s = "Hello world's  end\n\n";
        const char *want[] = {"Hello", " world", "'s", " ", " end", "\n\n"};
        size_t n = strlen(s), i = 0, k = 0;
        int ok = 1;
        while (i < n) {
            size_t j = bpe_piece_end((const unsigned char *)s, n, i);
            if (k >= 6 || strlen(want[k]) != j - i || memcmp(want[k], s + i, j - i) != 0) ok = 0;
            k++;
            i = j;
        }
        test_check(ok && k == 6, "pre-tokenizer pieces of \"Hello world's  end\\n\\n\"");
        test_check(bpe_char_class(0xE9) == BPE_LETTER && bpe_char_class(0x65E5) == BPE_LETTER &&
                       bpe_char_class(0x0663) == BPE_NUMBER && bpe_char_class(0x216B) == BPE_NUMBER &&
                       bpe_char_class(0x0301) == BPE_OTHER && bpe_char_class(0x1F600) == BPE_OTHER &&
                       bpe_char_class(0x3000) == BPE_SPACE && bpe_char_class(0x1C) == BPE_OTHER &&
                       bpe_char_class(0x10FFFF) == BPE_OTHER,
                   "character classes (Unicode %s table, %d ranges)", BPE_UNICODE_VERSION,
                   BPE_UC_NRANGES);
    }

    // ---------------------------------------------------------------- tiktoken fixture
    TokCase *cases = NULL;
    long ncases = load_token_fixture(fixture_path, &cases);
    test_check(ncases > 0, "load token fixture %s (%ld strings)", fixture_path, ncases);
    Tokenizer tok;
    int tok_ok = read_tokenizer(TOKENIZER_BIN, &tok) == 0;
    test_check(tok_ok && tok.version == 2 && tok.vocab_size == 50257 && tok.eot_token == 50256,
               "load %s (version 2, vocab 50257, eot 50256)", TOKENIZER_BIN);
    if (tok_ok) {
        int same = tok.vocab_size == (uint32_t)enc.vocab_size;
        for (uint32_t id = 0; same && id < tok.vocab_size; id++) {
            size_t n;
            const unsigned char *p = bpe_token_bytes(&enc, (int)id, &n);
            same = n == tok.offsets[id + 1] - tok.offsets[id] && memcmp(p, tok.bytes + tok.offsets[id], n) == 0;
        }
        test_check(same, "%s holds the encoder's bytes for every id", TOKENIZER_BIN);
    }
    {
        long n_match = 0, n_rt = 0;
        for (long c = 0; c < ncases; c++) {
            BpeIds ids = {NULL, 0, 0};
            bpe_encode(&enc, cases[c].bytes, cases[c].nbytes, &ids);
            size_t first = 0;
            while (first < ids.n && first < cases[c].ntok && ids.ids[first] == cases[c].ids[first])
                first++;
            int match = ids.n == cases[c].ntok && first == ids.n;
            n_match += match;
            if (!match || ncases <= 64)
                test_check(match, "tiktoken ids for \"%s\" (%zu tokens)%s",
                           preview(cases[c].bytes, cases[c].nbytes), cases[c].ntok,
                           match ? "" : " MISMATCH");
            if (!match) {
                printf("      first difference at token %zu: C %d, tiktoken %d (C %zu tokens)\n",
                       first, first < ids.n ? (int)ids.ids[first] : -1,
                       first < cases[c].ntok ? (int)cases[c].ids[first] : -1, ids.n);
            }
            if (tok_ok) {
                size_t cap = cases[c].nbytes + 1;
                unsigned char *out = (unsigned char *)malloc(cap);
                size_t m = tokenizer_decode_ids(&tok, ids.ids, ids.n, out, cap);
                int rt = m == cases[c].nbytes && memcmp(out, cases[c].bytes, m) == 0;
                n_rt += rt;
                if (!rt)
                    test_check(0, "round trip decode(encode(\"%s\"))",
                               preview(cases[c].bytes, cases[c].nbytes));
                free(out);
            }
            bpe_ids_free(&ids);
        }
        if (ncases > 64)
            test_check(n_match == ncases, "tiktoken ids: %ld of %ld strings match", n_match, ncases);
        test_check(tok_ok && n_rt == ncases, "decode(encode(s)) == s: %ld of %ld strings", n_rt,
                   ncases);
        // invalid UTF-8 is encoded byte by byte and still round-trips
        const unsigned char junk[] = {'a', 0xFF, 0xC3, ' ', 0xE6, 0x97, 'b', 0xED, 0xA0, 0x80, 0xF4, 0x90, 0x80, 0x80, '\n'};
        BpeIds ids = {NULL, 0, 0};
        bpe_encode(&enc, junk, sizeof(junk), &ids);
        unsigned char out[64];
        size_t m = tok_ok ? tokenizer_decode_ids(&tok, ids.ids, ids.n, out, sizeof(out)) : 0;
        test_check(tok_ok && m == sizeof(junk) && memcmp(out, junk, m) == 0,
                   "invalid UTF-8 bytes encode and round-trip (%zu tokens)", ids.n);
        bpe_ids_free(&ids);
    }
    test_merge_order(&enc, cases, ncases > 0 ? ncases : 0, tok_ok ? &tok : NULL);
    free_cases(cases, ncases > 0 ? (size_t)ncases : 0);

    // ---------------------------------------------------------------- committed shards
    if (file_exists(VAL_BIN) && file_exists(TRAIN_BIN) && tok_ok) {
        uint16_t *val = NULL, *train = NULL;
        size_t nval = 0, ntrain = 0;
        int ok = shard_read(VAL_BIN, &val, &nval) == 0 && shard_read(TRAIN_BIN, &train, &ntrain) == 0;
        test_check(ok && nval == 32768 && ntrain > 0, "read %s (%zu tokens) and %s (%zu tokens)",
                   VAL_BIN, nval, TRAIN_BIN, ntrain);
        unsigned char *text;
        size_t ntext;
        if (ok && bpe_read_file(TEXT_FILE, "text", &text, &ntext) == 0) {
            // decode val then train, skipping EOT, and compare with the text
            size_t pos = 0, neot = 0;
            int same = val[0] == 50256, inrange = 1;
            for (size_t s = 0; s < 2 && same; s++) {
                const uint16_t *t = s == 0 ? val : train;
                size_t n = s == 0 ? nval : ntrain;
                for (size_t i = 0; i < n && same; i++) {
                    if (t[i] >= tok.vocab_size) { inrange = same = 0; break; }
                    if (t[i] == tok.eot_token) { neot++; continue; }
                    size_t len = tok.offsets[t[i] + 1] - tok.offsets[t[i]];
                    if (pos + len > ntext || memcmp(text + pos, tok.bytes + tok.offsets[t[i]], len) != 0)
                        same = 0;
                    pos += len;
                }
            }
            test_check(inrange && same && pos == ntext,
                       "shards decode (without %zu EOTs) to %s exactly (%zu of %zu bytes)", neot,
                       TEXT_FILE, pos, ntext);
            // and re-encoding the text gives the same tokens
            BpeIds ids = {NULL, 0, 0};
            size_t start = 0;
            for (;;) {
                size_t end = start;
                while (end + 1 < ntext && !(text[end] == '\n' && text[end + 1] == '\n')) end++;
                int last = !(end + 1 < ntext);
                if (last) end = ntext;
                bpe_ids_push(&ids, (uint32_t)enc.eot);
                bpe_encode(&enc, text + start, end - start + (last ? 0 : 2), &ids);
                if (last) break;
                start = end + 2;
            }
            int eq = ids.n == nval + ntrain;
            for (size_t i = 0; eq && i < ids.n; i++)
                eq = ids.ids[i] == (i < nval ? val[i] : train[i - nval]);
            test_check(eq, "re-encoding %s reproduces the shards (%zu tokens)", TEXT_FILE, ids.n);
            bpe_ids_free(&ids);
            free(text);
        }
        free(val);
        free(train);
    } else {
        printf("  (skipping shard checks: %s / %s not found)\n", VAL_BIN, TRAIN_BIN);
    }

    // ---------------------------------------------------------------- bad files
    char dir[] = "/tmp/test_bpe_XXXXXX";
    if (mkdtemp(dir) == NULL) {
        test_check(0, "create a temporary directory");
        return test_summary();
    }
    char p_shard[128], p_tok[128], p_json[128], p_bpe[128], p_missing[128];
    snprintf(p_shard, sizeof(p_shard), "%s/shard.bin", dir);
    snprintf(p_tok, sizeof(p_tok), "%s/tok.bin", dir);
    snprintf(p_json, sizeof(p_json), "%s/encoder.json", dir);
    snprintf(p_bpe, sizeof(p_bpe), "%s/vocab.bpe", dir);
    snprintf(p_missing, sizeof(p_missing), "%s/no_such_file.bin", dir);
    printf("  (the error messages below are expected)\n");
    fflush(stdout);
    {
        // a good shard round-trips
        uint32_t ids[5] = {50256, 1, 2, 65535, 40};
        uint16_t *got = NULL;
        size_t n = 0;
        int ok = shard_write(p_shard, ids, 5) == 0 && shard_read(p_shard, &got, &n) == 0 && n == 5;
        for (size_t i = 0; ok && i < 5; i++) ok = got[i] == ids[i];
        free(got);
        test_check(ok, "shard write + read round trip");
        uint32_t big = 70000;
        test_check(shard_write(p_shard, &big, 1) != 0, "shard writer rejects id 70000");
        char nodir[160];
        snprintf(nodir, sizeof(nodir), "%s/no/such/dir/x.bin", dir);
        test_check(shard_write(nodir, ids, 5) != 0, "shard writer reports an unwritable path");

        unsigned char f[1024 + 10];
        memset(f, 0, sizeof(f));
        llmc_put_u32(f, SHARD_MAGIC);
        llmc_put_u32(f + 4, SHARD_VERSION);
        llmc_put_u32(f + 8, 5);
        struct { const char *what; size_t len; int word, value; } bad[] = {
            {"bad magic", sizeof(f), 0, 20240521},
            {"bad version", sizeof(f), 1, 2},
            {"negative count", sizeof(f), 2, -5},
            {"zero count", 1024, 2, 0},
            {"truncated header", 100, -1, 0},
            {"truncated tokens", sizeof(f) - 3, -1, 0},
            {"count larger than the file", sizeof(f), 2, 6},
            {"trailing bytes", sizeof(f), 2, 4},
        };
        for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
            unsigned char g[sizeof(f)];
            memcpy(g, f, sizeof(f));
            if (bad[k].word >= 0) llmc_put_u32(g + 4 * bad[k].word, (uint32_t)bad[k].value);
            write_bytes(p_shard, g, bad[k].len);
            uint16_t *t = NULL;
            size_t nt = 0;
            int rc = shard_read(p_shard, &t, &nt);
            test_check(rc != 0 && t == NULL, "shard reader rejects: %s", bad[k].what);
            free(t);
        }
        uint16_t *t = NULL;
        size_t nt;
        test_check(shard_read(p_missing, &t, &nt) != 0, "shard reader rejects: missing file");
    }
    if (tok_ok) {
        // a good tokenizer round-trips through the writer
        Tokenizer t2;
        int ok = tokenizer_write(p_tok, tok.vocab_size, tok.eot_token, tok.offsets, tok.bytes) == 0 &&
                 read_tokenizer(p_tok, &t2) == 0;
        ok = ok && t2.vocab_size == tok.vocab_size && t2.eot_token == tok.eot_token &&
             memcmp(t2.offsets, tok.offsets, (tok.vocab_size + 1) * sizeof(uint32_t)) == 0 &&
             memcmp(t2.bytes, tok.bytes, tok.offsets[tok.vocab_size]) == 0;
        if (ok) tokenizer_free(&t2);
        test_check(ok, "tokenizer write + read round trip");

        unsigned char *raw;
        size_t nraw;
        if (bpe_read_file(TOKENIZER_BIN, "tokenizer", &raw, &nraw) == 0) {
            struct { const char *what; size_t len; int word; uint32_t value; long byte_at; } bad[] = {
                {"bad magic", nraw, 0, 20240327, -1},
                {"version 3", nraw, 1, 3, -1},
                {"eot outside the vocabulary", nraw, 3, 50257, -1},
                {"vocab_size larger than the file", nraw, 2, 50258, -1},
                {"truncated header", 512, -1, 0, -1},
                {"truncated in the middle", nraw / 2, -1, 0, -1},
                {"last token cut short", nraw - 1, -1, 0, -1},
                {"zero-length token", nraw, -1, 0, 1024},
                {"trailing bytes", nraw + 1, -1, 0, -1},
            };
            unsigned char *g = (unsigned char *)malloc(nraw + 1);
            for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
                memcpy(g, raw, nraw);
                g[nraw] = 'x';
                if (bad[k].word >= 0) llmc_put_u32(g + 4 * bad[k].word, bad[k].value);
                if (bad[k].byte_at >= 0) g[bad[k].byte_at] = 0;
                write_bytes(p_tok, g, bad[k].len);
                Tokenizer t3;
                int rc = read_tokenizer(p_tok, &t3);
                test_check(rc != 0 && t3.offsets == NULL, "tokenizer reader rejects: %s", bad[k].what);
                if (rc == 0) tokenizer_free(&t3);
            }
            free(g);
            free(raw);
        }
        Tokenizer t4;
        test_check(read_tokenizer(p_missing, &t4) != 0, "tokenizer reader rejects: missing file");
    }
    {
        BpeEncoder e2;
        test_check(bpe_load(&e2, p_missing, VOCAB_BPE) != 0, "encoder rejects: missing encoder.json");
        test_check(bpe_load(&e2, ENCODER_JSON, p_missing) != 0, "encoder rejects: missing vocab.bpe");
        unsigned char *raw;
        size_t nraw;
        if (bpe_read_file(ENCODER_JSON, "encoder.json", &raw, &nraw) == 0) {
            write_bytes(p_json, raw, nraw / 2);
            test_check(bpe_load(&e2, p_json, VOCAB_BPE) != 0, "encoder rejects: truncated encoder.json");
            write_bytes(p_json, "{\"a\": 0, \"b\": 0}", 16);
            test_check(bpe_load(&e2, p_json, VOCAB_BPE) != 0, "encoder rejects: repeated id");
            free(raw);
        }
        if (bpe_read_file(VOCAB_BPE, "vocab.bpe", &raw, &nraw) == 0) {
            // swap the first two merge lines ("#version" line, then "Ġ t", "Ġ a")
            unsigned char *l1 = (unsigned char *)memchr(raw, '\n', nraw) + 1;
            unsigned char *l2 = (unsigned char *)memchr(l1, '\n', nraw - (size_t)(l1 - raw)) + 1;
            unsigned char *l3 = (unsigned char *)memchr(l2, '\n', nraw - (size_t)(l2 - raw)) + 1;
            unsigned char *g = (unsigned char *)malloc(nraw);
            size_t a = (size_t)(l2 - l1), b = (size_t)(l3 - l2), h = (size_t)(l1 - raw);
            memcpy(g, raw, h);
            memcpy(g + h, l2, b);
            memcpy(g + h + b, l1, a);
            memcpy(g + h + a + b, l3, nraw - (size_t)(l3 - raw));
            write_bytes(p_bpe, g, nraw);
            test_check(bpe_load(&e2, ENCODER_JSON, p_bpe) != 0, "encoder rejects: merges out of order");
            write_bytes(p_bpe, raw, nraw / 2);  // truncated: fewer merges than encoder.json
            test_check(bpe_load(&e2, ENCODER_JSON, p_bpe) != 0, "encoder rejects: truncated vocab.bpe");
            free(g);
            free(raw);
        }
    }
    remove(p_shard);
    remove(p_tok);
    remove(p_json);
    remove(p_bpe);
    rmdir(dir);
    fflush(stderr);

    if (tok_ok) tokenizer_free(&tok);
    bpe_free(&enc);
    return test_summary();
}
