/*
test_llmc.c - CPU tests of the host-side llmc/ modules: utils.h (checked calls, atomic
writer), rand.h (bit-exact against PyTorch), tokenizer.h, shard.h + dataloader.h (llm.c's
data order, shuffling, 64-bit offsets, short eval shards, uint32 shards, resume state) and
gpt2.h (parameter table, model files), checkpoint.h (state files, DONE markers, latest
complete checkpoint), rope.h (inverse frequencies and cos/sin tables against values computed
independently in Python, the Llama 3.1 frequency bands, refused parameters). Every reader is
also fed malformed files and must reject them with the right message. The checkpoint protocol and the trainer's flags: test_train_host.c.

Build and run from the repository root (it reads data/ and test/fixtures/):
    gcc -O2 -std=c11 -Wall -Wextra -Werror -Illmc -Itest -Idata test/test_llmc.c -lm -o build/test_llmc
    build/test_llmc [rand_fixture.bin]     (default test/fixtures/rand_torch.bin)
The last line is "N passed, M failed"; the exit code is 0 only if nothing failed.
Temporary files go to a fresh /tmp/test_llmc_XXXXXX directory, removed at the end.
*/
#define _POSIX_C_SOURCE 200809L
#include "../llmc/checkpoint.h"
#include "../llmc/dataloader.h"
#include "../llmc/gpt2.h"
#include "../llmc/rand.h"
#include "../llmc/rope.h"
#include "../llmc/shard.h"
#include "../llmc/tokenizer.h"
#include "../llmc/utils.h"
#include "test_util.h"
#include "test_files.h"

#include <sys/stat.h>

#define VAL_BIN "data/tiny_shakespeare_val.bin"
#define TRAIN_BIN "data/tiny_shakespeare_train.bin"
#define TOKENIZER_BIN "data/gpt2_tokenizer.bin"
#define RAND_FIXTURE "test/fixtures/rand_torch.bin"
#define RAND_FIXTURE_MAGIC 20261202

// ----------------------------------------------------------------------------
// helpers

static int file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static int64_t file_size_of(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? (int64_t)sb.st_size : -1;
}

// the error text to append to a check's description, only when the check failed
static const char *why(int ok, const char *err) {
    static char buf[1100];
    if (ok) return "";
    snprintf(buf, sizeof(buf), ": %.1000s", err);
    return buf;
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

// ----------------------------------------------------------------------------
// utils.h

static void test_utils(void) {
    printf("-- utils.h\n");
    char path[256], tmp[300], err[512];
    tmp_path(path, sizeof(path), "atomic.txt");
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);

    test_check(atomic_write_file(path, "hello", 5, 0, err, sizeof(err)) == 0 &&
               file_size_of(path) == 5 && !file_exists(tmp),
               "atomic_write_file writes the file and leaves no .tmp behind");
    {
        AtomicFile af;
        int ok = atomic_file_open(&af, path, 1) == 0;
        atomic_file_write(&af, "replacement", 11);
        size_t n;
        unsigned char *before = read_all(path, &n);
        int old_visible = before != NULL && n == 5 && memcmp(before, "hello", 5) == 0;
        free(before);
        ok = ok && atomic_file_commit(&af) == 0;
        unsigned char *after = read_all(path, &n);
        test_check(ok && old_visible && after != NULL && n == 11 && memcmp(after, "replacement", 11) == 0 &&
                   !file_exists(tmp),
                   "atomic replace: readers see the old file until the (fsync'ed) commit, then the new one");
        free(after);
    }
    {
        AtomicFile af;
        char other[256];
        tmp_path(other, sizeof(other), "aborted.txt");
        char other_tmp[300];
        snprintf(other_tmp, sizeof(other_tmp), "%s.tmp", other);
        int ok = atomic_file_open(&af, other, 0) == 0 && file_exists(other_tmp);
        atomic_file_write(&af, "x", 1);
        atomic_file_abort(&af);
        test_check(ok && !file_exists(other) && !file_exists(other_tmp),
                   "atomic_file_abort removes the temporary and creates nothing");
    }
    {
        char bad[256];
        tmp_path(bad, sizeof(bad), "no/such/dir/file.bin");
        int rc = atomic_write_file(bad, "x", 1, 0, err, sizeof(err));
        test_check(rc != 0 && contains(err, "cannot create") && contains(err, "file.bin.tmp"),
                   "atomic writer reports an unwritable path: %s", err);
    }
    {
        // 64-bit positions through the exiting helpers (seeking past the end writes nothing)
        char sparse[256];
        tmp_path(sparse, sizeof(sparse), "seek.bin");
        FILE *fp = fopen_check(sparse, "wb");
        int named = strcmp(llmc_file_path(fp), sparse) == 0;
        int64_t far = (int64_t)3 << 30;
        fseek_check(fp, far, SEEK_SET);
        int64_t pos = ftell_check(fp);
        fclose_check(fp);
        test_check(named && pos == far, "fseek_check/ftell_check handle offset 3 GiB; fopen_check "
                   "remembers the path for messages");
        fp = fopen_check(sparse, "rb");
        llmc_untrack_file(fp);
        test_check(strcmp(llmc_file_path(fp), "(unnamed stream)") == 0, "an untracked stream is reported unnamed");
        fclose(fp);
        remove(sparse);
        fp = fopen_check(path, "rb");
        char buf[11];
        fread_check(buf, 1, 11, fp);
        int64_t size = 0;
        int ok = llmc_file_size(fp, &size) == 0 && size == 11 && ftell_check(fp) == 11;
        fclose_check(fp);
        test_check(ok && memcmp(buf, "replacement", 11) == 0, "fread_check and llmc_file_size");
    }
    {
        void *p = malloc_check(0);
        uint64_t out = 0;
        test_check(p != NULL && llmc_mul_u64(1ull << 32, 1ull << 31, &out) == 0 &&
                   out == (1ull << 63) && llmc_mul_u64(1ull << 32, 1ull << 32, &out) != 0,
                   "malloc_check(0) and overflow-checked 64-bit multiply");
        free(p);
    }
    {
        // fopen accepts a directory and its "size" reads as 2^63 - 1: every reader must say what it is
        ModelFileInfo info;
        TrainingState st;
        Tokenizer tok;
        void *params = NULL;
        char e1[512], e2[512], e3[512], e4[512];
        FILE *fp = llmc_fopen_read_checked(tmp_dir, "thing", e1, sizeof(e1));
        int ok = fp == NULL && contains(e1, "cannot open thing") && contains(e1, "Is a directory") &&
                 model_read_checked(tmp_dir, &info, &params, 0, e2, sizeof(e2)) != 0 &&
                 contains(e2, "cannot open model file") && contains(e2, "Is a directory") &&
                 state_read_checked(tmp_dir, 10, &st, e3, sizeof(e3)) != 0 && contains(e3, "Is a directory") &&
                 tokenizer_init_checked(&tok, tmp_dir, e4, sizeof(e4)) != 0 && contains(e4, "Is a directory") &&
                 !contains(e2, "9223372036854775807");
        test_check(ok, "a directory given as a model, state or tokenizer file: '%s'", e2);
    }
    remove(path);
}

// ----------------------------------------------------------------------------
// rand.h against PyTorch

typedef struct {
    const unsigned char *p;
    size_t n, pos;
    int ok;
} Cursor;

static const void *take(Cursor *c, size_t bytes) {
    if (!c->ok || bytes > c->n - c->pos) { c->ok = 0; return NULL; }
    const void *p = c->p + c->pos;
    c->pos += bytes;
    return p;
}

static int64_t take_i64(Cursor *c) { int64_t v = 0; const void *p = take(c, 8); if (p) memcpy(&v, p, 8); return v; }
static double take_f64(Cursor *c) { double v = 0; const void *p = take(c, 8); if (p) memcpy(&v, p, 8); return v; }
static int32_t take_i32(Cursor *c) { int32_t v = 0; const void *p = take(c, 4); if (p) memcpy(&v, p, 4); return v; }

static const char *kernel_name(int k) { return k == TORCH_CPU_KERNEL_AVX2 ? "avx2" : "default"; }

