/*
test_hf_tokenizer.c - CPU test of the C tokenizer.json encoder and decoder (data/hf_tokenizer.h),
of its llm.c Tokenizer adapter (llmc/tokenizer_json.h) and of data/bpe_encode.c's -t path,
against Hugging Face `tokenizers` through the committed fixtures that
scripts/make_test_tokenizers.py wrote (test/fixtures/hf_tokenizers/).

  1. each fixture tokenizer (GPT-2, Llama 3, Qwen2 and an options one; see the script) loads,
     with the vocabulary size, BOS and EOS tokenizers reports;
  2. every test text encodes to tokenizers' ids exactly, with special tokens matched
     (tokenizers' default) and as ordinary text (encode_special_tokens = True), and the ids
     decode to tokenizers' decode(ids, skip_special_tokens=False);
  3. all of Tiny Shakespeare encodes to tokenizers' ids (count and hash), as one text and with
     llm.c's document recipe, and the encode speed on it repeated 10 times (11 MB) is reported
     (and must be above a bound only a broken encoder misses);
  4. every code point, in probe strings, is pre-tokenized by the three patterns and
     NFC-normalized as tokenizers does (hashes per chunk of code points);
  5. the GPT-2 tokenizer.json built here from data/gpt2/encoder.json and vocab.bpe encodes Tiny
     Shakespeare exactly as data/bpe.h does and as the committed shards hold; build/bpe_encode
     -t with it rewrites those shards byte for byte, and with a tokenizer of more than 65,535
     tokens writes uint32 (version 7) shards;
  6. the llm.c Tokenizer read from a tokenizer.json holds the encoder's bytes for every id;
  7. invalid UTF-8 and random bytes encode and decode back (tokenizers without a normalizer);
  8. malformed or unsupported tokenizer.json files are refused with a message that names the
     field (the messages appear on stderr).

Build and run from the repository root (make test does):
    gcc -O2 -std=c11 -Wall -Wextra -Werror -o build/test_hf_tokenizer test/test_hf_tokenizer.c -lcjson -lm
    build/test_hf_tokenizer [fixture_dir]        (default test/fixtures/hf_tokenizers)
*/
#define _POSIX_C_SOURCE 200809L  // mkdtemp, clock_gettime under -std=c11
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../data/hf_tokenizer.h"
#include "../llmc/shard.h"
#include "../llmc/tokenizer_json.h"
#include "test_util.h"

#define FIXTURE_DIR "test/fixtures/hf_tokenizers"
#define TEXT_FILE "data/tinyshakespeare.txt"
#define ENCODER_JSON "data/gpt2/encoder.json"
#define VOCAB_BPE "data/gpt2/vocab.bpe"
#define VAL_BIN "data/tiny_shakespeare_val.bin"
#define TRAIN_BIN "data/tiny_shakespeare_train.bin"
#define BPE_ENCODE "build/bpe_encode"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t fnv_ids(const uint32_t *ids, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= ids[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static uint64_t fnv_str_hex(const char *s) { return strtoull(s, NULL, 16); }

// printable preview of a test string for messages
static const char *preview(const unsigned char *s, size_t n) {
    static char buf[72];
    size_t k = 0;
    for (size_t i = 0; i < n && k + 6 < sizeof(buf); i++) {
        unsigned char c = s[i];
        if (c == '\n') { buf[k++] = '\\'; buf[k++] = 'n'; }
        else if (c < 0x20 || c == 0x7F) buf[k++] = '?';
        else buf[k++] = (char)c;
    }
    if (k + 6 >= sizeof(buf)) { buf[k++] = '.'; buf[k++] = '.'; buf[k++] = '.'; }
    buf[k] = 0;
    return buf;
}

static int write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (f == NULL) return -1;
    size_t w = fwrite(p, 1, n, f);
    return (fclose(f) == 0 && w == n) ? 0 : -1;
}

static int read_file(const char *path, unsigned char **buf, size_t *n) {
    return bpe_read_file(path, "test input", buf, n);
}

static cJSON *read_json(const char *path) {
    unsigned char *buf;
    size_t n;
    if (read_file(path, &buf, &n) != 0) return NULL;
    cJSON *j = cJSON_ParseWithLength((const char *)buf, n);
    free(buf);
    return j;
}

// the ids of a JSON array of integers; -1 when it is not one
static long json_ids(const cJSON *a, uint32_t **ids) {
    *ids = NULL;
    if (!cJSON_IsArray(a)) return -1;
    int n = cJSON_GetArraySize(a);
    *ids = (uint32_t *)malloc((size_t)(n ? n : 1) * sizeof(uint32_t));
    int k = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, a) (*ids)[k++] = (uint32_t)x->valuedouble;
    return n;
}

// Rust's String::from_utf8_lossy in place (p has room for 3 bytes per byte): each maximal
// invalid subpart (a lead byte and the continuation bytes that can still follow it) becomes
// U+FFFD. tokenizers' decode ends with it; the C decoder returns the bytes before it.
static size_t lossy_utf8(unsigned char *p, size_t n) {
    unsigned char *src = (unsigned char *)malloc(n + 1);
    memcpy(src, p, n);
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        unsigned int cp;
        int valid;
        size_t len = bpe_utf8_decode(src, n, i, &cp, &valid);
        if (valid) {
            memcpy(p + k, src + i, len);
            k += len;
            i += len;
            continue;
        }
        unsigned char c = src[i];
        size_t need = c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2 : c >= 0xF0 && c <= 0xF4 ? 3 : 0;
        size_t j = i + 1;
        for (size_t q = 0; q < need && j < n; q++, j++) {
            unsigned char b = src[j];
            unsigned char lo = 0x80, hi = 0xBF;
            if (q == 0 && c == 0xE0) lo = 0xA0;
            if (q == 0 && c == 0xED) hi = 0x9F;
            if (q == 0 && c == 0xF0) lo = 0x90;
            if (q == 0 && c == 0xF4) hi = 0x8F;
            if (b < lo || b > hi) break;
        }
        p[k++] = 0xEF; p[k++] = 0xBF; p[k++] = 0xBD;
        i = j;
    }
    free(src);
    return k;
}

// a case's text (or decoded text): the "NAME_hex" bytes when present (a string with a NUL,
// which the JSON reader would cut), else the "NAME" string; malloc'd into *out, NUL-terminated
static size_t json_text(const cJSON *c, const char *name, char **out) {
    char hex_name[32];
    snprintf(hex_name, sizeof(hex_name), "%s_hex", name);
    const cJSON *hex = cJSON_GetObjectItem(c, hex_name);
    if (cJSON_IsString(hex)) {
        size_t n = strlen(hex->valuestring) / 2;
        *out = (char *)malloc(n + 1);
        for (size_t i = 0; i < n; i++) {
            unsigned int v;
            sscanf(hex->valuestring + 2 * i, "%2x", &v);
            (*out)[i] = (char)v;
        }
        (*out)[n] = 0;
        return n;
    }
    const char *s = cJSON_GetObjectItem(c, name)->valuestring;
    size_t n = strlen(s);
    *out = (char *)malloc(n + 1);
    memcpy(*out, s, n + 1);
    return n;
}

static int same_ids(const BpeIds *got, const uint32_t *want, long nwant) {
    return nwant >= 0 && got->n == (size_t)nwant && (nwant == 0 || memcmp(got->ids, want, got->n * 4) == 0);
}

static void print_diff(const char *what, const BpeIds *got, const uint32_t *want, long nwant) {
    size_t first = 0;
    while (first < got->n && (long)first < nwant && got->ids[first] == want[first]) first++;
    printf("      %s: first difference at token %zu: C %d, tokenizers %d (C %zu tokens, tokenizers %ld)\n", what,
           first, first < got->n ? (int)got->ids[first] : -1, (long)first < nwant ? (int)want[first] : -1, got->n,
           nwant);
}

// llm.c's recipe: sections split on "\n\n", each after sep, encoded with "\n\n" appended but the last
static int encode_documents(HfTokenizer *t, const unsigned char *text, size_t n, int sep, BpeIds *ids) {
    size_t start = 0;
    for (;;) {
        size_t end = start;
        while (end + 1 < n && !(text[end] == '\n' && text[end + 1] == '\n')) end++;
        int last = !(end + 1 < n);
        if (last) end = n;
        if (bpe_ids_push(ids, (uint32_t)sep) != 0 ||
            hft_encode(t, text + start, end - start + (last ? 0 : 2), 0, ids) != 0)
            return -1;
        if (last) return 0;
        start = end + 2;
    }
}

// ---------------------------------------------------------------- 1-3: the fixture tokenizers

static double g_min_mbps = 1e30;

static void test_fixture_tokenizer(const char *dir, const cJSON *spec, const unsigned char *text, size_t ntext) {
    const char *name = cJSON_GetObjectItem(spec, "name")->valuestring;
    char path[512], err[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, cJSON_GetObjectItem(spec, "file")->valuestring);
    HfTokenizer t;
    int ok = hft_load_checked(&t, path, err, sizeof(err)) == 0;
    if (!test_check(ok, "%s: load %s", name, path)) {
        printf("      %s\n", err);
        return;
    }
    int vs = (int)cJSON_GetObjectItem(spec, "vocab_size")->valuedouble;
    int bos = (int)cJSON_GetObjectItem(spec, "bos")->valuedouble, eos = (int)cJSON_GetObjectItem(spec, "eos")->valuedouble;
    test_check(t.vocab_size == vs && t.bos_id == bos && t.eos_id == eos,
               "%s: vocab %d, bos %d, eos %d, %d merges, pre-tokenizer %s%s%s%s (tokenizers: vocab %d, bos %d, eos %d)",
               name, t.vocab_size, t.bos_id, t.eos_id, t.n_merges, hft_pre_name(t.pre), t.nfc ? ", NFC" : "",
               t.ignore_merges ? ", ignore_merges" : "", t.add_prefix_space ? ", add_prefix_space" : "", vs, bos, eos);

    const cJSON *cases = cJSON_GetObjectItem(spec, "cases"), *c;
    long ncase = 0, n_ids = 0, n_ord = 0, n_dec = 0, shown = 0;
    cJSON_ArrayForEach(c, cases) {
        char *s = NULL, *want_dec = NULL;
        size_t slen = json_text(c, "text", &s), dlen;
        uint32_t *want, *want_ord;
        long nwant = json_ids(cJSON_GetObjectItem(c, "ids"), &want);
        const cJSON *ord = cJSON_GetObjectItem(c, "ids_ordinary");
        long nord = ord ? json_ids(ord, &want_ord) : json_ids(cJSON_GetObjectItem(c, "ids"), &want_ord);
        if (cJSON_GetObjectItem(c, "decoded") != NULL) dlen = json_text(c, "decoded", &want_dec);
        else {
            want_dec = (char *)malloc(slen + 1);
            memcpy(want_dec, s, slen + 1);
            dlen = slen;
        }
        BpeIds got = {NULL, 0, 0}, got_ord = {NULL, 0, 0};
        hft_encode(&t, (const unsigned char *)s, slen, 1, &got);
        hft_encode(&t, (const unsigned char *)s, slen, 0, &got_ord);
        int m1 = same_ids(&got, want, nwant), m2 = same_ids(&got_ord, want_ord, nord);
        size_t cap = 1, m;  // room for the bytes, three times over for lossy_utf8
        for (size_t i = 0; i < got.n; i++) {
            hft_token_bytes(&t, got.ids[i], &m);
            cap += 3 * m;
        }
        unsigned char *out = (unsigned char *)malloc(cap);
        m = hft_decode(&t, got.ids, got.n, out, cap);
        m = m == (size_t)-1 ? 0 : lossy_utf8(out, m);
        int m3 = m == dlen && memcmp(out, want_dec, m) == 0;
        n_ids += m1;
        n_ord += m2;
        n_dec += m3;
        if ((!m1 || !m2 || !m3) && shown++ < 8) {
            printf("FAIL  %s: \"%s\"%s%s%s\n", name, preview((const unsigned char *)s, slen), m1 ? "" : " ids differ",
                   m2 ? "" : " ordinary ids differ", m3 ? "" : " decode differs");
            if (!m1) print_diff("ids", &got, want, nwant);
            if (!m2) print_diff("ordinary ids", &got_ord, want_ord, nord);
        }
        free(out);
        free(s);
        free(want_dec);
        free(want);
        free(want_ord);
        bpe_ids_free(&got);
        bpe_ids_free(&got_ord);
        ncase++;
    }
    test_check(n_ids == ncase, "%s: tokenizers' ids for %ld of %ld test texts", name, n_ids, ncase);
    test_check(n_ord == ncase, "%s: tokenizers' ids with special tokens as text (encode_special_tokens) for %ld of %ld",
               name, n_ord, ncase);
    test_check(n_dec == ncase, "%s: decode(ids) == tokenizers' decode for %ld of %ld", name, n_dec, ncase);

    // all of Tiny Shakespeare, as one text and as llm.c documents
    const cJSON *sh = cJSON_GetObjectItem(spec, "shakespeare"), *shd = cJSON_GetObjectItem(spec, "shakespeare_docs");
    BpeIds ids = {NULL, 0, 0};
    hft_encode(&t, text, ntext, 1, &ids);
    uint64_t h = fnv_ids(ids.ids, ids.n), want_h = fnv_str_hex(cJSON_GetObjectItem(sh, "hash")->valuestring);
    long want_n = (long)cJSON_GetObjectItem(sh, "ntok")->valuedouble;
    test_check((long)ids.n == want_n && h == want_h, "%s: %s as one text: %zu tokens, hash %016llx (tokenizers %ld, "
               "%016llx)", name, TEXT_FILE, ids.n, (unsigned long long)h, want_n, (unsigned long long)want_h);
    {
        unsigned char *out = (unsigned char *)malloc(ntext * 2 + 16);
        size_t m = hft_decode(&t, ids.ids, ids.n, out, ntext * 2 + 16);
        if (!t.nfc && !t.add_prefix_space)
            test_check(m == ntext && memcmp(out, text, ntext) == 0, "%s: decode(encode(%s)) == the text", name, TEXT_FILE);
        free(out);
    }
    ids.n = 0;
    int sep = hft_document_separator(&t);
    if (sep >= 0) {
        encode_documents(&t, text, ntext, sep, &ids);
        h = fnv_ids(ids.ids, ids.n);
        want_h = fnv_str_hex(cJSON_GetObjectItem(shd, "hash")->valuestring);
        want_n = (long)cJSON_GetObjectItem(shd, "ntok")->valuedouble;
        test_check((long)ids.n == want_n && h == want_h && sep == (int)cJSON_GetObjectItem(shd, "separator")->valuedouble,
                   "%s: %s as llm.c documents after %d: %zu tokens (tokenizers %ld), hash matches", name, TEXT_FILE, sep,
                   ids.n, want_n);
    }
    // speed: the text 10 times over (11 MB), on a fresh tokenizer (cold cache)
    {
        size_t reps = 10, n = ntext * reps;
        unsigned char *big = (unsigned char *)malloc(n);
        for (size_t r = 0; r < reps; r++) memcpy(big + r * ntext, text, ntext);
        HfTokenizer t2;
        hft_load_checked(&t2, path, err, sizeof(err));
        ids.n = 0;
        double t0 = now_s();
        hft_encode(&t2, big, n, 1, &ids);
        double dt = now_s() - t0, mbps = (double)n / 1e6 / dt;
        if (mbps < g_min_mbps) g_min_mbps = mbps;
        test_check(mbps > 1.0, "%s: encode speed %.1f MB/s (%.1f MB of %s in %.2f s, %zu tokens)", name, mbps,
                   (double)n / 1e6, TEXT_FILE, dt, ids.n);
        hft_free(&t2);
        free(big);
    }
    bpe_ids_free(&ids);
    hft_free(&t);
}