static void test_rand(const char *fixture_path) {
    printf("-- rand.h (fixture %s)\n", fixture_path);
    {
        mt19937_state rng;
        manual_seed(&rng, 5489);
        uint32_t first = randint32(&rng);
        for (int i = 1; i < 9999; i++) randint32(&rng);
        test_check(first == 3499211612u && randint32(&rng) == 4123659995u,
                   "mt19937(5489): first draw 3499211612 and 10000th draw 4123659995 (C++ std::mt19937)");
    }
    size_t n;
    unsigned char *buf = read_all(fixture_path, &n);
    int32_t header[256];
    if (!test_check(buf != NULL && n >= 1024, "load %s", fixture_path)) { free(buf); return; }
    memcpy(header, buf, sizeof(header));
    if (!test_check(header[0] == RAND_FIXTURE_MAGIC && header[1] == 1, "fixture header (magic %d, version %d)",
                    (int)header[0], (int)header[1])) { free(buf); return; }
    Cursor c = {buf, n, 1024, 1};
    int n_normal = header[2], n_uniform = header[3], n_randint = header[4], n_perm = header[5];

    for (int k = 0; k < n_normal && c.ok; k++) {
        int64_t seed = take_i64(&c), count = take_i64(&c), calls = take_i64(&c);
        double mean = take_f64(&c), stdv = take_f64(&c);
        int kernel = take_i32(&c);
        take_i32(&c);
        if (!c.ok || count < 1 || calls < 1 || count * calls > (1 << 24)) { c.ok = 0; break; }
        const unsigned char *ref = (const unsigned char *)take(&c, (size_t)(count * calls) * 4);
        if (ref == NULL) break;
        float *got = (float *)malloc((size_t)(count * calls) * sizeof(float));
        mt19937_state rng;
        manual_seed(&rng, (uint64_t)seed);
        for (int64_t call = 0; call < calls; call++)
            normal_with_kernel_(got + call * count, (size_t)count, mean, stdv, &rng, (TorchCpuKernel)kernel);
        size_t bad = 0, first_bad = 0;
        for (size_t i = 0; i < (size_t)(count * calls); i++) {
            uint32_t r;
            memcpy(&r, ref + 4 * i, 4);
            if (f32_bits(got[i]) != r && bad++ == 0) first_bad = i;
        }
        test_check(bad == 0, "normal_ bit-exact: seed %lld, n %lld x %lld call(s), mean %g std %g, %s kernel%s",
                   (long long)seed, (long long)count, (long long)calls, mean, stdv, kernel_name(kernel),
                   bad ? " MISMATCH" : "");
        if (bad) {
            float want;
            memcpy(&want, ref + 4 * first_bad, 4);
            printf("      %zu differ, first at %zu: got %.9g, PyTorch %.9g\n", bad, first_bad,
                   got[first_bad], want);
        }
        free(got);
    }
    for (int k = 0; k < n_uniform && c.ok; k++) {
        int64_t seed = take_i64(&c), count = take_i64(&c);
        double from = take_f64(&c), to = take_f64(&c);
        int kernel = take_i32(&c);
        take_i32(&c);
        if (!c.ok || count < 1 || count > (1 << 24)) { c.ok = 0; break; }
        const unsigned char *ref = (const unsigned char *)take(&c, (size_t)count * 4);
        if (ref == NULL) break;
        float *got = (float *)malloc((size_t)count * sizeof(float));
        mt19937_state rng;
        manual_seed(&rng, (uint64_t)seed);
        uniform_with_kernel_(got, (size_t)count, (float)from, (float)to, &rng, (TorchCpuKernel)kernel);
        int same = memcmp(got, ref, (size_t)count * 4) == 0;
        if (from == 0.0 && to == 1.0) {  // torch.rand: also one randfloat32 per element
            manual_seed(&rng, (uint64_t)seed);
            for (int64_t i = 0; i < count; i++) got[i] = randfloat32(&rng);
            same = same && memcmp(got, ref, (size_t)count * 4) == 0;
        }
        test_check(same, "%s bit-exact: seed %lld, n %lld, [%g, %g), %s kernel",
                   from == 0.0 && to == 1.0 ? "torch.rand (uniform_, randfloat32)" : "uniform_",
                   (long long)seed, (long long)count, from, to, kernel_name(kernel));
        free(got);
    }
    for (int k = 0; k < n_randint && c.ok; k++) {
        int64_t seed = take_i64(&c), count = take_i64(&c);
        if (!c.ok || count < 1 || count > (1 << 24)) { c.ok = 0; break; }
        const unsigned char *ref = (const unsigned char *)take(&c, (size_t)count * 4);
        if (ref == NULL) break;
        mt19937_state rng;
        manual_seed(&rng, (uint64_t)seed);
        int same = 1;
        for (int64_t i = 0; i < count; i++) {
            uint32_t want;
            memcpy(&want, ref + 4 * i, 4);
            same = same && randint32(&rng) == want;
        }
        test_check(same, "randint32 equals PyTorch's raw draws: seed %lld, %lld draws", (long long)seed,
                   (long long)count);
    }
    for (int k = 0; k < n_perm && c.ok; k++) {
        int64_t seed = take_i64(&c), count = take_i64(&c);
        if (!c.ok || count < 1 || count > (1 << 24)) { c.ok = 0; break; }
        const unsigned char *ref = (const unsigned char *)take(&c, (size_t)count * 4);
        if (ref == NULL) break;
        int *perm = (int *)malloc((size_t)count * sizeof(int));
        mt19937_state rng;
        manual_seed(&rng, (uint64_t)seed);
        init_identity_permutation(perm, (int)count);
        random_permutation(perm, (int)count, &rng);
        test_check(memcmp(perm, ref, (size_t)count * 4) == 0,
                   "random_permutation equals the Python rendering of llm.c's on PyTorch draws: seed %lld, n %lld",
                   (long long)seed, (long long)count);
        free(perm);
    }
    test_check(c.ok && c.pos == c.n, "fixture parsed completely (%d normal, %d uniform, %d randint, %d permutation cases)",
               n_normal, n_uniform, n_randint, n_perm);
    free(buf);

    {
        // llm.c's on-disk generator: round trip mid-stream, and corrupt fields rejected
        mt19937_state a, b;
        manual_seed(&a, 43);
        for (int i = 0; i < 1000; i++) randint32(&a);
        unsigned char bytes[MT19937_SERIALIZED_BYTES];
        mt19937_serialize(&a, bytes);
        int ok = mt19937_deserialize(&b, bytes) == 0;
        for (int i = 0; i < 2000 && ok; i++) ok = randint32(&a) == randint32(&b);
        mt19937_state fresh;
        manual_seed(&fresh, 1);
        mt19937_serialize(&fresh, bytes);
        ok = ok && mt19937_deserialize(&b, bytes) == 0 && randint32(&b) == randint32(&fresh);
        test_check(ok && MT19937_SERIALIZED_BYTES == 2520,
                   "mt19937 state serialises to llm.c's 2520-byte struct and resumes the same stream");
        unsigned char bad[MT19937_SERIALIZED_BYTES];
        int32_t v;
        memcpy(bad, bytes, sizeof(bad)); v = 0; memcpy(bad + 8, &v, 4);
        int r1 = mt19937_deserialize(&b, bad);
        memcpy(bad, bytes, sizeof(bad)); v = 700; memcpy(bad + 12, &v, 4);
        int r2 = mt19937_deserialize(&b, bad);
        memcpy(bad, bytes, sizeof(bad)); v = 12345; memcpy(bad + 16 + 4 * 624 + 4, &v, 4);
        int r3 = mt19937_deserialize(&b, bad);
        test_check(r1 != 0 && r2 != 0 && r3 != 0, "mt19937 state with bad left / next / MATRIX_A is rejected");
    }
}

// ----------------------------------------------------------------------------
// tokenizer.h

static void expect_tokenizer_rejects(const char *path, const unsigned char *data, size_t n,
                                     const char *what, const char *message) {
    char err[512] = "";
    Tokenizer t;
    memset(&t, 0, sizeof(t));
    int rc = write_bytes(path, data, n) ? tokenizer_init_checked(&t, path, err, sizeof(err)) : 0;
    test_check(rc != 0 && t.offsets == NULL && contains(err, message) && contains(err, path),
               "tokenizer rejects %s: %s", what, err);
    if (rc == 0) tokenizer_free(&t);
}

static void test_tokenizer(void) {
    printf("-- tokenizer.h\n");
    char err[512] = "";
    Tokenizer tok;
    int ok = tokenizer_init_checked(&tok, TOKENIZER_BIN, err, sizeof(err)) == 0;
    test_check(ok && tok.init_ok && tok.version == 2 && tok.vocab_size == 50257 && tok.eot_token == 50256,
               "load %s (version 2, 50257 tokens, eot 50256)%s", TOKENIZER_BIN, why(ok, err));
    if (!ok) return;
    struct { uint32_t id; const char *bytes; size_t len; } known[] = {
        {0, "!", 1}, {198, "\n", 1}, {220, " ", 1}, {15496, "Hello", 5}, {188, "\0", 1},
        {50256, "<|endoftext|>", 13},
    };
    int same = 1;
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
        size_t len;
        const unsigned char *p = tokenizer_decode(&tok, known[i].id, &len);
        same = same && p != NULL && len == known[i].len && memcmp(p, known[i].bytes, len) == 0;
    }
    size_t len = 99;
    test_check(same && tokenizer_decode(&tok, 50257, &len) == NULL && len == 0,
               "decode: ids 0, 198, 220, 15496, 188 (a NUL byte), 50256; id 50257 gives NULL");
    {
        uint32_t ids[3] = {15496, 220, 50256};
        unsigned char out[32];
        size_t m = tokenizer_decode_ids(&tok, ids, 3, out, sizeof(out));
        test_check(m == 19 && memcmp(out, "Hello <|endoftext|>", 19) == 0 &&
                   tokenizer_decode_ids(&tok, ids, 3, out, 10) == (size_t)-1,
                   "decode_ids concatenates and refuses a too small buffer");
    }
    {
        char path[256];
        tmp_path(path, sizeof(path), "printed.txt");
        FILE *fp = fopen(path, "wb");
        size_t w1 = tokenizer_print_token(fp, &tok, 15496);  // "Hello"
        size_t w2 = tokenizer_print_token(fp, &tok, 189);    // lone 0x01: skipped
        size_t w3 = tokenizer_print_token(fp, &tok, 198);    // "\n": whitespace, printed
        size_t w4 = tokenizer_print_token(fp, &tok, 60000);  // out of range: nothing
        fclose(fp);
        size_t n;
        unsigned char *got = read_all(path, &n);
        test_check(w1 == 5 && w2 == 0 && w3 == 1 && w4 == 0 && got && n == 6 && memcmp(got, "Hello\n", 6) == 0,
                   "print_token: llm.c's safe_printf rule (a lone control byte is skipped)");
        free(got);
        remove(path);
        char esc[64];
        const unsigned char raw[] = {'a', '\n', 0x01, '\\', 0xC3, 0xA9, '\t', 0};
        size_t k = token_escape(raw, sizeof(raw), esc, sizeof(esc));
        char small[6];
        size_t ks = token_escape(raw, sizeof(raw), small, sizeof(small));
        test_check(k == strlen(esc) && strcmp(esc, "a\\n\\x01\\\\\\xC3\\xA9\\t\\x00") == 0 &&
                   strcmp(small, "a\\n") == 0 && ks == 3,
                   "token_escape: \\n \\t \\\\ and \\xNN, truncated at whole escapes (\"%s\")", esc);
    }
    {
        // round trip of a small tokenizer through the writer (with a NUL byte token)
        char path[256];
        tmp_path(path, sizeof(path), "small_tok.bin");
        const unsigned char bytes[] = {'a', 'b', 'c', 0, 'x', 'y', 'z'};
        const uint32_t offsets[] = {0, 1, 3, 4, 7};
        Tokenizer t2;
        int rt = tokenizer_write_checked(path, 4, 3, offsets, bytes, err, sizeof(err)) == 0 &&
                 tokenizer_init_checked(&t2, path, err, sizeof(err)) == 0;
        rt = rt && t2.vocab_size == 4 && t2.eot_token == 3 && memcmp(t2.offsets, offsets, sizeof(offsets)) == 0 &&
             memcmp(t2.bytes, bytes, sizeof(bytes)) == 0 && file_size_of(path) == 1024 + 4 + 7;
        if (rt) tokenizer_free(&t2);
        test_check(rt, "tokenizer write + read round trip (4 tokens, one of them a NUL byte)");
        const uint32_t bad_offsets[] = {0, 1, 1, 4, 7};
        test_check(tokenizer_write_checked(path, 4, 3, bad_offsets, bytes, err, sizeof(err)) != 0 &&
                   contains(err, "token 1 has 0 bytes"), "tokenizer writer rejects an empty token: %s", err);
        test_check(tokenizer_write_checked(path, 4, 4, offsets, bytes, err, sizeof(err)) != 0 &&
                   contains(err, "eot id 4"), "tokenizer writer rejects eot outside the vocabulary");
        remove(path);
    }
    // malformed files, made from the real one
    size_t nraw;
    unsigned char *raw = read_all(TOKENIZER_BIN, &nraw);
    if (raw != NULL) {
        char path[256];
        tmp_path(path, sizeof(path), "bad_tok.bin");
        unsigned char *g = (unsigned char *)malloc(nraw + 1);
        struct { const char *what; int word; uint32_t value; long len_delta; long zero_byte; const char *msg; } bad[] = {
            {"bad magic", 0, 20240327, 0, -1, "bad magic 20240327"},
            {"version 3", 1, 3, 0, -1, "bad version 3"},
            {"version 0", 1, 0, 0, -1, "bad version 0"},
            {"vocab_size 0", 2, 0, 0, -1, "bad vocab_size 0"},
            {"vocab_size beyond what the file can hold", 2, 1000000, 0, -1, "bad vocab_size 1000000"},
            {"vocab_size larger than the tokens present", 2, 50258, 0, -1, "truncated at token 50257"},
            {"eot outside the vocabulary", 3, 50257, 0, -1, "eot id 50257 is outside"},
            {"truncated body", -1, 0, -200000, -1, "truncated"},
            {"last token cut short", -1, 0, -1, -1, "truncated inside token 50256"},
            {"trailing bytes", -1, 0, 1, -1, "1 unexpected bytes after the last token"},
            {"a zero-length token", -1, 0, 0, 1024, "token 0 has length 0"},
        };
        for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
            memcpy(g, raw, nraw);
            g[nraw] = 'x';
            if (bad[k].word >= 0) memcpy(g + 4 * bad[k].word, &bad[k].value, 4);
            if (bad[k].zero_byte >= 0) g[bad[k].zero_byte] = 0;
            expect_tokenizer_rejects(path, g, (size_t)((long)nraw + bad[k].len_delta), bad[k].what, bad[k].msg);
        }
        expect_tokenizer_rejects(path, raw, 100, "a truncated header", "truncated header (file is 100 bytes");
        // version 1 means eot 50256: fine with the real vocabulary, not with a tiny one
        memcpy(g, raw, nraw);
        uint32_t v1 = 1, junk = 7;
        memcpy(g + 4, &v1, 4);
        memcpy(g + 12, &junk, 4);  // [3] is not read in version 1
        Tokenizer t3;
        int ok1 = write_bytes(path, g, nraw) && tokenizer_init_checked(&t3, path, err, sizeof(err)) == 0 &&
                  t3.version == 1 && t3.eot_token == 50256;
        if (ok1) tokenizer_free(&t3);
        test_check(ok1, "version 1 file loads with eot 50256");
        const unsigned char tiny_v1[1024 + 4] = {0};
        unsigned char tv[sizeof(tiny_v1)];
        memcpy(tv, tiny_v1, sizeof(tv));
        uint32_t hdr[3] = {TOKENIZER_MAGIC, 1, 2};
        memcpy(tv, hdr, sizeof(hdr));
        tv[1024] = 1; tv[1025] = 'a'; tv[1026] = 1; tv[1027] = 'b';
        expect_tokenizer_rejects(path, tv, sizeof(tv), "version 1 with 2 tokens (eot 50256 outside)",
                                 "eot id 50256 is outside the vocabulary of 2");
        free(g);
        free(raw);
        remove(path);
    }
    {
        char missing[256];
        tmp_path(missing, sizeof(missing), "no_tokenizer.bin");
        Tokenizer t4;
        int rc = tokenizer_init_checked(&t4, missing, err, sizeof(err));
        test_check(rc != 0 && contains(err, "cannot open tokenizer") && contains(err, missing),
                   "missing tokenizer file: %s", err);
        printf("  (a WARNING about the missing tokenizer file is expected)\n");
        fflush(stdout);
        tokenizer_init(&t4, missing);  // llm.c behaviour: a warning, no exit
        test_check(t4.init_ok == 0 && tokenizer_decode(&t4, 0, &len) == NULL,
                   "tokenizer_init on a missing file warns and leaves init_ok = 0");
    }
    tokenizer_free(&tok);
}

// ----------------------------------------------------------------------------
// shard.h + dataloader.h

// The tokens of rank r's batch of sample idx, laid out like llm.c: returns 1 if inputs and
// targets of loader equal them.
static int batch_matches(const DataLoader *loader, const uint32_t *tokens, size_t ntok, size_t idx, int rank) {
    size_t bt = loader->B * loader->T;
    size_t start = idx * (size_t)loader->num_processes * bt + (size_t)rank * bt;
    for (size_t i = 0; i < bt; i++) {
        int want_in = start + i < ntok ? (int)tokens[start + i] : 0;
        int want_tgt = start + i + 1 < ntok ? (int)tokens[start + i + 1] : DATALOADER_IGNORE_TARGET;
        if (loader->inputs[i] != want_in || loader->targets[i] != want_tgt) return 0;
    }
    return 1;
}

static void expect_loader_rejects(const char *pattern, size_t B, size_t T, int nproc, int shuffle,
                                  int partial, const char *what, const char *msg1, const char *msg2) {
    DataLoader loader;
    char err[1024] = "";
    int rc = dataloader_init_checked(&loader, pattern, B, T, 0, nproc, shuffle, partial, err, sizeof(err));
    test_check(rc != 0 && contains(err, msg1) && (msg2 == NULL || contains(err, msg2)),
               "data loader rejects %s: %s", what, err);
    if (rc == 0) dataloader_free(&loader);
}

// Writes a shard whose header words may be overridden and length adjusted (for bad files).
static int write_raw_shard(const char *path, int32_t magic, int32_t version, int32_t ntok_header,
                           size_t ntok_written, int token_bytes, size_t extra_bytes) {
    size_t n = 1024 + ntok_written * (size_t)token_bytes + extra_bytes;
    unsigned char *buf = (unsigned char *)calloc(n, 1);
    int32_t h[3] = {magic, version, ntok_header};
    memcpy(buf, h, sizeof(h));
    for (size_t i = 0; i < ntok_written; i++) buf[1024 + i * (size_t)token_bytes] = (unsigned char)(i & 0x7F);
    int ok = write_bytes(path, buf, n);
    free(buf);
    return ok;
}

// Token ids against the model's vocabulary: each shard checked once, when it is opened.
static void test_vocab_check(void) {
    char err[1024] = "", p0[256], p1[256], pattern[256];
    tmp_path(p0, sizeof(p0), "vocab_0.bin");
    tmp_path(p1, sizeof(p1), "vocab_1.bin");
    tmp_path(pattern, sizeof(pattern), "vocab_*.bin");
    uint32_t ids[600];
    for (int i = 0; i < 600; i++) ids[i] = (uint32_t)(i * 37 % 50257);
    ids[123] = 50256;
    shard_write_checked(p0, ids, 300, SHARD_VERSION, err, sizeof(err));
    ids[300 + 77] = 50300;  // shard 1: one id above GPT-2's vocabulary, inside its padding
    shard_write_checked(p1, ids + 300, 300, SHARD_VERSION, err, sizeof(err));
    {
        FILE *fp;
        ShardInfo info;
        uint32_t max_id = 0;
        int64_t at = -1;
        int ok = shard_open_checked(p1, &fp, &info, err, sizeof(err)) == 0 &&
                 shard_max_token_checked(fp, &info, p1, &max_id, &at, err, sizeof(err)) == 0;
        if (fp) fclose(fp);
        test_check(ok && max_id == 50300 && at == 77, "shard_max_token: id 50300 at token 77 (got %u at %lld)%s", max_id,
                   (long long)at, why(ok, err));
    }
    DataLoader loader;
    int ok = dataloader_init_checked(&loader, pattern, 2, 8, 0, 1, 0, 0, err, sizeof(err)) == 0 &&
             dataloader_set_vocab_checked(&loader, 50257, err, sizeof(err)) == 0;
    test_check(ok, "vocabulary 50257: the first shard (ids < 50257) passes%s", why(ok, err));
    // the second shard fails when the loader first opens it, naming it, the position and the id
    int rc = 0;
    for (int k = 0; ok && k < 40 && rc == 0; k++) rc = dataloader_next_batch_checked(&loader, err, sizeof(err));
    test_check(rc != 0 && contains(err, p1) && contains(err, "token 77 has id 50300") && contains(err, "50257 tokens"),
               "vocabulary 50257: the second shard is rejected when it is opened: %s", err);
    if (ok) dataloader_free(&loader);
    ok = dataloader_init_checked(&loader, pattern, 2, 8, 0, 1, 1, 0, err, sizeof(err)) == 0 &&
         dataloader_set_vocab_checked(&loader, 50304, err, sizeof(err)) == 0;
    for (int k = 0; ok && k < 80; k++) ok = dataloader_next_batch_checked(&loader, err, sizeof(err)) == 0;
    test_check(ok, "vocabulary 50304 (GPT-2's padded): both shards pass, shuffled, over two epochs%s", why(ok, err));
    if (ok) dataloader_free(&loader);
    // a uint32 shard with id INT_MAX: rejected by the check, not by an overflow later
    uint32_t big[300];
    for (int i = 0; i < 300; i++) big[i] = (uint32_t)i;
    big[200] = 0x7FFFFFFF;
    shard_write_checked(p0, big, 300, SHARD_VERSION_LLAMA3, err, sizeof(err));
    rc = dataloader_init_checked(&loader, p0, 2, 8, 0, 1, 0, 0, err, sizeof(err));
    int rc2 = rc == 0 ? dataloader_set_vocab_checked(&loader, 128256, err, sizeof(err)) : 0;
    test_check(rc == 0 && rc2 != 0 && contains(err, "token 200 has id 2147483647") && contains(err, "128256 tokens"),
               "a v7 shard with id INT_MAX against a vocabulary of 128256: %s", err);
    if (rc == 0) dataloader_free(&loader);
    remove(p0);
    remove(p1);
}