// ---------------------------------------------------------------- 4: every code point

#define PROBE_CHUNK 8192

static size_t put_cp(unsigned char *p, unsigned int cp) { return hft_utf8_put(cp, p); }

// the probe strings of scripts/make_test_tokenizers.py for the scalar values cps[0..n)
static size_t probe_pretok_text(const unsigned int *cps, size_t n, unsigned char *out) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned int X = cps[i];
        k += put_cp(out + k, X); out[k++] = 'a';
        k += put_cp(out + k, X); out[k++] = '1';
        k += put_cp(out + k, X); out[k++] = ' ';
        k += put_cp(out + k, X);
        k += put_cp(out + k, X); out[k++] = '\''; out[k++] = 's'; out[k++] = '\'';
        k += put_cp(out + k, X); out[k++] = '\n';
        k += put_cp(out + k, X); out[k++] = ' '; out[k++] = '\n'; out[k++] = '!';
        k += put_cp(out + k, X); out[k++] = '!'; out[k++] = '\r'; out[k++] = '\n';
        k += put_cp(out + k, X); out[k++] = ' '; out[k++] = ' ';
    }
    return k;
}

static size_t probe_nfc_text(const unsigned int *cps, size_t n, unsigned char *out) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned int X = cps[i];
        k += put_cp(out + k, 'a'); k += put_cp(out + k, 0x301); k += put_cp(out + k, X); out[k++] = '\n';
        k += put_cp(out + k, 'a'); k += put_cp(out + k, X); k += put_cp(out + k, 0x301); out[k++] = '\n';
        k += put_cp(out + k, 'a'); k += put_cp(out + k, X); k += put_cp(out + k, 0x316); out[k++] = '\n';
        k += put_cp(out + k, X); k += put_cp(out + k, 0x316); k += put_cp(out + k, 0x301); k += put_cp(out + k, 0x308);
        out[k++] = '\n';
        k += put_cp(out + k, 0x1100); k += put_cp(out + k, X); out[k++] = '\n';
        k += put_cp(out + k, X); k += put_cp(out + k, 0x1161); out[k++] = '\n';
        k += put_cp(out + k, X); k += put_cp(out + k, 0x11A8); out[k++] = '\n';
    }
    return k;
}

static void test_probes(const cJSON *probes) {
    int chunk = (int)cJSON_GetObjectItem(probes, "chunk")->valuedouble;
    if (!test_check(chunk == PROBE_CHUNK, "probe chunk size %d", chunk)) return;
    unsigned int *cps = (unsigned int *)malloc(0x110000 * sizeof(unsigned int));
    size_t ncp = 0;
    for (unsigned int c = 0; c < 0x110000; c++)
        if (c < 0xD800 || c > 0xDFFF) cps[ncp++] = c;
    size_t nchunks = (ncp + PROBE_CHUNK - 1) / PROBE_CHUNK;
    unsigned char *buf = (unsigned char *)malloc((size_t)PROBE_CHUNK * 64);
    const char *names[3] = {"gpt2", "llama3", "qwen2"};
    const int pres[3] = {HFT_PRE_GPT2, HFT_PRE_LLAMA3, HFT_PRE_QWEN2};
    for (int p = 0; p < 3; p++) {
        const cJSON *hs = cJSON_GetObjectItem(cJSON_GetObjectItem(probes, "pretok"), names[p]);
        size_t same = 0;
        int shown = 0;
        for (size_t k = 0; k < nchunks; k++) {
            size_t lo = k * PROBE_CHUNK, n = ncp - lo < PROBE_CHUNK ? ncp - lo : PROBE_CHUNK;
            size_t len = probe_pretok_text(cps + lo, n, buf);
            uint64_t h = 1469598103934665603ULL;
            for (size_t i = 0; i < len;) {
                size_t j = hft_piece_end(pres[p], buf, len, i);
                h ^= (uint64_t)(j - i);
                h *= 1099511628211ULL;
                i = j;
            }
            int ok = h == fnv_str_hex(cJSON_GetArrayItem(hs, (int)k)->valuestring);
            same += ok;
            if (!ok && shown++ < 4) printf("      %s pattern differs in code points U+%04X..U+%04X\n", names[p], cps[lo],
                                           cps[lo + n - 1]);
        }
        test_check(same == nchunks && (size_t)cJSON_GetArraySize(hs) == nchunks,
                   "%s pattern splits probe strings of all %zu code points as tokenizers (%zu of %zu chunks)", names[p],
                   ncp, same, nchunks);
    }
    {
        HfTokenizer t;  // only its NFC buffers are used
        memset(&t, 0, sizeof(t));
        hft_free(&t);
        const cJSON *hs = cJSON_GetObjectItem(probes, "nfc");
        size_t same = 0;
        int shown = 0;
        for (size_t k = 0; k < nchunks; k++) {
            size_t lo = k * PROBE_CHUNK, n = ncp - lo < PROBE_CHUNK ? ncp - lo : PROBE_CHUNK;
            size_t len = probe_nfc_text(cps + lo, n, buf);
            const unsigned char *out = buf;
            size_t m = len;
            if (hft_nfc_needed(buf, len)) {
                hft_nfc(&t, buf, len);
                out = t.nfc_buf.p;
                m = t.nfc_buf.n;
            }
            uint64_t h = 1469598103934665603ULL;
            for (size_t i = 0; i < m; i++) {
                h ^= out[i];
                h *= 1099511628211ULL;
            }
            int ok = h == fnv_str_hex(cJSON_GetArrayItem(hs, (int)k)->valuestring);
            same += ok;
            if (!ok && shown++ < 4) printf("      NFC differs in code points U+%04X..U+%04X\n", cps[lo], cps[lo + n - 1]);
        }
        test_check(same == nchunks, "NFC (Unicode %s) of probe strings of all %zu code points as tokenizers (%zu of %zu "
                   "chunks)", NFC_UNICODE_VERSION, ncp, same, nchunks);
        hft_free(&t);
    }
    free(buf);
    free(cps);
}