static void test_dataloader(void) {
    printf("-- shard.h + dataloader.h\n");
    char err[1024] = "";
    uint32_t *val = NULL, *train = NULL;
    size_t nval = 0, ntrain = 0;
    int have = shard_read_checked(VAL_BIN, &val, &nval, NULL, err, sizeof(err)) == 0 &&
               shard_read_checked(TRAIN_BIN, &train, &ntrain, NULL, err, sizeof(err)) == 0;
    if (!test_check(have && nval == 32768 && ntrain == 305260, "read %s and %s%s", VAL_BIN, TRAIN_BIN, why(have, err)))
        return;

    // ---- offsets past 2^31, as int64 (the real > 2 GiB read is the sparse-file test below)
    {
        int64_t sample = 100000, B = 64, T = 1024, nproc = 8, rank = 7;
        int64_t want2 = 1024 + (sample * nproc * B * T + rank * B * T) * 2;
        int64_t want4 = 1024 + (sample * nproc * B * T + rank * B * T) * 4;
        int64_t got2 = dataloader_sample_offset(sample, 8, 64, 1024, 7, 2);
        int64_t got4 = dataloader_sample_offset(sample, 8, 64, 1024, 7, 4);
        // the last full sample of the largest possible uint32 shard (2^31 - 1 tokens)
        size_t full = shard_num_full_batches(0x7FFFFFFF, 64, 1024, 8);
        int64_t last = dataloader_sample_offset((int64_t)full - 1, 8, 64, 1024, 7, 4);
        test_check(got2 == want2 && got2 == 104858518528LL && got4 == want4 && want2 > (1LL << 31) &&
                   full == 4095 && last == 1024 + (4094LL * 524288 + 7 * 65536) * 4 &&
                   last + (64 * 1024 + 1) * 4 <= 1024 + 0x7FFFFFFFLL * 4,
                   "sample offsets in int64: %lld (> 2^31), uint32 %lld; 2^31-1 tokens hold %zu samples, the "
                   "last one ends inside the file", (long long)got2, (long long)got4, full);
        test_check(shard_num_full_batches(257, 4, 64, 1) == 1 && shard_num_full_batches(256, 4, 64, 1) == 0 &&
                   shard_num_partial_batches(256, 4, 64, 1) == 1 && shard_num_partial_batches(258, 4, 64, 1) == 2 &&
                   shard_num_partial_batches(1, 4, 64, 1) == 0,
                   "full / partial batch counts: 257 tokens = 1 full batch of 4x64, 256 = 0 (+1 partial)");
    }

    // ---- val: in order, llm.c's layout
    {
        DataLoader loader;
        int ok = dataloader_init_checked(&loader, VAL_BIN, 4, 64, 0, 1, 0, 0, err, sizeof(err)) == 0;
        if (test_check(ok, "val loader B=4 T=64%s", why(ok, err))) {
            test_check(loader.num_batches == 127 && loader.num_full_batches == 127 && loader.num_tokens == 32768,
                       "val holds (32768-1)/256 = 127 batches (got %zu)", loader.num_batches);
            dataloader_next_batch(&loader);
            int first = 1;
            for (size_t i = 0; i < 256; i++)
                first = first && loader.inputs[i] == (int)val[i] && loader.targets[i] == (int)val[i + 1];
            test_check(first && loader.num_targets == 256,
                       "first val batch = the first B*T+1 tokens of the file (inputs 0..255, targets 1..256)");
            int all = 1;
            for (size_t k = 1; k < 127; k++) {
                dataloader_next_batch(&loader);
                all = all && batch_matches(&loader, val, nval, k, 0);
            }
            dataloader_next_batch(&loader);  // past the end: a new epoch
            test_check(all && batch_matches(&loader, val, nval, 0, 0),
                       "all 127 val batches in order, then the loader wraps to batch 0");
            for (int k = 0; k < 5; k++) dataloader_next_batch(&loader);
            dataloader_reset(&loader);
            dataloader_next_batch(&loader);
            int after_reset = batch_matches(&loader, val, nval, 0, 0);
            dataloader_resume(&loader, 0, 42);
            dataloader_next_batch(&loader);
            test_check(after_reset && batch_matches(&loader, val, nval, 42, 0) && loader.current_sample_idx == 43,
                       "reset goes back to batch 0; resume(0, 42) continues with batch 42");
            dataloader_free(&loader);
        }
        // two ranks: sample idx spans 2*B*T tokens, rank r reads at + r*B*T
        DataLoader r0, r1;
        ok = dataloader_init_checked(&r0, VAL_BIN, 2, 32, 0, 2, 0, 0, err, sizeof(err)) == 0 &&
             dataloader_init_checked(&r1, VAL_BIN, 2, 32, 1, 2, 0, 0, err, sizeof(err)) == 0;
        if (test_check(ok, "val loaders for rank 0 and 1 of 2%s", why(ok, err))) {
            int same = r0.num_batches == r1.num_batches && r0.num_batches == (32768 - 1) / 128;
            for (size_t k = 0; k < r0.num_batches && same; k++) {
                dataloader_next_batch(&r0);
                dataloader_next_batch(&r1);
                same = batch_matches(&r0, val, nval, k, 0) && batch_matches(&r1, val, nval, k, 1);
            }
            test_check(same, "2 ranks: rank r's batch k starts at token k*2*B*T + r*B*T (%zu batches each)",
                       r0.num_batches);
            dataloader_free(&r0);
            dataloader_free(&r1);
        }
    }

    // ---- train with shuffling: llm.c's order, deterministic, every sample once per epoch
    {
        DataLoader a, b, other_rank;
        int ok = dataloader_init_checked(&a, TRAIN_BIN, 4, 64, 0, 1, 1, 0, err, sizeof(err)) == 0 &&
                 dataloader_init_checked(&b, TRAIN_BIN, 4, 64, 0, 1, 1, 0, err, sizeof(err)) == 0 &&
                 dataloader_init_checked(&other_rank, TRAIN_BIN, 4, 64, 1, 2, 1, 0, err, sizeof(err)) == 0;
        if (test_check(ok, "shuffled train loaders%s", why(ok, err))) {
            size_t ns = a.num_batches;
            // the expected order, independently: mt19937(42), one shard (no draws), then the
            // sample permutation; the next epoch permutes identity again with the same stream
            mt19937_state rng;
            manual_seed(&rng, 42);
            int one_shard = 0;
            random_permutation(&one_shard, 1, &rng);
            int *expect = (int *)malloc(ns * sizeof(int));
            init_identity_permutation(expect, (int)ns);
            random_permutation(expect, (int)ns, &rng);
            unsigned char *seen = (unsigned char *)calloc(ns, 1);
            int order_ok = ns == (305260 - 1) / 256, content_ok = 1, same_ab = 1, differs = 0;
            size_t nseen = 0;
            for (size_t k = 0; k < ns; k++) {
                dataloader_next_batch(&a);
                dataloader_next_batch(&b);
                size_t idx = (size_t)a.intra_shard_indices[a.current_sample_idx - 1];
                order_ok = order_ok && idx == (size_t)expect[k];
                content_ok = content_ok && batch_matches(&a, train, ntrain, idx, 0);
                same_ab = same_ab && memcmp(a.inputs, b.inputs, 256 * sizeof(int)) == 0 &&
                          memcmp(a.targets, b.targets, 256 * sizeof(int)) == 0;
                if (!seen[idx]) { seen[idx] = 1; nseen++; }
                if (k < 100) {
                    dataloader_next_batch(&other_rank);
                    differs = differs || memcmp(a.inputs, other_rank.inputs, 256 * sizeof(int)) != 0;
                }
            }
            test_check(order_ok && content_ok,
                       "train epoch follows random_permutation(identity(%zu)) of mt19937(42+rank); each batch "
                       "holds its sample's tokens", ns);
            test_check(nseen == ns, "every one of the %zu samples visited exactly once in the epoch", ns);
            test_check(same_ab, "two loaders with the same seed give identical batches");
            test_check(differs, "rank 1 of 2 (seed 43, other offsets) gives different batches");
            init_identity_permutation(expect, (int)ns);
            random_permutation(expect, (int)ns, &rng);
            dataloader_next_batch(&a);
            test_check(a.intra_shard_indices[0] == expect[0] && batch_matches(&a, train, ntrain, (size_t)expect[0], 0),
                       "epoch 2 reshuffles from the same generator stream");
            free(expect);
            free(seen);
            dataloader_free(&a);
            dataloader_free(&b);
            dataloader_free(&other_rank);
        }
    }

    // ---- several shards: shard order shuffled too; state save/restore
    char shard_paths[3][256], pattern[256];
    size_t shard_sizes[3] = {1000, 1537, 700};
    uint32_t *shard_tokens[3];
    {
        size_t pos = 0;
        for (int s = 0; s < 3; s++) {
            char name[64];
            snprintf(name, sizeof(name), "multi_%02d.bin", s);
            tmp_path(shard_paths[s], sizeof(shard_paths[s]), name);
            shard_tokens[s] = train + pos;
            pos += shard_sizes[s];
            shard_write_checked(shard_paths[s], shard_tokens[s], shard_sizes[s], SHARD_VERSION, err, sizeof(err));
        }
        tmp_path(pattern, sizeof(pattern), "multi_*.bin");
        DataLoader loader;
        int ok = dataloader_init_checked(&loader, pattern, 2, 16, 0, 1, 1, 0, err, sizeof(err)) == 0;
        if (test_check(ok && loader.num_shards == 3, "3-shard glob '%s'%s", pattern, why(ok, err))) {
            // independent simulation of llm.c's loop over two epochs
            mt19937_state rng;
            manual_seed(&rng, 42);
            int order[3] = {0, 1, 2};
            int sim_ok = 1;
            DataLoaderState saved;
            int saved_at = -1;
            int recorded[40][32];
            int nrec = 0;
            for (int epoch = 0; epoch < 2; epoch++) {
                random_permutation(order, 3, &rng);
                for (int s = 0; s < 3; s++) {
                    size_t ns = shard_num_full_batches((int64_t)shard_sizes[order[s]], 2, 16, 1);
                    int *intra = (int *)malloc(ns * sizeof(int));
                    init_identity_permutation(intra, (int)ns);
                    random_permutation(intra, (int)ns, &rng);
                    unsigned char seen[64] = {0};
                    for (size_t k = 0; k < ns; k++) {
                        if (epoch == 0 && s == 1 && k == 3) {  // save mid-shard
                            dataloader_get_state(&loader, &saved);
                            saved_at = 1;
                        }
                        dataloader_next_batch(&loader);
                        sim_ok = sim_ok && batch_matches(&loader, shard_tokens[order[s]], shard_sizes[order[s]],
                                                         (size_t)intra[k], 0);
                        seen[intra[k]] = 1;
                        if (saved_at == 1 && nrec < 40) memcpy(recorded[nrec++], loader.inputs, 32 * sizeof(int));
                    }
                    for (size_t k = 0; k < ns; k++) sim_ok = sim_ok && seen[k];
                    free(intra);
                }
            }
            test_check(sim_ok, "3 shards, 2 epochs: shard order and per-shard sample order as llm.c "
                       "(random_permutation of the previous shard order, then of each shard's samples)");
            // restore the saved state into a new loader: the same batches follow
            DataLoader resumed;
            int rok = saved_at == 1 &&
                      dataloader_init_checked(&resumed, pattern, 2, 16, 0, 1, 1, 0, err, sizeof(err)) == 0 &&
                      dataloader_set_state_checked(&resumed, &saved, err, sizeof(err)) == 0;
            for (int k = 0; k < nrec && rok; k++) {
                dataloader_next_batch(&resumed);
                rok = memcmp(recorded[k], resumed.inputs, 32 * sizeof(int)) == 0;
            }
            test_check(rok && nrec == 40, "get_state mid-shard, set_state on a fresh loader: the next %d "
                       "batches (across shard and epoch boundaries) are identical%s", nrec, why(rok, err));
            // state that does not fit is refused
            DataLoaderState broken = saved;
            int tmp = broken.intra_shard_indices[0];
            broken.intra_shard_indices[0] = broken.intra_shard_indices[1];
            int r1 = dataloader_set_state_checked(&resumed, &broken, err, sizeof(err));
            int m1 = contains(err, "sample order");
            broken.intra_shard_indices[0] = tmp;
            broken.num_shards = 2;
            int r2 = dataloader_set_state_checked(&resumed, &broken, err, sizeof(err));
            int m2 = contains(err, "saved with 2 shards");
            broken.num_shards = 3;
            broken.should_shuffle = 0;
            int r3 = dataloader_set_state_checked(&resumed, &broken, err, sizeof(err));
            test_check(r1 != 0 && m1 && r2 != 0 && m2 && r3 != 0 && contains(err, "shuffling"),
                       "set_state rejects a non-permutation, a different shard count, a shuffle mismatch");
            // a bare resume() onto a shard with another sample count has no sample order
            size_t other = (loader.current_shard_idx + 1) % 3;
            int rr = dataloader_resume_checked(&loader, other, 0, err, sizeof(err)) == 0 &&
                     dataloader_next_batch_checked(&loader, err, sizeof(err)) != 0;
            test_check(rr && contains(err, "no sample order"),
                       "a shuffled loader moved by resume() alone refuses to read: %s", err);
            if (saved_at == 1) dataloader_free(&resumed);
            if (saved_at == 1) dataloader_state_free(&saved);
            dataloader_free(&loader);
        }
    }

    // ---- a uint32 (Llama 3, version 7) shard
    {
        char path[256];
        tmp_path(path, sizeof(path), "llama3_000.bin");
        size_t n = 2 * 2 * 8 + 1 + 5;
        uint32_t ids[64];
        for (size_t i = 0; i < n; i++) ids[i] = 100000u + (uint32_t)i * 1000u;  // beyond uint16
        ShardInfo info;
        uint32_t *back = NULL;
        size_t nback = 0;
        int ok = shard_write_checked(path, ids, n, SHARD_VERSION_LLAMA3, err, sizeof(err)) == 0 &&
                 shard_read_checked(path, &back, &nback, &info, err, sizeof(err)) == 0 &&
                 nback == n && memcmp(back, ids, n * 4) == 0 && info.token_bytes == 4 &&
                 file_size_of(path) == 1024 + 4 * (int64_t)n;
        free(back);
        test_check(ok, "version 7 shard (uint32 ids > 65535) write + read round trip%s", why(ok, err));
        DataLoader loader;
        ok = dataloader_init_checked(&loader, path, 2, 8, 0, 1, 0, 0, err, sizeof(err)) == 0;
        if (ok) {
            dataloader_next_batch(&loader);
            int b0 = batch_matches(&loader, ids, n, 0, 0);
            dataloader_next_batch(&loader);
            test_check(b0 && batch_matches(&loader, ids, n, 1, 0) && loader.num_batches == 2 &&
                       loader.inputs[0] == 116000,
                       "data loader reads uint32 tokens from a version 7 shard");
            dataloader_free(&loader);
        } else {
            test_check(0, "data loader on a version 7 shard: %s", err);
        }
        uint16_t *narrow;
        size_t nn;
        printf("  (an error about a version 7 shard is expected)\n");
        fflush(stdout);
        test_check(shard_read(path, &narrow, &nn) != 0, "the uint16 reader shard_read refuses a version 7 shard");
        test_check(shard_write_checked(path, ids, n, SHARD_VERSION, err, sizeof(err)) != 0 &&
                   contains(err, "too large for uint16"), "a version 1 shard cannot hold id 100000");
        remove(path);
    }

    // ---- a val shard smaller than one batch
    {
        char path[256];
        tmp_path(path, sizeof(path), "tiny_val.bin");
        shard_write_checked(path, val, 100, SHARD_VERSION, err, sizeof(err));
        expect_loader_rejects(path, 4, 64, 1, 0, 0, "a 100-token shard for B=4 T=64 (training mode)",
                              "holds 100 tokens: 0 full batches", "partial-batch");
        DataLoader ev;
        int ok = dataloader_init_checked(&ev, path, 4, 64, 0, 1, 0, 1, err, sizeof(err)) == 0;
        if (test_check(ok && ev.num_batches == 1 && ev.num_full_batches == 0,
                       "eval loader accepts it: 1 batch, 0 of them full%s", why(ok, err))) {
            dataloader_next_batch(&ev);
            int good = ev.num_targets == 99;
            for (size_t i = 0; i < 256; i++) {
                int want_in = i < 100 ? (int)val[i] : 0;
                int want_t = i < 99 ? (int)val[i + 1] : DATALOADER_IGNORE_TARGET;
                good = good && ev.inputs[i] == want_in && ev.targets[i] == want_t;
            }
            test_check(good, "partial batch: 99 real targets, the rest input 0 / target -100 (ignore)");
            dataloader_next_batch(&ev);
            test_check(ev.num_targets == 99 && ev.inputs[5] == (int)val[5], "the next call starts the shard again");
            dataloader_free(&ev);
        }
        // two ranks: rank 1 gets the tail; with a 50-token shard rank 1 gets nothing
        DataLoader e0, e1;
        ok = dataloader_init_checked(&e0, path, 1, 64, 0, 2, 0, 1, err, sizeof(err)) == 0 &&
             dataloader_init_checked(&e1, path, 1, 64, 1, 2, 0, 1, err, sizeof(err)) == 0;
        if (ok) {
            dataloader_next_batch(&e0);
            dataloader_next_batch(&e1);
            test_check(e0.num_batches == 1 && e1.num_batches == 1 && e0.num_targets == 64 && e1.num_targets == 35 &&
                       batch_matches(&e0, val, 100, 0, 0) && batch_matches(&e1, val, 100, 0, 1),
                       "2 ranks on 100 tokens, B=1 T=64: 64 + 35 targets = all 99");
            dataloader_free(&e0);
            dataloader_free(&e1);
        }
        shard_write_checked(path, val, 50, SHARD_VERSION, err, sizeof(err));
        ok = dataloader_init_checked(&e1, path, 1, 64, 1, 2, 0, 1, err, sizeof(err)) == 0;
        if (ok) {
            dataloader_next_batch(&e1);
            int all_ignored = e1.num_targets == 0;
            for (size_t i = 0; i < 64; i++) all_ignored = all_ignored && e1.targets[i] == DATALOADER_IGNORE_TARGET;
            test_check(all_ignored && e1.num_batches == 1,
                       "rank 1 past the end of a 50-token shard still gets its 1 batch, with 0 targets");
            dataloader_free(&e1);
        }
        expect_loader_rejects(path, 1, 64, 2, 1, 1, "partial batches with shuffling", "cannot be shuffled", NULL);
        // the full val file in eval mode: 127 full batches + 1 with 32767 - 127*256 = 255 targets
        DataLoader full;
        ok = dataloader_init_checked(&full, VAL_BIN, 4, 64, 0, 1, 0, 1, err, sizeof(err)) == 0;
        if (ok) {
            size_t total = 0;
            for (size_t k = 0; k < full.num_batches; k++) {
                dataloader_next_batch(&full);
                total += full.num_targets;
            }
            test_check(full.num_batches == 128 && full.num_full_batches == 127 && full.num_targets == 255 &&
                       total == 32767 && batch_matches(&full, val, nval, 127, 0),
                       "eval mode over the whole val file: 128 batches, every one of the 32767 targets once");
            dataloader_free(&full);
        }
        remove(path);
    }

    // ---- a sparse shard larger than 2 GiB (skipped where files cannot be sparse)
    {
        char path[256];
        tmp_path(path, sizeof(path), "big_sparse.bin");
        int32_t ntok = 1500000000;  // 3 GB of uint16
        int64_t size = 1024 + 2 * (int64_t)ntok;
        size_t B = 4, T = 64;
        size_t last = shard_num_full_batches(ntok, B, T, 1) - 1;
        int64_t off = dataloader_sample_offset((int64_t)last, 1, B, T, 0, 2);
        FILE *fp = fopen(path, "wb");
        int made = 0;
        if (fp != NULL) {
            int32_t h[256] = {SHARD_MAGIC, SHARD_VERSION, ntok};
            uint16_t pattern_tokens[257];
            for (int i = 0; i < 257; i++) pattern_tokens[i] = (uint16_t)(1000 + i);
            made = fwrite(h, sizeof(h), 1, fp) == 1 && fseeko(fp, (off_t)off, SEEK_SET) == 0 &&
                   fwrite(pattern_tokens, 2, 257, fp) == 257 && ftruncate(fileno(fp), (off_t)size) == 0;
            made = fclose(fp) == 0 && made;
        }
        struct stat sb;
        int sparse = made && stat(path, &sb) == 0 && sb.st_size == size && (int64_t)sb.st_blocks * 512 < (64 << 20);
        if (sparse) {
            DataLoader big;
            int ok = dataloader_init_checked(&big, path, B, T, 0, 1, 0, 0, err, sizeof(err)) == 0;
            if (ok) {
                dataloader_resume(&big, 0, last);
                dataloader_next_batch(&big);
                int good = 1;
                for (int i = 0; i < 256; i++)
                    good = good && big.inputs[i] == 1000 + i && big.targets[i] == 1001 + i;
                test_check(good && off > (4LL << 30) / 2, "sparse 3 GB shard: the last sample (byte offset %lld) "
                           "reads the right tokens", (long long)off);
                dataloader_free(&big);
            } else {
                test_check(0, "sparse 3 GB shard: %s", err);
            }
        } else {
            printf("  (skipping the sparse > 2 GiB shard: this filesystem does not make sparse files)\n");
        }
        remove(path);
    }

    // ---- malformed shards and bad arguments
    {
        char path[256];
        tmp_path(path, sizeof(path), "bad_shard.bin");
        write_raw_shard(path, 20240521, 1, 300, 300, 2, 0);
        expect_loader_rejects(path, 2, 8, 1, 0, 0, "bad magic", "bad magic 20240521", path);
        write_raw_shard(path, SHARD_MAGIC, 7, 300, 300, 2, 0);
        expect_loader_rejects(path, 2, 8, 1, 0, 0, "uint16 magic with version 7", "bad version 7 for magic 20240520", path);
        write_raw_shard(path, SHARD_MAGIC_LLAMA3, 1, 300, 300, 4, 0);
        expect_loader_rejects(path, 2, 8, 1, 0, 0, "uint32 magic with version 1", "bad version 1 for magic 20240801", path);
        write_raw_shard(path, SHARD_MAGIC, 1, 300, 299, 2, 1);
        expect_loader_rejects(path, 2, 8, 1, 0, 0, "a truncated shard", "(truncated)", "need 1624");
        write_raw_shard(path, SHARD_MAGIC, 1, 300, 300, 2, 2);
        expect_loader_rejects(path, 2, 8, 1, 0, 0, "a shard with trailing bytes", "(trailing bytes)", path);
        write_raw_shard(path, SHARD_MAGIC_LLAMA3, 7, 300, 300, 2, 0);
        expect_loader_rejects(path, 2, 8, 1, 0, 0, "a uint32 shard sized for uint16", "need 2224", path);
        write_raw_shard(path, SHARD_MAGIC, 1, 0, 0, 2, 0);
        expect_loader_rejects(path, 2, 8, 1, 0, 0, "zero tokens", "bad token count 0", path);
        write_raw_shard(path, SHARD_MAGIC, 1, -4, 0, 2, 0);
        expect_loader_rejects(path, 2, 8, 1, 0, 0, "a negative token count", "bad token count -4", path);
        unsigned char short_header[100] = {0};
        write_bytes(path, short_header, sizeof(short_header));
        expect_loader_rejects(path, 2, 8, 1, 0, 0, "a truncated header", "truncated header", path);
        write_raw_shard(path, SHARD_MAGIC, 1, 300, 300, 2, 0);
        expect_loader_rejects(path, 4, 128, 1, 0, 0, "a shard smaller than one batch", "0 full batches", "B=4 T=128");
        expect_loader_rejects(path, 0, 8, 1, 0, 0, "B = 0", "bad configuration", NULL);
        char nomatch[256];
        tmp_path(nomatch, sizeof(nomatch), "nothing_*.bin");
        expect_loader_rejects(nomatch, 2, 8, 1, 0, 0, "a pattern without matches", "no files match", nomatch);
        // a directory opens as a file and "measures" 2^63 - 1 bytes: it must be named for what it is
        expect_loader_rejects(tmp_dir, 2, 8, 1, 0, 0, "a directory as a shard", "Is a directory", tmp_dir);
        remove(path);
    }
    test_vocab_check();
    for (int s = 0; s < 3; s++) remove(shard_paths[s]);
    free(val);
    free(train);
}