// ---------------------------------------------------------------- 5: GPT-2 from data/gpt2

// Writes a tokenizer.json of GPT-2 from encoder.json and vocab.bpe, in the form tokenizers
// saves it (the vocabulary as it is, the merges as "a b" strings, <|endoftext|> added).
static int write_gpt2_json(const char *path) {
    unsigned char *enc_buf, *bpe_buf;
    size_t enc_n, bpe_n;
    if (read_file(ENCODER_JSON, &enc_buf, &enc_n) != 0) return -1;
    if (read_file(VOCAB_BPE, &bpe_buf, &bpe_n) != 0) {
        free(enc_buf);
        return -1;
    }
    cJSON *vocab = cJSON_ParseWithLength((const char *)enc_buf, enc_n);
    cJSON *merges = cJSON_CreateArray();
    for (size_t i = 0; i < bpe_n;) {
        size_t j = i;
        while (j < bpe_n && bpe_buf[j] != '\n') j++;
        if (j > i && !(i == 0 && strncmp((const char *)bpe_buf, "#version", 8) == 0)) {
            char *line = (char *)malloc(j - i + 1);
            memcpy(line, bpe_buf + i, j - i);
            line[j - i] = 0;
            cJSON_AddItemToArray(merges, cJSON_CreateString(line));
            free(line);
        }
        i = j + 1;
    }
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON_AddNullToObject(root, "truncation");
    cJSON_AddNullToObject(root, "padding");
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    cJSON *eot = cJSON_CreateObject();
    cJSON_AddNumberToObject(eot, "id", 50256);
    cJSON_AddStringToObject(eot, "content", "<|endoftext|>");
    cJSON_AddFalseToObject(eot, "single_word");
    cJSON_AddFalseToObject(eot, "lstrip");
    cJSON_AddFalseToObject(eot, "rstrip");
    cJSON_AddTrueToObject(eot, "normalized");
    cJSON_AddTrueToObject(eot, "special");
    cJSON_AddItemToArray(added, eot);
    cJSON_AddNullToObject(root, "normalizer");
    cJSON *pre = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(pre, "type", "ByteLevel");
    cJSON_AddFalseToObject(pre, "add_prefix_space");
    cJSON_AddTrueToObject(pre, "trim_offsets");
    cJSON_AddTrueToObject(pre, "use_regex");
    cJSON *post = cJSON_AddObjectToObject(root, "post_processor");
    cJSON_AddStringToObject(post, "type", "ByteLevel");
    cJSON *dec = cJSON_AddObjectToObject(root, "decoder");
    cJSON_AddStringToObject(dec, "type", "ByteLevel");
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddNullToObject(model, "dropout");
    cJSON_AddNullToObject(model, "unk_token");
    cJSON_AddStringToObject(model, "continuing_subword_prefix", "");
    cJSON_AddStringToObject(model, "end_of_word_suffix", "");
    cJSON_AddFalseToObject(model, "fuse_unk");
    cJSON_AddFalseToObject(model, "byte_fallback");
    cJSON_AddFalseToObject(model, "ignore_merges");
    cJSON_AddItemToObject(model, "vocab", vocab);
    cJSON_AddItemToObject(model, "merges", merges);
    char *out = cJSON_PrintUnformatted(root);
    int rc = out != NULL && vocab != NULL ? write_file(path, out, strlen(out)) : -1;
    free(out);
    cJSON_Delete(root);
    free(enc_buf);
    free(bpe_buf);
    return rc;
}

static int files_equal(const char *a, const char *b) {
    unsigned char *x, *y;
    size_t nx, ny;
    if (read_file(a, &x, &nx) != 0) return 0;
    if (read_file(b, &y, &ny) != 0) {
        free(x);
        return 0;
    }
    int same = nx == ny && memcmp(x, y, nx) == 0;
    free(x);
    free(y);
    return same;
}

static int run_command(const char *cmd) {
    fflush(stdout);
    fflush(stderr);
    int st = system(cmd);
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_gpt2_files(const char *tmp, const cJSON *expected, const unsigned char *text, size_t ntext) {
    char path[600], cmd[2048], err[1024];
    snprintf(path, sizeof(path), "%s/gpt2_tokenizer.json", tmp);
    if (!test_check(write_gpt2_json(path) == 0, "write a GPT-2 tokenizer.json from %s + %s", ENCODER_JSON, VOCAB_BPE))
        return;
    HfTokenizer t;
    if (!test_check(hft_load_checked(&t, path, err, sizeof(err)) == 0, "load it")) {
        printf("      %s\n", err);
        return;
    }
    test_check(t.vocab_size == 50257 && t.n_merges == 50000 && t.eos_id == 50256 && t.bos_id == -1 &&
                   hft_document_separator(&t) == 50256 && t.pre == HFT_PRE_GPT2,
               "GPT-2: vocab %d, %d merges, eos %d, separator %d", t.vocab_size, t.n_merges, t.eos_id,
               hft_document_separator(&t));
    BpeIds ids = {NULL, 0, 0}, ref = {NULL, 0, 0};
    double t0 = now_s();
    encode_documents(&t, text, ntext, 50256, &ids);
    double dt = now_s() - t0;
    BpeEncoder enc;
    if (bpe_load(&enc, ENCODER_JSON, VOCAB_BPE) == 0) {
        size_t start = 0;
        for (;;) {  // the same recipe through data/bpe.h
            size_t end = start;
            while (end + 1 < ntext && !(text[end] == '\n' && text[end + 1] == '\n')) end++;
            int last = !(end + 1 < ntext);
            if (last) end = ntext;
            bpe_ids_push(&ref, 50256);
            bpe_encode(&enc, text + start, end - start + (last ? 0 : 2), &ref);
            if (last) break;
            start = end + 2;
        }
        bpe_free(&enc);
    }
    test_check(ids.n == ref.n && ids.n > 0 && memcmp(ids.ids, ref.ids, ids.n * 4) == 0,
               "GPT-2 tokenizer.json == data/bpe.h on all of %s: %zu tokens (data/bpe.h %zu; %.1f MB/s)", TEXT_FILE, ids.n,
               ref.n, (double)ntext / 1e6 / dt);
    const cJSON *gf = cJSON_GetObjectItem(expected, "gpt2_files");
    test_check((long)ids.n == (long)cJSON_GetObjectItem(gf, "ntok")->valuedouble &&
                   fnv_ids(ids.ids, ids.n) == fnv_str_hex(cJSON_GetObjectItem(gf, "hash")->valuestring),
               "GPT-2 tokenizer.json == tokenizers' GPT-2 from the same files (count and hash)");
    {
        char err2[512];
        uint32_t *val = NULL, *train = NULL;
        size_t nval = 0, ntrain = 0;
        int ok = shard_read_checked(VAL_BIN, &val, &nval, NULL, err2, sizeof(err2)) == 0 &&
                 shard_read_checked(TRAIN_BIN, &train, &ntrain, NULL, err2, sizeof(err2)) == 0;
        ok = ok && nval + ntrain == ids.n && memcmp(ids.ids, val, nval * 4) == 0 &&
             memcmp(ids.ids + nval, train, ntrain * 4) == 0;
        test_check(ok, "GPT-2 tokenizer.json reproduces the committed shards %s + %s", VAL_BIN, TRAIN_BIN);
        free(val);
        free(train);
    }
    {  // decoding, without the separators, gives back the text
        unsigned char *out = (unsigned char *)malloc(ntext + 1);
        size_t k = 0;
        int ok = 1;
        for (size_t i = 0; i < ids.n && ok; i++) {
            if (ids.ids[i] == 50256) continue;
            size_t len;
            const unsigned char *p = hft_token_bytes(&t, ids.ids[i], &len);
            if (p == NULL || k + len > ntext) ok = 0;
            else memcpy(out + k, p, len);
            k += len;
        }
        test_check(ok && k == ntext && memcmp(out, text, ntext) == 0, "GPT-2: decoding the documents gives %s back",
                   TEXT_FILE);
        free(out);
    }
    {  // llm.c's Tokenizer from the tokenizer.json holds data/gpt2_tokenizer.bin's bytes
        Tokenizer a, b;
        int ok = tokenizer_init_json_checked(&a, path, err, sizeof(err)) == 0;
        int okb = tokenizer_init_checked(&b, "data/gpt2_tokenizer.bin", err, sizeof(err)) == 0;
        int same = ok && okb && a.vocab_size == b.vocab_size && a.eot_token == b.eot_token &&
                   memcmp(a.offsets, b.offsets, (a.vocab_size + 1) * sizeof(uint32_t)) == 0 &&
                   memcmp(a.bytes, b.bytes, a.offsets[a.vocab_size]) == 0;
        test_check(same && a.version == TOKENIZER_JSON_VERSION,
                   "llmc/tokenizer_json.h: the GPT-2 tokenizer.json gives data/gpt2_tokenizer.bin's %u tokens and eot %u",
                   ok ? a.vocab_size : 0, ok ? a.eot_token : 0);
        if (ok) tokenizer_free(&a);
        if (okb) tokenizer_free(&b);
        Tokenizer c;
        tokenizer_init_any(&c, path);
        test_check(c.init_ok && c.vocab_size == 50257, "tokenizer_init_any picks the tokenizer.json reader for .json");
        tokenizer_free(&c);
    }
    // build/bpe_encode -t rewrites the committed shards byte for byte
    snprintf(cmd, sizeof(cmd), "%s -t %s -o %s -p ts > %s/bpe_encode.log 2>&1", BPE_ENCODE, path, tmp, tmp);
    int rc = run_command(cmd);
    char v1[600], t1[600];
    snprintf(v1, sizeof(v1), "%s/ts_val.bin", tmp);
    snprintf(t1, sizeof(t1), "%s/ts_train.bin", tmp);
    test_check(rc == 0 && files_equal(v1, VAL_BIN) && files_equal(t1, TRAIN_BIN),
               "%s -t (GPT-2 tokenizer.json) writes %s and %s byte for byte", BPE_ENCODE, VAL_BIN, TRAIN_BIN);
    remove(v1);
    remove(t1);
    snprintf(cmd, sizeof(cmd), "%s/bpe_encode.log", tmp);
    remove(cmd);
    remove(path);
    bpe_ids_free(&ids);
    bpe_ids_free(&ref);
    hft_free(&t);
}

// a tokenizer of 70,000 model tokens and <|endoftext|> after them: bpe_encode -t writes uint32 shards
static void test_large_vocab(const char *tmp) {
    char path[600], txt[600], cmd[2048], v[600], tr[600];
    snprintf(path, sizeof(path), "%s/big.json", tmp);
    snprintf(txt, sizeof(txt), "%s/big.txt", tmp);
    int cp_to_byte[512], byte_rank[256];
    bpe_byte_alphabet(cp_to_byte, byte_rank);
    cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    int id = 0;
    for (int c = 0; c < 512; c++) {
        if (cp_to_byte[c] < 0) continue;
        unsigned char u[5];
        u[hft_utf8_put((unsigned int)c, u)] = 0;
        cJSON_AddNumberToObject(vocab, (const char *)u, id++);
    }
    cJSON_AddNumberToObject(vocab, "he", id++);
    while (id < 70000) {
        char key[32];
        snprintf(key, sizeof(key), "\xc4\x80%d", id);  // U+0100 (byte 0) and digits: never produced by a merge
        cJSON_AddNumberToObject(vocab, key, id++);
    }
    cJSON *merges = cJSON_AddArrayToObject(model, "merges");
    cJSON_AddItemToArray(merges, cJSON_CreateString("h e"));
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens"), *eot = cJSON_CreateObject();
    cJSON_AddNumberToObject(eot, "id", 70000);
    cJSON_AddStringToObject(eot, "content", "<|endoftext|>");
    cJSON_AddFalseToObject(eot, "single_word");
    cJSON_AddFalseToObject(eot, "lstrip");
    cJSON_AddFalseToObject(eot, "rstrip");
    cJSON_AddFalseToObject(eot, "normalized");
    cJSON_AddTrueToObject(eot, "special");
    cJSON_AddItemToArray(added, eot);
    cJSON *pre = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(pre, "type", "ByteLevel");
    cJSON *dec = cJSON_AddObjectToObject(root, "decoder");
    cJSON_AddStringToObject(dec, "type", "ByteLevel");
    char *s = cJSON_PrintUnformatted(root);
    write_file(path, s, strlen(s));
    free(s);
    cJSON_Delete(root);
    const char *body = "he said\n\nhello there\n\nhe";
    write_file(txt, body, strlen(body));
    snprintf(cmd, sizeof(cmd), "%s -t %s -i %s -o %s -p big -v 3 > %s/big.log 2>&1", BPE_ENCODE, path, txt, tmp, tmp);
    int rc = run_command(cmd);
    snprintf(v, sizeof(v), "%s/big_val.bin", tmp);
    snprintf(tr, sizeof(tr), "%s/big_train.bin", tmp);
    uint32_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    ShardInfo ia, ib;
    char err[512];
    int ok = rc == 0 && shard_read_checked(v, &a, &na, &ia, err, sizeof(err)) == 0 &&
             shard_read_checked(tr, &b, &nb, &ib, err, sizeof(err)) == 0;
    ok = ok && ia.version == SHARD_VERSION_LLAMA3 && ib.version == SHARD_VERSION_LLAMA3 && na == 3 && a[0] == 70000 &&
         a[1] == 256;  // <|endoftext|>, then "he"
    size_t nsep = 0;
    for (size_t i = 0; ok && i < nb; i++) nsep += b[i] == 70000;
    test_check(ok && nsep == 2, "%s -t with a vocabulary of 70,001 writes version 7 (uint32) shards with id 70000",
               BPE_ENCODE);
    free(a);
    free(b);
    remove(v);
    remove(tr);
    remove(path);
    remove(txt);
    snprintf(cmd, sizeof(cmd), "%s/big.log", tmp);
    remove(cmd);
}

// ---------------------------------------------------------------- 6-7: adapter, any bytes

static uint64_t xorshift64(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void test_adapter_and_bytes(const char *dir) {
    const char *names[4] = {"gpt2", "llama3", "qwen2", "options"};
    uint64_t x = 20261201;
    for (int k = 0; k < 4; k++) {
        char path[512], err[1024];
        snprintf(path, sizeof(path), "%s/%s.json", dir, names[k]);
        HfTokenizer t;
        Tokenizer tok;
        if (hft_load_checked(&t, path, err, sizeof(err)) != 0) continue;
        int ok = tokenizer_init_json_checked(&tok, path, err, sizeof(err)) == 0;
        int same = ok && tok.vocab_size == (uint32_t)t.vocab_size && tok.init_ok &&
                   tok.eot_token == (uint32_t)(hft_document_separator(&t) >= 0 ? hft_document_separator(&t) : 0);
        for (uint32_t id = 0; same && id < tok.vocab_size; id++) {
            size_t n, m;
            const unsigned char *p = hft_token_bytes(&t, id, &n), *q = tokenizer_decode(&tok, id, &m);
            same = n == m && n > 0 && memcmp(p, q, n) == 0;
        }
        test_check(same, "%s: llm.c Tokenizer from tokenizer.json: %u tokens, eot %u, every id's bytes", names[k],
                   ok ? tok.vocab_size : 0, ok ? tok.eot_token : 0);
        if (ok) tokenizer_free(&tok);
        // random bytes (mostly invalid UTF-8) round-trip through the tokenizers without a normalizer
        if (!t.nfc && !t.add_prefix_space) {
            int nsame = 0, n = 500;
            unsigned char buf[256], out[256 * 4];
            for (int r = 0; r < n; r++) {
                size_t len = 1 + (size_t)(xorshift64(&x) % 200);
                for (size_t i = 0; i < len; i++) {
                    uint64_t v = xorshift64(&x);
                    buf[i] = (v & 3) ? (unsigned char)(v >> 8) : (unsigned char)" a\n'1<|>"[(v >> 8) % 8];
                }
                BpeIds ids = {NULL, 0, 0};
                hft_encode(&t, buf, len, r & 1, &ids);
                size_t m = hft_decode(&t, ids.ids, ids.n, out, sizeof(out));
                nsame += m == len && memcmp(out, buf, len) == 0;
                bpe_ids_free(&ids);
            }
            test_check(nsame == n, "%s: %d of %d strings of random bytes encode and decode back", names[k], nsame, n);
            // a 1 MB piece (one run of letters): BPE through the heap, not the cache; linearithmic
            size_t big_n = 1 << 20;
            unsigned char *big = (unsigned char *)malloc(big_n), *back = (unsigned char *)malloc(big_n);
            for (size_t i = 0; i < big_n; i++) big[i] = (unsigned char)("etaoinshrdlu"[xorshift64(&x) % 12]);
            BpeIds ids = {NULL, 0, 0};
            double t0 = now_s();
            hft_encode(&t, big, big_n, 1, &ids);
            double dt = now_s() - t0;
            size_t m = hft_decode(&t, ids.ids, ids.n, back, big_n);
            test_check(dt < 5.0 && m == big_n && memcmp(back, big, big_n) == 0,
                       "%s: a 1 MB piece of letters encodes in %.2f s (%zu tokens) and decodes back", names[k], dt, ids.n);
            bpe_ids_free(&ids);
            free(big);
            free(back);
        }
        hft_free(&t);
    }
}

// ---------------------------------------------------------------- 8: refusals

typedef void (*Mutation)(cJSON *root);

static cJSON *model_of(cJSON *root) { return cJSON_GetObjectItemCaseSensitive(root, "model"); }
static void set_field(cJSON *obj, const char *name, cJSON *value) {
    if (cJSON_GetObjectItemCaseSensitive(obj, name) != NULL) cJSON_ReplaceItemInObjectCaseSensitive(obj, name, value);
    else cJSON_AddItemToObject(obj, name, value);
}
static void m_wordpiece(cJSON *r) { set_field(model_of(r), "type", cJSON_CreateString("WordPiece")); }
static void m_unigram(cJSON *r) { set_field(model_of(r), "type", cJSON_CreateString("Unigram")); }
static void m_no_model(cJSON *r) { cJSON_DeleteItemFromObjectCaseSensitive(r, "model"); }
static void m_metaspace(cJSON *r) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "Metaspace");
    set_field(r, "pre_tokenizer", p);
}
static void m_pre_null(cJSON *r) { set_field(r, "pre_tokenizer", cJSON_CreateNull()); }
static cJSON *merge_pair(const char *a, const char *b) {
    cJSON *p = cJSON_CreateArray();
    cJSON_AddItemToArray(p, cJSON_CreateString(a));
    cJSON_AddItemToArray(p, cJSON_CreateString(b));
    return p;
}
static void m_merge_unknown(cJSON *r) {
    cJSON_ReplaceItemInArray(cJSON_GetObjectItem(model_of(r), "merges"), 0, merge_pair("\xc4\xa0", "zzqzzq"));
}
static void m_merge_result(cJSON *r) {  // "{" + "}" : both bytes are tokens, "{}" is not
    cJSON_ReplaceItemInArray(cJSON_GetObjectItem(model_of(r), "merges"), 0, merge_pair("{", "}"));
}
static void m_merge_mixed(cJSON *r) {
    cJSON_ReplaceItemInArray(cJSON_GetObjectItem(model_of(r), "merges"), 1, cJSON_CreateString("a b"));
}
static void m_merge_three(cJSON *r) {  // options.json has "a b" strings
    cJSON_ReplaceItemInArray(cJSON_GetObjectItem(model_of(r), "merges"), 0, cJSON_CreateString("a b c"));
}
static void m_merge_number(cJSON *r) {
    cJSON_ReplaceItemInArray(cJSON_GetObjectItem(model_of(r), "merges"), 0, cJSON_CreateNumber(3));
}
static void m_dup_id(cJSON *r) { set_field(cJSON_GetObjectItem(model_of(r), "vocab"), "a", cJSON_CreateNumber(0)); }
static void m_id_range(cJSON *r) { set_field(cJSON_GetObjectItem(model_of(r), "vocab"), "a", cJSON_CreateNumber(999999)); }
static void m_id_negative(cJSON *r) { set_field(cJSON_GetObjectItem(model_of(r), "vocab"), "a", cJSON_CreateNumber(-1)); }
static void m_id_fraction(cJSON *r) { set_field(cJSON_GetObjectItem(model_of(r), "vocab"), "a", cJSON_CreateNumber(1.5)); }
static void m_id_string(cJSON *r) { set_field(cJSON_GetObjectItem(model_of(r), "vocab"), "a", cJSON_CreateString("7")); }
static void m_dup_key(cJSON *r) {
    cJSON *v = cJSON_GetObjectItem(model_of(r), "vocab");
    cJSON_AddItemToObject(v, "a", cJSON_CreateNumber(cJSON_GetArraySize(v)));
}
static void m_no_byte(cJSON *r) {  // the space byte's token renamed
    cJSON *v = cJSON_GetObjectItem(model_of(r), "vocab");
    cJSON *sp = cJSON_DetachItemFromObjectCaseSensitive(v, "\xc4\xa0");
    cJSON_AddItemToObject(v, "QQQQ", sp);
}
static void m_small_vocab(cJSON *r) {
    cJSON *v = cJSON_CreateObject();
    cJSON_AddNumberToObject(v, "a", 0);
    set_field(model_of(r), "vocab", v);
}
static cJSON *split_of(cJSON *r) {
    return cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "pre_tokenizer"), "pretokenizers"), 0);
}
static void m_regex_unknown(cJSON *r) {
    set_field(cJSON_GetObjectItem(split_of(r), "pattern"), "Regex",
              cJSON_CreateString("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,4}| "
                                 "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"));
}
static void m_regex_string(cJSON *r) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "String", " ");
    set_field(split_of(r), "pattern", p);
}
static void m_behavior(cJSON *r) { set_field(split_of(r), "behavior", cJSON_CreateString("Removed")); }
static void m_invert(cJSON *r) { set_field(split_of(r), "invert", cJSON_CreateTrue()); }
static void m_bytelevel_regex(cJSON *r) {
    cJSON *bl = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "pre_tokenizer"), "pretokenizers"), 1);
    set_field(bl, "use_regex", cJSON_CreateTrue());
}
static void m_byte_fallback(cJSON *r) { set_field(model_of(r), "byte_fallback", cJSON_CreateTrue()); }
static void m_dropout(cJSON *r) { set_field(model_of(r), "dropout", cJSON_CreateNumber(0.1)); }
static void m_prefix(cJSON *r) { set_field(model_of(r), "continuing_subword_prefix", cJSON_CreateString("##")); }
static cJSON *added0(cJSON *r) { return cJSON_GetArrayItem(cJSON_GetObjectItem(r, "added_tokens"), 0); }
static void m_added_id(cJSON *r) { set_field(added0(r), "id", cJSON_CreateNumber(5000)); }
static void m_added_dup(cJSON *r) {
    cJSON *a = cJSON_GetObjectItem(r, "added_tokens");
    set_field(cJSON_GetArrayItem(a, 1), "content", cJSON_CreateString(cJSON_GetObjectItem(added0(r), "content")->valuestring));
}
static void m_added_empty(cJSON *r) { set_field(added0(r), "content", cJSON_CreateString("")); }
static void m_single_word(cJSON *r) { set_field(added0(r), "single_word", cJSON_CreateTrue()); }
static void m_missing_flag(cJSON *r) { cJSON_DeleteItemFromObjectCaseSensitive(added0(r), "normalized"); }
static void m_added_object(cJSON *r) { set_field(r, "added_tokens", cJSON_CreateObject()); }
static void m_nfkc(cJSON *r) {
    cJSON *n = cJSON_CreateObject();
    cJSON_AddStringToObject(n, "type", "NFKC");
    set_field(r, "normalizer", n);
}
static void m_decoder(cJSON *r) { set_field(r, "decoder", cJSON_CreateNull()); }
static void m_version(cJSON *r) { set_field(r, "version", cJSON_CreateString("2.0")); }