// ----------------------------------------------------------------------------
// checkpoint.h

static GPT2Config small_config(void) {
    GPT2Config c = {8, 10, 16, 2, 2, 4};  // maxT, V, Vp, L, NH, C
    return c;
}

static void write_model_header_variant(const char *path, const unsigned char *good, size_t n, int word,
                                       int32_t value, long len_delta) {
    unsigned char *g = (unsigned char *)malloc(n + 8);
    memcpy(g, good, n);
    memset(g + n, 0, 8);
    if (word >= 0) memcpy(g + 4 * word, &value, 4);
    write_bytes(path, g, (size_t)((long)n + len_delta));
    free(g);
}

static void test_checkpoint(void) {
    printf("-- gpt2.h (table, model files) + checkpoint.h (state files, markers)\n");
    char err[1024] = "";
    {
        GPT2Config c = small_config();
        ParameterTensor t[GPT2_NUM_TENSORS];
        gpt2_parameter_tensors(&c, t);
        const char *names[GPT2_NUM_TENSORS] = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw",
            "attprojb", "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
        size_t C = 4, L = 2, Vp = 16, maxT = 8;
        size_t numel[GPT2_NUM_TENSORS] = {Vp * C, maxT * C, L * C, L * C, L * 3 * C * C, L * 3 * C,
            L * C * C, L * C, L * C, L * C, L * 4 * C * C, L * 4 * C, L * 4 * C * C, L * C, C, C};
        int ok = 1, decay = 0;
        size_t offset = 0;
        for (int i = 0; i < GPT2_NUM_TENSORS; i++) {
            ok = ok && strcmp(t[i].name, names[i]) == 0 && t[i].numel == numel[i] && t[i].offset == offset;
            offset += numel[i];
            decay += t[i].weight_decay;
        }
        ok = ok && t[4].ndim == 3 && t[4].shape[0] == L && t[4].shape[1] == 3 * C && t[4].shape[2] == C &&
             t[12].shape[1] == C && t[12].shape[2] == 4 * C && t[0].shape[0] == Vp;
        test_check(ok && decay == 6 && t[0].weight_decay && t[1].weight_decay && t[10].weight_decay &&
                   gpt2_num_parameters(&c) == offset && offset == Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C,
                   "parameter table: 16 tensors in llm.c order, shapes and offsets from the config, 6 decayed matrices");
        GPT2Config g124 = {1024, 50257, 50304, 12, 12, 768};
        test_check(gpt2_config_check(&g124, err, sizeof(err)) == 0 && gpt2_num_parameters(&g124) == 124475904,
                   "GPT-2 124M (Vp 50304): 124475904 parameters, as llm.c prints");
    }
    {
        // bf16 conversions against test_util.h's reference, plus the special cases
        uint64_t state = 12345;
        int same = 1;
        for (int i = 0; i < 1000000 && same; i++) {
            state = state * 6364136223846793005ULL + 1442695040888963407ULL;
            uint32_t u = (uint32_t)(state >> 32);
            float f;
            memcpy(&f, &u, 4);
            same = bf16_from_float(f) == f32_to_bf16_bits(f);
        }
        float one_tie, odd_tie, inf = INFINITY, nan_f = NAN;
        uint32_t u1 = 0x3F808000u, u2 = 0x3F818000u;
        memcpy(&one_tie, &u1, 4);
        memcpy(&odd_tie, &u2, 4);
        uint16_t nb = bf16_from_float(nan_f);
        same = same && bf16_from_float(one_tie) == 0x3F80 && bf16_from_float(odd_tie) == 0x3F82 &&
               bf16_from_float(inf) == 0x7F80 && (nb & 0x7F80) == 0x7F80 && (nb & 0x7F) != 0 &&
               bf16_from_float(-0.0f) == 0x8000 && float_from_bf16(0x3FC0) == 1.5f;
        test_check(same, "bf16 <-> fp32: round to nearest even (ties 0x3F808000 -> 0x3F80, 0x3F818000 -> 0x3F82), "
                   "inf, NaN stays NaN, 1e6 random patterns agree with the reference");
    }
    {
        // a model file from an independent writer (scripts/export_gpt2_debug.py, PyTorch)
        ModelFileInfo info;
        float *w = NULL;
        const char *debug = "test/fixtures/gpt2_debug.bin";
        if (file_exists(debug)) {
            int ok = model_read_checked(debug, &info, (void **)&w, 1, err, sizeof(err)) == 0;
            GPT2Config want = {64, 397, 448, 2, 4, 64};
            ok = ok && info.version == 3 && memcmp(&info.config, &want, sizeof(want)) == 0;
            ParameterTensor t[GPT2_NUM_TENSORS];
            if (ok) gpt2_parameter_tensors(&info.config, t);
            for (size_t i = 397 * 64; ok && i < 448 * 64; i++) ok = w[t[0].offset + i] == 0.0f;  // wte padding rows
            for (size_t i = 0; ok && i < t[2].numel; i++) ok = w[t[2].offset + i] == 1.0f;  // ln1w
            test_check(ok, "reads %s (PyTorch-written llm.c model: maxT 64, V 397, Vp 448, L 2, NH 4, C 64; "
                       "zero wte padding rows, ln1w = 1)%s", debug, why(ok, err));
            free(w);
        } else {
            printf("  (skipping %s: not found)\n", debug);
        }
    }
    // ---- model files
    char path[256], tmp[300];
    tmp_path(path, sizeof(path), "model.bin");
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    GPT2Config c = small_config();
    size_t np = gpt2_num_parameters(&c);
    float *params = (float *)malloc(np * sizeof(float));
    uint64_t st = 7;
    fill_uniform(params, np, 0.5f, &st);
    {
        ModelFileInfo info;
        void *back = NULL;
        int ok = model_write_checked(path, &c, MODEL_VERSION_FP32, params, 0, err, sizeof(err)) == 0 &&
                 !file_exists(tmp) && file_size_of(path) == 1024 + 4 * (int64_t)np &&
                 model_read_checked(path, &info, &back, 0, err, sizeof(err)) == 0 &&
                 info.version == 3 && info.num_parameters == np && memcmp(&info.config, &c, sizeof(c)) == 0 &&
                 memcmp(back, params, np * 4) == 0;
        free(back);
        test_check(ok, "model v3 (fp32) write + read round trip, %zu parameters%s", np, why(ok, err));
        uint16_t *bf = (uint16_t *)malloc(np * 2);
        floats_to_bf16(params, bf, np);
        float *wide = NULL;
        ok = model_write_checked(path, &c, MODEL_VERSION_BF16, bf, 1, err, sizeof(err)) == 0 &&
             file_size_of(path) == 1024 + 2 * (int64_t)np &&
             model_read_checked(path, &info, &back, 0, err, sizeof(err)) == 0 && info.version == 5 &&
             info.bytes_per_parameter == 2 && memcmp(back, bf, np * 2) == 0 &&
             model_read_checked(path, &info, (void **)&wide, 1, err, sizeof(err)) == 0;
        for (size_t i = 0; ok && i < np; i++) ok = wide[i] == float_from_bf16(bf[i]);
        free(back);
        free(wide);
        free(bf);
        test_check(ok, "model v5 (bf16) write + read round trip, raw and widened to fp32%s", why(ok, err));
        test_check(model_write_checked(path, &c, 4, params, 0, err, sizeof(err)) != 0 && contains(err, "version 4"),
                   "model writer refuses version 4");
        GPT2Config bad = c;
        bad.padded_vocab_size = 8;
        test_check(model_write_checked(path, &bad, 3, params, 0, err, sizeof(err)) != 0 &&
                   contains(err, "padded_vocab_size 8 is smaller than vocab_size 10"),
                   "model writer refuses Vp < V");
    }
    {
        model_write_checked(path, &c, MODEL_VERSION_FP32, params, 0, err, sizeof(err));
        size_t n;
        unsigned char *good = read_all(path, &n);
        char badpath[256];
        tmp_path(badpath, sizeof(badpath), "bad_model.bin");
        struct { const char *what; int word; int32_t value; long len_delta; const char *msg; } bad[] = {
            {"bad magic", 0, 20240325, 0, "bad magic 20240325"},
            {"version 4", 1, 4, 0, "bad version 4"},
            {"bf16 version with fp32 data", 1, 5, 0, "trailing bytes"},
            {"truncated by one byte", -1, 0, -1, "(truncated)"},
            {"one byte too long", -1, 0, 1, "(trailing bytes)"},
            {"max_seq_len 0", 2, 0, 0, "max_seq_len=0"},
            {"vocab_size 0", 3, 0, 0, "vocab_size=0"},
            {"num_layers -1", 4, -1, 0, "num_layers=-1"},
            {"num_heads 0", 5, 0, 0, "num_heads=0"},
            {"channels -4", 6, -4, 0, "channels=-4"},
            {"padded_vocab_size 0", 7, 0, 0, "padded_vocab_size=0"},
            {"Vp < V", 7, 8, 0, "padded_vocab_size 8 is smaller than vocab_size 10"},
            {"channels not a multiple of heads", 5, 3, 0, "channels 4 is not a multiple of num_heads 3"},
            {"absurd sizes", 6, 1 << 30, 0, "too many parameters"},
            {"more layers than the data", 4, 3, 0, "(truncated)"},
        };
        for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
            write_model_header_variant(badpath, good, n, bad[k].word, bad[k].value, bad[k].len_delta);
            ModelFileInfo info;
            void *p = NULL;
            int rc = model_read_checked(badpath, &info, &p, 0, err, sizeof(err));
            test_check(rc != 0 && p == NULL && contains(err, bad[k].msg) && contains(err, badpath),
                       "model reader rejects %s: %s", bad[k].what, err);
            free(p);
        }
        write_bytes(badpath, good, 500);
        ModelFileInfo info;
        void *p = NULL;
        test_check(model_read_checked(badpath, &info, &p, 0, err, sizeof(err)) != 0 && contains(err, "truncated header"),
                   "model reader rejects a truncated header: %s", err);
        remove(badpath);
        test_check(model_read_checked(badpath, &info, &p, 0, err, sizeof(err)) != 0 && contains(err, "cannot open model file"),
                   "model reader rejects a missing file");
        free(good);
    }
    remove(path);
    free(params);

    // ---- state files
    char spath[256];
    tmp_path(spath, sizeof(spath), "state.bin");
    DataLoader loader;
    char pattern[256];
    tmp_path(pattern, sizeof(pattern), "st_*.bin");
    {
        // a shuffled 2-shard loader to take a real shuffle state from
        char p0[256], p1[256];
        tmp_path(p0, sizeof(p0), "st_0.bin");
        tmp_path(p1, sizeof(p1), "st_1.bin");
        uint32_t ids[900];
        for (int i = 0; i < 900; i++) ids[i] = (uint32_t)(i * 7 % 50000);
        shard_write_checked(p0, ids, 500, SHARD_VERSION, err, sizeof(err));
        shard_write_checked(p1, ids + 500, 400, SHARD_VERSION, err, sizeof(err));
    }
    int loader_ok = dataloader_init_checked(&loader, pattern, 2, 8, 1, 2, 1, 0, err, sizeof(err)) == 0;
    if (!test_check(loader_ok, "loader for the state tests%s", why(loader_ok, err)))
        return;
    for (int k = 0; k < 37; k++) dataloader_next_batch(&loader);
    size_t P = 1000;
    TrainingState ws;
    memset(&ws, 0, sizeof(ws));
    ws.num_processes = 2;
    ws.process_rank = 1;
    ws.use_master_weights = 1;
    ws.step = 1234;
    ws.rng_state = 0x0123456789ABCDEFull;
    ws.rng_state_last_update = 0xFEDCBA9876543210ull;
    ws.num_parameters = P;
    ws.m = (float *)malloc(P * 4);
    ws.v = (float *)malloc(P * 4);
    ws.master_weights = (float *)malloc(P * 4);
    fill_uniform(ws.m, P, 1.0f, &st);
    fill_uniform(ws.v, P, 1.0f, &st);
    fill_uniform(ws.master_weights, P, 1.0f, &st);
    dataloader_get_state(&loader, &ws.loader);
    {
        TrainingState rs;
        int ok = state_write_checked(spath, &ws, 0, err, sizeof(err)) == 0 &&
                 file_size_of(spath) == (int64_t)(1024 + 3 * 4 * P + 8 + 4 * 2 + 8 + 4 * ws.loader.shard_num_samples + 2520) &&
                 state_read_checked(spath, P, &rs, err, sizeof(err)) == 0;
        if (ok) {
            ok = rs.num_processes == 2 && rs.process_rank == 1 && rs.use_master_weights == 1 && rs.step == 1234 &&
                 rs.rng_state == ws.rng_state && rs.rng_state_last_update == ws.rng_state_last_update &&
                 memcmp(rs.m, ws.m, P * 4) == 0 && memcmp(rs.v, ws.v, P * 4) == 0 &&
                 memcmp(rs.master_weights, ws.master_weights, P * 4) == 0 &&
                 rs.loader.shard_idx == ws.loader.shard_idx && rs.loader.sample_idx == ws.loader.sample_idx &&
                 rs.loader.should_shuffle == 1 && rs.loader.num_shards == 2 &&
                 memcmp(rs.loader.shard_indices, ws.loader.shard_indices, 2 * sizeof(int)) == 0 &&
                 rs.loader.shard_num_samples == ws.loader.shard_num_samples &&
                 memcmp(rs.loader.intra_shard_indices, ws.loader.intra_shard_indices,
                        ws.loader.shard_num_samples * sizeof(int)) == 0;
            // the loader restored from the file continues exactly where the original is
            DataLoader again;
            int cont = dataloader_init_checked(&again, pattern, 2, 8, 1, 2, 1, 0, err, sizeof(err)) == 0 &&
                       dataloader_set_state_checked(&again, &rs.loader, err, sizeof(err)) == 0;
            for (int k = 0; k < 60 && cont; k++) {
                dataloader_next_batch(&loader);
                dataloader_next_batch(&again);
                cont = memcmp(loader.inputs, again.inputs, 16 * sizeof(int)) == 0;
            }
            test_check(cont, "a loader restored from the state file gives the same next 60 batches "
                       "(through a new epoch)%s", why(cont, err));
            dataloader_free(&again);
            state_free(&rs);
        }
        test_check(ok, "state file round trip (master weights, shuffle state of rank 1 of 2)%s", why(ok, err));
    }
    {
        // no master weights, no shuffling
        TrainingState plain = ws, rs;
        plain.use_master_weights = 0;
        plain.master_weights = NULL;
        plain.loader.should_shuffle = 0;
        plain.loader.shard_idx = 0;
        plain.loader.sample_idx = 17;
        int ok = state_write_checked(spath, &plain, 0, err, sizeof(err)) == 0 &&
                 file_size_of(spath) == (int64_t)(1024 + 2 * 4 * P) &&
                 state_read_checked(spath, P, &rs, err, sizeof(err)) == 0 && rs.master_weights == NULL &&
                 rs.loader.should_shuffle == 0 && rs.loader.sample_idx == 17 && memcmp(rs.v, ws.v, P * 4) == 0;
        if (ok) state_free(&rs);
        test_check(ok, "state file round trip without master weights and shuffling%s", why(ok, err));
        test_check(state_read_checked(spath, P + 1, &rs, err, sizeof(err)) != 0 && contains(err, "too short"),
                   "state reader given the wrong parameter count: %s", err);
        test_check(state_read_checked(spath, P - 1, &rs, err, sizeof(err)) != 0 && contains(err, "trailing bytes"),
                   "state reader given a smaller parameter count: %s", err);
    }
    {
        state_write_checked(spath, &ws, 0, err, sizeof(err));
        size_t n;
        unsigned char *good = read_all(spath, &n);
        char badpath[256];
        tmp_path(badpath, sizeof(badpath), "bad_state.bin");
        size_t shuffle_at = 1024 + 3 * 4 * P;  // u64 num_shards
        size_t intra_at = shuffle_at + 8 + 8 + 8;
        size_t rng_at = n - 2520;
        struct { const char *what; long at; int64_t value; int width; long len_delta; const char *msg; } bad[] = {
            {"bad magic", 0, 20240526, 4, 0, "bad magic 20240526"},
            {"version 2", 4, 2, 4, 0, "bad version 2"},
            {"num_processes 0", 8, 0, 4, 0, "num_processes 0"},
            {"rank >= num_processes", 12, 2, 4, 0, "bad process_rank 2"},
            {"negative rank", 12, -1, 4, 0, "bad process_rank -1"},
            {"use_master_weights 2", 16, 2, 4, 0, "use_master_weights=2"},
            {"should_shuffle 3", 20, 3, 4, 0, "should_shuffle=3"},
            {"negative step", 40, -5, 4, 0, "bad step -5"},
            {"truncated by one byte", -1, 0, 0, -1, "truncated"},
            {"one byte too long", -1, 0, 0, 1, "trailing bytes"},
            {"truncated header", -1, 0, 0, -(long)n + 600, "truncated header"},
            {"no master weights but their bytes present", 16, 0, 4, 0, "shuffle section"},
            {"num_shards 0", (long)shuffle_at, 0, 8, 0, "num_shards 0"},
            {"num_shards too large for the file", (long)shuffle_at, 1000000, 8, 0, "num_shards 1000000"},
            {"num_shards 3 (sizes no longer add up)", (long)shuffle_at, 3, 8, 0, "shuffle section"},
            {"intra-shard order not a permutation", (long)intra_at, 0, 4, 0, "not a permutation"},
            {"shard position outside the shards", 120, 5, 8, 0, "data position shard 5"},
            {"generator left = 0", (long)rng_at + 8, 0, 4, 0, "shuffle generator is invalid"},
        };
        for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
            unsigned char *g = (unsigned char *)malloc(n + 8);
            memcpy(g, good, n);
            memset(g + n, 0, 8);
            if (bad[k].at >= 0) memcpy(g + bad[k].at, &bad[k].value, (size_t)bad[k].width);
            if (k == 15) {  // make intra[0] equal intra[1]
                memcpy(g + intra_at, g + intra_at + 4, 4);
            }
            write_bytes(badpath, g, (size_t)((long)n + bad[k].len_delta));
            free(g);
            TrainingState rs;
            int rc = state_read_checked(badpath, P, &rs, err, sizeof(err));
            test_check(rc != 0 && rs.m == NULL && contains(err, bad[k].msg) && contains(err, badpath),
                       "state reader rejects %s: %s", bad[k].what, err);
            if (rc == 0) state_free(&rs);
        }
        remove(badpath);
        free(good);
        TrainingState nope = ws;
        nope.process_rank = 2;
        test_check(state_write_checked(spath, &nope, 0, err, sizeof(err)) != 0 && contains(err, "process_rank=2"),
                   "state writer refuses rank >= num_processes");
    }
    remove(spath);
    free(ws.m);
    free(ws.v);
    free(ws.master_weights);
    dataloader_state_free(&ws.loader);
    dataloader_free(&loader);
    {
        char p0[256], p1[256];
        tmp_path(p0, sizeof(p0), "st_0.bin");
        tmp_path(p1, sizeof(p1), "st_1.bin");
        remove(p0);
        remove(p1);
    }

    // ---- DONE markers and the latest complete checkpoint
    {
        char dir[256], p[512];
        tmp_path(dir, sizeof(dir), "ckpt");
        int none = find_max_step(dir) == -1 && checkpoint_find_latest(dir, 1, err, sizeof(err)) == -1 &&
                   contains(err, "cannot open checkpoint directory");
        mkdir(dir, 0755);
        none = none && find_max_step(dir) == -1 && checkpoint_find_latest(dir, 1, err, sizeof(err)) == -1 &&
               contains(err, "no DONE_ markers");
        test_check(none, "no directory / no markers: -1 with a reason");
        // step 10 complete for 2 ranks; step 20 missing rank 1's state; junk names
        int made = 1;
        for (int step = 10; step <= 20; step += 10) {
            checkpoint_model_path(p, sizeof(p), dir, step);
            made = made && write_bytes(p, "m", 1);
            for (int r = 0; r < (step == 10 ? 2 : 1); r++) {
                checkpoint_state_path(p, sizeof(p), dir, step, r);
                made = made && write_bytes(p, "s", 1);
            }
            made = made && done_marker_write_checked(dir, step, 0, err, sizeof(err)) == 0;
        }
        const char *junk[] = {"DONE_abc", "DONE_00000030.tmp", "DONE_", "DONE_99999999999", "xDONE_00000040"};
        for (size_t k = 0; k < sizeof(junk) / sizeof(junk[0]); k++) {
            snprintf(p, sizeof(p), "%s/%s", dir, junk[k]);
            made = made && write_bytes(p, "", 0);
        }
        checkpoint_done_path(p, sizeof(p), dir, 10);
        int names = contains(p, "/DONE_00000010") && file_size_of(p) == 0;
        checkpoint_state_path(p, sizeof(p), dir, 10, 1);
        names = names && contains(p, "/state_00000010_00001.bin");
        checkpoint_model_path(p, sizeof(p), dir, 10);
        names = names && contains(p, "/model_00000010.bin");
        test_check(made && names, "file names model_%%08d.bin, state_%%08d_%%05d.bin, DONE_%%08d (empty)");
        test_check(checkpoint_parse_done_name("DONE_00000020") == 20 && checkpoint_parse_done_name("DONE_abc") == -1 &&
                   checkpoint_parse_done_name("DONE_00000030.tmp") == -1 && checkpoint_parse_done_name("DONE_") == -1 &&
                   checkpoint_parse_done_name("DONE_99999999999") == -1,
                   "marker names: only DONE_<digits> within int range count");
        test_check(find_max_step(dir) == 20, "find_max_step (llm.c): 20, junk names ignored");
        int latest2 = checkpoint_find_latest(dir, 2, err, sizeof(err));
        test_check(latest2 == 10 && contains(err, "state_00000020_00001.bin"),
                   "latest complete checkpoint for 2 ranks: 10 (20 lacks rank 1's state: %s)", err);
        test_check(checkpoint_find_latest(dir, 1, err, sizeof(err)) == 20, "latest complete for 1 rank: 20");
        int deleted = checkpoint_delete(dir, 20, 2, err, sizeof(err)) == 0;
        checkpoint_model_path(p, sizeof(p), dir, 20);
        test_check(deleted && find_max_step(dir) == 10 && checkpoint_find_latest(dir, 2, err, sizeof(err)) == 10 &&
                   !file_exists(p),
                   "checkpoint_delete(20) removes marker, model and states; 10 is latest");
        checkpoint_delete(dir, 10, 2, err, sizeof(err));
        for (size_t k = 0; k < sizeof(junk) / sizeof(junk[0]); k++) {
            snprintf(p, sizeof(p), "%s/%s", dir, junk[k]);
            remove(p);
        }
        test_check(rmdir(dir) == 0, "the checkpoint directory is empty after deleting both checkpoints");
    }
}