static void test_refusals(const char *dir, const char *tmp) {
    struct {
        const char *base, *what, *expect;
        Mutation m;
    } cases[] = {
        {"llama3", "model.type WordPiece", "model.type", m_wordpiece},
        {"llama3", "model.type Unigram", "model.type", m_unigram},
        {"llama3", "no model", "\"model\"", m_no_model},
        {"llama3", "a Metaspace pre-tokenizer (BPE that is not byte-level)", "pre_tokenizer", m_metaspace},
        {"gpt2", "no pre-tokenizer", "pre_tokenizer", m_pre_null},
        {"llama3", "a merge naming an unknown token", "model.merges[0]", m_merge_unknown},
        {"llama3", "a merge whose result is not in the vocabulary", "\"{}\" is not in model.vocab", m_merge_result},
        {"llama3", "merges mixing strings and pairs", "mixes", m_merge_mixed},
        {"options", "a merge string of three tokens", "model.merges[0]", m_merge_three},
        {"llama3", "a merge that is a number", "model.merges[0]", m_merge_number},
        {"llama3", "a duplicate id", "model.vocab: id 0", m_dup_id},
        {"llama3", "an id out of range", "model.vocab[\"a\"]", m_id_range},
        {"llama3", "a negative id", "model.vocab[\"a\"]", m_id_negative},
        {"llama3", "a fractional id", "model.vocab[\"a\"]", m_id_fraction},
        {"llama3", "an id that is a string", "model.vocab[\"a\"]", m_id_string},
        {"llama3", "a key twice", "twice", m_dup_key},
        {"llama3", "no token for the space byte", "byte 0x20", m_no_byte},
        {"llama3", "a vocabulary of one token", "model.vocab has 1", m_small_vocab},
        {"llama3", "an unknown pre-tokenizer pattern", "is unknown", m_regex_unknown},
        {"llama3", "a String pattern", "pattern", m_regex_string},
        {"llama3", "Split behavior Removed", "behavior", m_behavior},
        {"qwen2", "Split invert true", "invert", m_invert},
        {"qwen2", "ByteLevel with use_regex after a Split", "pretokenizers[1]", m_bytelevel_regex},
        {"llama3", "byte_fallback true", "byte_fallback", m_byte_fallback},
        {"llama3", "dropout 0.1", "dropout", m_dropout},
        {"llama3", "continuing_subword_prefix ##", "continuing_subword_prefix", m_prefix},
        {"llama3", "an added token with another id than tokenizers gives it", "added_tokens[0]", m_added_id},
        {"llama3", "two added tokens with one content", "twice", m_added_dup},
        {"llama3", "an empty added token", "content is empty", m_added_empty},
        {"llama3", "single_word true", "single_word", m_single_word},
        {"llama3", "an added token without its normalized flag", "normalized", m_missing_flag},
        {"llama3", "added_tokens as an object", "added_tokens", m_added_object},
        {"qwen2", "an NFKC normalizer", "normalizer", m_nfkc},
        {"llama3", "no decoder", "decoder", m_decoder},
        {"llama3", "version 2.0", "version", m_version},
    };
    char path[600], err[1024];
    snprintf(path, sizeof(path), "%s/bad.json", tmp);
    printf("  (the error messages below are expected)\n");
    int n = (int)(sizeof(cases) / sizeof(cases[0]));
    for (int k = 0; k < n; k++) {
        char base[512];
        snprintf(base, sizeof(base), "%s/%s.json", dir, cases[k].base);
        cJSON *root = read_json(base);
        if (root == NULL) {
            test_check(0, "read %s", base);
            continue;
        }
        cases[k].m(root);
        char *s = cJSON_PrintUnformatted(root);
        write_file(path, s, strlen(s));
        free(s);
        cJSON_Delete(root);
        HfTokenizer t;
        err[0] = 0;
        int rc = hft_load_checked(&t, path, err, sizeof(err));
        fprintf(stderr, "error: %s\n", err);
        test_check(rc != 0 && strstr(err, cases[k].expect) != NULL && strstr(err, path) != NULL,
                   "refused: %s (the message names the file and %s)", cases[k].what, cases[k].expect);
        if (rc == 0) hft_free(&t);
    }
    // files that are not a tokenizer.json at all
    struct {
        const char *what, *content, *expect;
    } raw[] = {
        {"an empty file", "", "not valid JSON"},
        {"a truncated file", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0,", "not valid JSON"},
        {"a JSON array", "[1, 2]", "top level"},
        {"JSON with garbage", "{\"model\": }", "not valid JSON"},
        {"an object followed by more data", "{\"model\": {}} {}", "data after the top-level value"},
    };
    for (size_t k = 0; k < sizeof(raw) / sizeof(raw[0]); k++) {
        write_file(path, raw[k].content, strlen(raw[k].content));
        HfTokenizer t;
        int rc = hft_load_checked(&t, path, err, sizeof(err));
        fprintf(stderr, "error: %s\n", err);
        test_check(rc != 0 && strstr(err, raw[k].expect) != NULL, "refused: %s", raw[k].what);
    }
    {
        unsigned char *buf;
        size_t n2;
        char base[512];
        snprintf(base, sizeof(base), "%s/llama3.json", dir);
        if (read_file(base, &buf, &n2) == 0) {
            write_file(path, buf, n2 / 2);
            HfTokenizer t;
            int rc = hft_load_checked(&t, path, err, sizeof(err));
            fprintf(stderr, "error: %s\n", err);
            test_check(rc != 0 && strstr(err, "not valid JSON") != NULL, "refused: llama3.json cut in half");
            // random corruption: loads or is refused, never crashes; what loads encodes and decodes
            uint64_t x = 88172645463325252ULL;
            int loaded = 0, refused = 0;
            for (int r = 0; r < 300; r++) {
                unsigned char *g = (unsigned char *)malloc(n2);
                memcpy(g, buf, n2);
                int flips = 1 + (int)(xorshift64(&x) % 4);
                for (int f = 0; f < flips; f++) g[xorshift64(&x) % n2] = (unsigned char)xorshift64(&x);
                write_file(path, g, n2);
                free(g);
                if (hft_load_checked(&t, path, err, sizeof(err)) == 0) {
                    BpeIds ids = {NULL, 0, 0};
                    const char *s = "Hello <|begin_of_text|> world's 123 \xff\xfe caf\xc3\xa9\n\n";
                    hft_encode(&t, (const unsigned char *)s, strlen(s), 1, &ids);
                    unsigned char out[4096];
                    hft_decode(&t, ids.ids, ids.n, out, sizeof(out));
                    bpe_ids_free(&ids);
                    hft_free(&t);
                    loaded++;
                } else {
                    refused++;
                }
            }
            test_check(loaded + refused == 300, "300 randomly corrupted copies of llama3.json: %d refused, %d load and "
                       "encode (none crashes)", refused, loaded);
            free(buf);
        }
    }
    HfTokenizer t;
    snprintf(path, sizeof(path), "%s/no_such_file.json", tmp);
    test_check(hft_load_checked(&t, path, err, sizeof(err)) != 0 && strstr(err, "cannot open") != NULL,
               "refused: a missing file (%s)", err);
    test_check(hft_load_checked(&t, tmp, err, sizeof(err)) != 0 && strstr(err, "cannot open") != NULL,
               "refused: a directory (%s)", err);
    snprintf(path, sizeof(path), "%s/bad.json", tmp);
    remove(path);
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : FIXTURE_DIR;
    // test_util.h helpers this test does not need
    (void)rel_l2_f64; (void)rel_l2_f32; (void)f32_to_bf16_bits; (void)bf16_bits_to_f32; (void)fill_uniform;

    char path[512];
    snprintf(path, sizeof(path), "%s/expected.json", dir);
    cJSON *expected = read_json(path);
    if (!test_check(expected != NULL, "read %s", path)) return test_summary();
    unsigned char *text;
    size_t ntext;
    if (!test_check(read_file(TEXT_FILE, &text, &ntext) == 0, "read %s", TEXT_FILE)) return test_summary();
    printf("  (fixtures from tokenizers %s)\n", cJSON_GetObjectItem(expected, "tokenizers_version")->valuestring);
    char tmp[] = "/tmp/test_hf_tokenizer_XXXXXX";
    if (!test_check(mkdtemp(tmp) != NULL, "create a temporary directory")) return test_summary();

    const cJSON *spec;
    cJSON_ArrayForEach(spec, cJSON_GetObjectItem(expected, "tokenizers")) test_fixture_tokenizer(dir, spec, text, ntext);
    printf("  (encode speed, slowest tokenizer: %.1f MB/s)\n", g_min_mbps);
    test_probes(cJSON_GetObjectItem(expected, "probes"));
    test_gpt2_files(tmp, expected, text, ntext);
    test_large_vocab(tmp);
    test_adapter_and_bytes(dir);
    test_refusals(dir, tmp);

    rmdir(tmp);
    fflush(stderr);
    free(text);
    cJSON_Delete(expected);
    return test_summary();
}