// ----------------------------------------------------------------------------
// rope.h

// Expected values, computed in Python (no torch) two ways: an fp32 mirror of transformers'
// ops (each op in double, rounded to float32 with struct.pack('f'), in transformers' order and
// precision: exponent (float)(2j) / (float)hd, (float)theta ** it, 1 / that, then the llama3
// steps as in rope.h's header), which any implementation of that order must match bit for bit
// (pow and the divisions are correctly rounded here, and no double result of the script is
// within 0.003 fp32 ulp of a rounding midpoint); and the plain float64 formula
// 1 / theta^(2j/hd), scaled as in _compute_llama3_parameters, which the fp32 values must
// approach to fp32 precision (rel 1e-6: the fp32 steps leave up to 4e-7).
typedef struct {
    int j;
    float fp32;  // the fp32 mirror's value
    double f64;  // the float64 formula's
} RopeExpect;

static void check_inv_freq(const char *label, const RopeConfig *c, const RopeExpect *e, int ne) {
    char err[256];
    float inv[256];
    const int ok = rope_inv_freq_checked(inv, c, err, sizeof(err)) == 0;
    int exact = 1, close = 1;
    for (int k = 0; k < ne && ok; k++) {
        exact &= inv[e[k].j] == e[k].fp32;
        close &= fabs((double)inv[e[k].j] - e[k].f64) <= 1e-6 * e[k].f64;
        if (inv[e[k].j] != e[k].fp32)
            printf("    %s inv_freq[%d] = %.9g (%a), want %.9g (%a)\n", label, e[k].j, (double)inv[e[k].j],
                   (double)inv[e[k].j], (double)e[k].fp32, (double)e[k].fp32);
    }
    test_check(ok && exact && close, "rope %s: inv_freq at %d indices bit-equal to the fp32 mirror of transformers, "
               "within rel 1e-6 of the float64 formula%s", label, ne, why(ok, err));
}

static int expect_rope_refused(const RopeConfig *c, int max_seq_len, const char *field, const char *what) {
    char err[256] = "";
    float inv[256], cs[256], sn[256];  // room for every config below, were it accepted
    for (int k = 0; k < 256; k++) inv[k] = cs[k] = sn[k] = -7.0f;
    const int rc1 = rope_inv_freq_checked(inv, c, err, sizeof(err));
    const int named1 = contains(err, field);
    err[0] = '\0';
    const int rc2 = rope_tables_checked(cs, sn, max_seq_len, c, err, sizeof(err));
    int untouched = 1;  // inv_freq is a valid call when only max_seq_len is wrong
    for (int k = 0; k < 256; k++) untouched &= (max_seq_len < 1 || inv[k] == -7.0f) && cs[k] == -7.0f && sn[k] == -7.0f;
    const int ok = (max_seq_len < 1 || (rc1 != 0 && named1)) && rc2 != 0 && contains(err, field) && untouched;
    return test_check(ok, "rope: %s refused, the message names %s, nothing written (\"%s\")", what, field, err);
}

static void test_rope(void) {
    const RopeConfig llama32 = {ROPE_LLAMA3, 64, 500000.0, 32.0, 1.0, 4.0, 8192};    // Llama-3.2-1B
    const RopeConfig llama31 = {ROPE_LLAMA3, 128, 500000.0, 8.0, 1.0, 4.0, 8192};    // Llama-3.1-8B
    const RopeConfig qwen = {ROPE_DEFAULT, 64, 1000000.0, 0.0, 0.0, 0.0, 0};          // Qwen2.5-0.5B
    // j = 0..14 keep their frequency (wavelength < 8192/4), 15..17 are interpolated, 18..31
    // divided by the factor (wavelength > 8192/1)
    const RopeExpect e32[] = {
        {0, 0x1p+0f, 1.0},
        {1, 0x1.53c38cp-1f, 0.6636012376960885},
        {14, 0x1.a4ee4p-9f, 0.0032114459947525913},
        {15, 0x1.524f36p-10f, 0.001290547928209264},
        {16, 0x1.c26c4p-12f, 0.00042955679655936815},
        {17, 0x1.9731eep-14f, 9.70828780262767e-05},
        {18, 0x1.46831ap-16f, 1.9461638184831125e-05},
        {31, 0x1.94836p-24f, 9.418306725434909e-08},
    };
    // hd 128, factor 8: j = 29..34 interpolated, 35.. divided
    const RopeExpect e31[] = {
        {20, 0x1.0f5386p-6f, 0.016560440080994446},
        {31, 0x1.c12f3cp-11f, 0.0008567514129196321},
        {32, 0x1.132ba4p-11f, 0.0005248461609929547},
        {33, 0x1.47e21p-12f, 0.00031269375038406517},
        {35, 0x1.90d10cp-14f, 9.556212353964683e-05},
        {63, 0x1.4985fep-22f, 3.068925988914511e-07},
    };
    const RopeExpect eq[] = {
        {1, 0x1.4c7bcp-1f, 0.6493816315762113},
        {17, 0x1.547688p-11f, 0.0006493816315762112},
        {31, 0x1.9d5ef2p-20f, 1.539926526059492e-06},
    };
    // a synthetic llama3 config whose factor and band width are not powers of two and hd not
    // one either: here the order of transformers' fp32 ops shows in the bits (computing the
    // wavelength as one division, or dividing inv by the factor before the product with
    // 1 - s, changes j = 31..35); j = 29..35 interpolated
    const RopeConfig odd = {ROPE_LLAMA3, 96, 10000.0, 3.0, 1.5, 5.0, 8192};
    const RopeExpect eo[] = {
        {28, 0x1.3030f4p-8f, 0.004641588833612777},
        {29, 0x1.f5b10cp-9f, 0.003827604541369783},
        {30, 0x1.593ea6p-9f, 0.0026340080672628873},
        {31, 0x1.dc1d2ap-10f, 0.0018162298787109243},
        {32, 0x1.491166p-10f, 0.0012552951681419982},
        {33, 0x1.c8226ep-11f, 0.00087000741106844},
        {34, 0x1.3d28b4p-11f, 0.0006049325591346478},
        {35, 0x1.bab7b2p-12f, 0.0004222085005023525},
        {36, 0x1.5d867ep-12f, 0.0003333333333333333},
        {47, 0x1.52c484p-15f, 4.038425528761962e-05},
    };
    check_inv_freq("Llama-3.2 (theta 500000, hd 64, llama3 factor 32)", &llama32, e32, 8);
    check_inv_freq("synthetic (theta 10000, hd 96, llama3 factor 3, low 1.5, high 5)", &odd, eo, 10);
    check_inv_freq("Llama-3.1 (theta 500000, hd 128, llama3 factor 8)", &llama31, e31, 6);
    check_inv_freq("Qwen2.5 (theta 1000000, hd 64, default)", &qwen, eq, 3);

    // the bands: against the unscaled frequencies, kept bitwise, divided by the factor bitwise
    // (an fp32 division), or strictly between the two
    {
        RopeConfig plain = llama32;
        plain.type = ROPE_DEFAULT;
        float inv[32], base[32];
        rope_inv_freq_checked(inv, &llama32, NULL, 0);
        rope_inv_freq_checked(base, &plain, NULL, 0);
        int kept = 0, divided = 0, between = 0, wrong = 0, order = 1;
        for (int j = 0; j < 32; j++) {
            const int is_kept = inv[j] == base[j], is_divided = inv[j] == base[j] / 32.0f;
            const int is_between = inv[j] < base[j] && inv[j] > base[j] / 32.0f;
            kept += is_kept;
            divided += is_divided;
            between += is_between;
            wrong += j <= 14 ? !is_kept : j <= 17 ? !is_between : !is_divided;
            if (j > 0) order &= inv[j] < inv[j - 1];
        }
        test_check(wrong == 0 && order,
                   "rope llama3 factor 32: j 0..14 kept (%d kept), 15..17 interpolated (%d), 18..31 divided by 32 "
                   "(%d), %d in the wrong band, frequencies decreasing", kept, between, divided, wrong);
    }

    // the tables: cos/sin of the fp32 product (float)t * inv_freq[j], against the Python value
    // of the same fp32 product (1 fp32 ulp). At t = 100000 the fp32 product is 66360.125 and
    // cos differs from that of the exact product (-0.9658356) by 3e-4: the fp32 argument is
    // transformers' (its freqs are an fp32 matmul).
    {
        const int T = 131072, half = 32;
        float *cs = (float *)malloc((size_t)T * half * sizeof(float));
        float *sn = (float *)malloc((size_t)T * half * sizeof(float));
        char err[256];
        const int ok = cs != NULL && sn != NULL && rope_tables_checked(cs, sn, T, &llama32, err, sizeof(err)) == 0;
        const struct { int t, j; float c, s; } e[] = {
            {1, 1, 0.7877790927886963f, 0.6159578561782837f},
            {77, 15, 0.9950666427612305f, 0.09920872747898102f},
            {8191, 16, -0.929807722568512f, -0.3680456280708313f},
            {100000, 1, -0.9655159711837769f, -0.2603437602519989f},
            {131071, 31, 0.999923825263977f, 0.012344354763627052f},
        };
        int good = ok, row0 = ok;
        for (int k = 0; k < 5 && ok; k++) {
            const float c = cs[(size_t)e[k].t * half + e[k].j], s = sn[(size_t)e[k].t * half + e[k].j];
            const int g = fabsf(c - e[k].c) <= 1.2e-7f && fabsf(s - e[k].s) <= 1.2e-7f;
            if (!g) printf("    t=%d j=%d: cos %.9g sin %.9g, want %.9g %.9g\n", e[k].t, e[k].j, (double)c, (double)s,
                           (double)e[k].c, (double)e[k].s);
            good &= g;
        }
        for (int j = 0; j < half && ok; j++) row0 &= cs[j] == 1.0f && sn[j] == 0.0f;
        test_check(good && row0, "rope tables Llama-3.2, 131072 positions: cos/sin at 5 (t, j) within 1 fp32 ulp of "
                   "the Python values (t up to 131071), row 0 exactly (1, 0)%s", ok ? "" : why(0, err));
        free(cs);
        free(sn);
    }

    // the type names
    RopeType ty = ROPE_DEFAULT;
    test_check(rope_type_parse("llama3", &ty) == 0 && ty == ROPE_LLAMA3 && rope_type_parse("default", &ty) == 0 &&
                   ty == ROPE_DEFAULT && rope_type_parse("yarn", &ty) == -1 && ty == ROPE_DEFAULT,
               "rope_type_parse: llama3, default; yarn refused");

    // refused parameters: the message names the field, nothing is written
    RopeConfig c = qwen;
    c.theta = 0.0;
    expect_rope_refused(&c, 4, "rope_theta", "rope_theta 0");
    c.theta = -10000.0;
    expect_rope_refused(&c, 4, "rope_theta", "rope_theta -10000");
    c.theta = NAN;
    expect_rope_refused(&c, 4, "rope_theta", "rope_theta NaN");
    c = qwen;
    c.head_dim = 63;
    expect_rope_refused(&c, 4, "head_dim", "an odd head_dim (63)");
    c.head_dim = 0;
    expect_rope_refused(&c, 4, "head_dim", "head_dim 0");
    c = qwen;
    c.type = (RopeType)7;
    expect_rope_refused(&c, 4, "type", "an unknown type");
    c = llama32;
    c.factor = 0.0;
    expect_rope_refused(&c, 4, "rope_scaling.factor", "llama3 factor 0");
    c.factor = 0.5;
    expect_rope_refused(&c, 4, "rope_scaling.factor", "llama3 factor 0.5 (< 1)");
    c = llama32;
    c.low_freq_factor = 0.0;
    expect_rope_refused(&c, 4, "rope_scaling.low_freq_factor", "llama3 low_freq_factor 0");
    c = llama32;
    c.high_freq_factor = c.low_freq_factor;
    expect_rope_refused(&c, 4, "rope_scaling.high_freq_factor", "llama3 high_freq_factor == low_freq_factor");
    c.high_freq_factor = 0.5;
    expect_rope_refused(&c, 4, "rope_scaling.high_freq_factor", "llama3 high_freq_factor < low_freq_factor");
    c = llama32;
    c.original_max_position_embeddings = 0;
    expect_rope_refused(&c, 4, "rope_scaling.original_max_position_embeddings",
                        "llama3 original_max_position_embeddings 0");
    expect_rope_refused(&llama32, 0, "max_seq_len", "a table of max_seq_len 0");
    // the scaling fields of a default config are not read
    float inv[32];
    char err[256];
    const int ok = rope_inv_freq_checked(inv, &qwen, err, sizeof(err)) == 0;
    test_check(ok, "rope: a default config with zero scaling fields is accepted%s", why(ok, err));
}

int main(int argc, char **argv) {
    const char *fixture = argc > 1 ? argv[1] : RAND_FIXTURE;
    snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/test_llmc_XXXXXX");
    if (mkdtemp(tmp_dir) == NULL) {
        test_check(0, "create a temporary directory");
        return test_summary();
    }
    test_utils();
    test_rand(fixture);
    test_tokenizer();
    test_dataloader();
    test_checkpoint();
    test_rope();
    if (rmdir(tmp_dir) != 0) printf("  (note: %s not empty, left in place)\n", tmp_dir);
    return test_summary();
}
