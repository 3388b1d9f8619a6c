/*
test_hf.c - CPU tests of the Hugging Face checkpoints: llmc/safetensors.h (the format read and
written, every malformed file refused naming the file and the tensor, sharded checkpoints),
llmc/hf_config.h (config.json of Llama 3, Qwen2.5 and GPT-2 in transformers 4.x's and 5.x's
forms, every bad or missing field refused naming it), llmc/hf_model.h (our table -> a model
directory -> our table bitwise for small Llama / Qwen2 / GPT-2 models, tied and untied, biased
or not, in one file and in shards; the tensors' names, shapes, row splits and Conv1D transposes;
every bad directory refused naming the file and the tensor; the atomic directory write),
llmc/models.h's -e DIR, and llmc/checkpoint.h's hook for the directory and its leftovers.
Needs no GPU; test/test_hf_reference.py checks the same files against the reference
safetensors implementation.

    build/test_hf          (the last line is "N passed, M failed")
Temporary files go to a fresh /tmp/test_hf_XXXXXX directory, removed at the end.
*/
#define _POSIX_C_SOURCE 200809L  // mkdtemp
#include "../llmc/checkpoint.h"
#include "../llmc/hf_config.h"
#include "../llmc/hf_model.h"
#include "../llmc/models.h"
#include "../llmc/safetensors.h"
#include "test_util.h"
#include "test_files.h"

#include <dirent.h>
#include <sys/stat.h>

static int same_file(const char *a, const char *b) {
    size_t na, nb;
    unsigned char *x = read_all(a, &na), *y = read_all(b, &nb);
    const int same = x != NULL && y != NULL && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

// removes a directory tree (of our temporary files)
static void remove_tree(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return;
    if (!S_ISDIR(sb.st_mode)) {
        unlink(path);
        return;
    }
    DIR *d = opendir(path);
    struct dirent *e;
    char sub[1024];
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
        remove_tree(sub);
    }
    if (d != NULL) closedir(d);
    rmdir(path);
}

// how many entries of dir start with prefix
static int count_prefixed(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    while (d != NULL && (e = readdir(d)) != NULL) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    if (d != NULL) closedir(d);
    return n;
}

// A safetensors file from its parts: N (little endian), the header text, data_len bytes of data
// (byte i = i % 251); header_len_override != 0 writes that N instead.
static int st_raw(const char *path, const char *header, size_t data_len, uint64_t header_len_override) {
    const size_t hl = strlen(header);
    const size_t total = 8 + hl + data_len;
    unsigned char *buf = (unsigned char *)malloc(total + 1);
    const uint64_t n = header_len_override ? header_len_override : hl;
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((n >> (8 * i)) & 0xFF);
    memcpy(buf + 8, header, hl);
    for (size_t i = 0; i < data_len; i++) buf[8 + hl + i] = (unsigned char)(i % 251);
    const int ok = write_bytes(path, buf, total);
    free(buf);
    return ok;
}

// ----------------------------------------------------------------------------
// safetensors.h

static void test_f16(void) {
    printf("-- safetensors.h: F16 -> fp32, every one of the 65536 values\n");
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float got = safetensors_f16_to_float((uint16_t)h);
        const int sign = (h >> 15) & 1, exp = (h >> 10) & 31, mant = h & 1023;
        uint32_t gu;
        memcpy(&gu, &got, 4);
        if (exp == 31) {  // inf / NaN with its payload
            const uint32_t want = ((uint32_t)sign << 31) | 0x7f800000u | ((uint32_t)mant << 13);
            bad += gu != want;
            continue;
        }
        const double v = exp == 0 ? ldexp((double)mant, -24) : ldexp(1024.0 + mant, exp - 25);
        const float want = (float)(sign ? -v : v);
        uint32_t wu;
        memcpy(&wu, &want, 4);
        bad += gu != wu;
    }
    test_check(bad == 0, "F16 -> fp32 exact for all 65536 bit patterns (subnormals, -0, inf, NaN payloads): %d wrong",
               bad);
}

static void test_safetensors_roundtrip(void) {
    printf("-- safetensors.h: write, read back\n");
    char path[600], err[1024] = "";
    tmp_path(path, sizeof(path), "rt.safetensors");
    float f32[6] = {1.0f, -2.5f, 3.14159265f, 1e-30f, -0.0f, 65504.0f};
    uint16_t bf[4] = {0x3f80, 0xbf80, 0x0001, 0x7f7f};
    uint16_t f16[3] = {0x3c00, 0x0001, 0xfbff};  // 1, the smallest subnormal, -65504
    unsigned char flags[5] = {1, 0, 1, 1, 0};
    float scalar = 42.0f;
    float mat[6] = {1, 2, 3, 4, 5, 6};  // (2, 3), written transposed as (3, 2)
    SafeTensorsWriteTensor t[7];
    memset(t, 0, sizeof(t));
    t[0].name = "f32"; t[0].dtype = ST_F32; t[0].ndim = 2; t[0].shape[0] = 2; t[0].shape[1] = 3; t[0].data = f32;
    t[1].name = "bf16"; t[1].dtype = ST_BF16; t[1].ndim = 1; t[1].shape[0] = 4; t[1].data = bf;
    t[2].name = "f16"; t[2].dtype = ST_F16; t[2].ndim = 1; t[2].shape[0] = 3; t[2].data = f16;
    t[3].name = "flags"; t[3].dtype = ST_BOOL; t[3].ndim = 1; t[3].shape[0] = 5; t[3].data = flags;
    t[4].name = "scalar"; t[4].dtype = ST_F32; t[4].ndim = 0; t[4].data = &scalar;
    t[5].name = "empty"; t[5].dtype = ST_F32; t[5].ndim = 2; t[5].shape[0] = 0; t[5].shape[1] = 7; t[5].data = NULL;
    t[6].name = "conv"; t[6].dtype = ST_F32; t[6].ndim = 2; t[6].shape[0] = 3; t[6].shape[1] = 2; t[6].data = mat;
    t[6].transposed = 1;
    int rc = safetensors_write_file_checked(path, t, 7, 0, err, sizeof(err));
    test_check(rc == 0, "write 7 tensors (F32, BF16, F16, BOOL, a scalar, an empty one, a transposed one)%s%s",
               err[0] ? ": " : "", err);
    size_t n = 0;
    unsigned char *raw = read_all(path, &n);
    uint64_t hl = 0;
    for (int i = 7; raw != NULL && i >= 0; i--) hl = (hl << 8) | raw[i];
    int spaces = raw != NULL && hl % 8 == 0;
    const char *h = raw != NULL ? (const char *)raw + 8 : "";
    int end = (int)hl;
    while (spaces && end > 0 && h[end - 1] == ' ') end--;
    spaces = spaces && end > 0 && h[end - 1] == '}';
    test_check(spaces && strncmp(h, "{\"__metadata__\":{\"format\":\"pt\"},\"f32\":{\"dtype\":\"F32\",\"shape\":[2,3],"
                                 "\"data_offsets\":[0,24]}", 80) == 0,
               "the header: compact JSON, __metadata__ {format: pt} first, tensors in the order given, padded with "
               "spaces to %llu (a multiple of 8)", (unsigned long long)hl);
    free(raw);
    SafeTensorsFile f;
    rc = safetensors_open_checked(&f, path, err, sizeof(err));
    test_check(rc == 0 && f.num_tensors == 7 && f.num_metadata == 1 &&
                   strcmp(safetensors_metadata_get(&f, "format"), "pt") == 0,
               "read back: 7 tensors, the metadata%s%s", err[0] ? ": " : "", err);
    if (rc != 0) return;
    float out[8];
    uint16_t outb[8];
    const SafeTensor *s = safetensors_find(&f, "f32");
    rc = s != NULL && s->ndim == 2 && s->shape[0] == 2 && s->shape[1] == 3 &&
         safetensors_read_checked(&f, s, ST_F32, out, err, sizeof(err)) == 0;
    test_check(rc && memcmp(out, f32, sizeof(f32)) == 0, "F32 -> fp32 bitwise");
    rc = safetensors_read_checked(&f, s, ST_BF16, outb, err, sizeof(err)) == 0;
    int ok = rc;
    for (int i = 0; i < 6; i++) ok = ok && outb[i] == bf16_from_float(f32[i]);
    test_check(ok, "F32 -> bf16 rounds to nearest even (llmc/bf16.h)");
    s = safetensors_find(&f, "bf16");
    ok = s != NULL && safetensors_read_checked(&f, s, ST_F32, out, err, sizeof(err)) == 0 &&
         safetensors_read_checked(&f, s, ST_BF16, outb, err, sizeof(err)) == 0;
    for (int i = 0; ok && i < 4; i++) ok = outb[i] == bf[i] && out[i] == float_from_bf16(bf[i]);
    test_check(ok, "BF16 -> bf16 and fp32 exactly");
    s = safetensors_find(&f, "f16");
    ok = s != NULL && safetensors_read_checked(&f, s, ST_F32, out, err, sizeof(err)) == 0;
    test_check(ok && out[0] == 1.0f && out[1] == ldexpf(1.0f, -24) && out[2] == -65504.0f, "F16 -> fp32 exactly");
    s = safetensors_find(&f, "scalar");
    ok = s != NULL && s->ndim == 0 && s->numel == 1 && safetensors_read_checked(&f, s, ST_F32, out, err, sizeof(err)) == 0;
    test_check(ok && out[0] == 42.0f, "a scalar (shape [])");
    s = safetensors_find(&f, "empty");
    test_check(s != NULL && s->numel == 0 && s->begin == s->end, "an empty tensor (shape [0, 7]) takes no bytes");
    s = safetensors_find(&f, "conv");
    ok = s != NULL && s->shape[0] == 3 && s->shape[1] == 2 && safetensors_read_checked(&f, s, ST_F32, out, err, sizeof(err)) == 0;
    test_check(ok && out[0] == 1 && out[1] == 4 && out[2] == 2 && out[3] == 5 && out[4] == 3 && out[5] == 6,
               "a transposed write: (2, 3) data stored as its (3, 2) transpose");
    s = safetensors_find(&f, "flags");
    rc = s != NULL ? safetensors_read_checked(&f, s, ST_F32, out, err, sizeof(err)) : 0;
    test_check(rc < 0 && contains(err, path) && contains(err, "'flags'") && contains(err, "BOOL"),
               "a BOOL tensor is in the header but its values are refused, naming file, tensor and dtype: %s", err);
    test_check(safetensors_find(&f, "nope") == NULL, "lookup of an absent name: NULL");
    safetensors_close(&f);

    // the writer refuses what it cannot write
    SafeTensorsWriteTensor dup[2];
    memset(dup, 0, sizeof(dup));
    dup[0] = t[0];
    dup[1] = t[0];
    rc = safetensors_write_file_checked(path, dup, 2, 0, err, sizeof(err));
    test_check(rc < 0 && contains(err, "'f32' given twice"), "the writer refuses a name given twice: %s", err);
}

// each bad file: its header (and data size, or a header length to write instead) and the message
typedef struct {
    const char *what, *header;
    size_t data;
    uint64_t header_len;
    const char *message;
} BadFile;

static void test_safetensors_bad(void) {
    printf("-- safetensors.h: malformed files, each refused naming the file (and tensor)\n");
    static const BadFile bad[] = {
        {"JSON that does not parse", "{\"a\": {\"dtype\": \"F32\", ", 0, 0, "not valid JSON"},
        {"a header not starting with '{'", "[1, 2]", 0, 0, "does not start with '{'"},
        {"bytes after the object", "{} x", 0, 0, "other than whitespace after its JSON object"},
        {"an entry that is not an object", "{\"a\": 1}", 0, 0, "the entry of tensor 'a' is not an object"},
        {"no dtype", "{\"a\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4, 0, "tensor 'a' has no dtype"},
        {"an unknown dtype", "{\"a\": {\"dtype\": \"F33\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4, 0,
         "tensor 'a' has the unknown dtype 'F33'"},
        {"a shape that is not an array", "{\"a\": {\"dtype\": \"F32\", \"shape\": 1, \"data_offsets\": [0, 4]}}", 4, 0,
         "tensor 'a' has a non-array shape"},
        {"a negative dimension", "{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", 4, 0,
         "tensor 'a': shape[0] is not a non-negative integer"},
        {"a fractional dimension", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}", 4, 0,
         "shape[0] is not a non-negative integer"},
        {"a dimension that is a string", "{\"a\": {\"dtype\": \"F32\", \"shape\": [\"1\"], \"data_offsets\": [0, 4]}}",
         4, 0, "shape[0] is not a non-negative integer"},
        {"no data_offsets", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4, 0, "tensor 'a': data_offsets missing"},
        {"three data_offsets", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4, 8]}}", 8, 0,
         "data_offsets malformed"},
        {"begin > end", "{\"a\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [4, 0]}}", 4, 0,
         "data_offsets malformed"},
        {"a size that is not dtype x shape", "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]}}",
         4, 0, "hold 4 bytes, but 2 elements of F32 need 8"},
        {"overlapping offsets",
         "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
         "\"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}", 12, 0, "tensors 'a' and 'b' overlap"},
        {"a hole between tensors",
         "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
         "\"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 12]}}", 12, 0,
         "a hole of 4 bytes in the data before tensor 'b'"},
        {"a hole at the start", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", 8, 0,
         "a hole of 4 bytes in the data before tensor 'a'"},
        {"bytes after the last tensor", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 8, 0,
         "4 bytes at the end belong to no tensor"},
        {"offsets past the end of the data", "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}",
         4, 0, "tensor 'a': data_offsets [0, 8] run past the end of the data region (4 bytes)"},
        {"a name given twice",
         "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
         "\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", 8, 0, "tensor 'a' appears twice"},
        {"__metadata__ not an object", "{\"__metadata__\": [1]}", 0, 0, "__metadata__ is not an object"},
        {"__metadata__ with a number", "{\"__metadata__\": {\"format\": 1}}", 0, 0, "__metadata__ 'format' is not a string"},
        {"a header that is not an object", "{}", 0, 0, NULL},  // (valid: no tensors) -- checked below
        {"too many dimensions", "{\"a\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 4]}}",
         4, 0, "tensor 'a' has 9 dimensions"},
        {"a header length beyond the file", "{}", 0, 1000, "header length 1000 runs past the end of the file"},
        {"a header length above 100 MB", "{}", 0, 100000001, "header length 100000001 is above the limit"},
    };
    char path[600], err[1024];
    tmp_path(path, sizeof(path), "bad.safetensors");
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (bad[i].message == NULL) continue;
        st_raw(path, bad[i].header, bad[i].data, bad[i].header_len);
        SafeTensorsFile f;
        err[0] = 0;
        const int rc = safetensors_open_checked(&f, path, err, sizeof(err));
        test_check(rc < 0 && contains(err, path) && contains(err, bad[i].message), "%s: %s", bad[i].what, err);
        safetensors_close(&f);
    }
    SafeTensorsFile f;
    st_raw(path, "{}      ", 0, 0);
    test_check(safetensors_open_checked(&f, path, err, sizeof(err)) == 0 && f.num_tensors == 0,
               "an empty header {} padded with spaces: a file of no tensors");
    safetensors_close(&f);

    // truncations of a good file
    char good[600];
    tmp_path(good, sizeof(good), "good.safetensors");
    float v[4] = {1, 2, 3, 4};
    SafeTensorsWriteTensor t;
    memset(&t, 0, sizeof(t));
    t.name = "w";
    t.dtype = ST_F32;
    t.ndim = 1;
    t.shape[0] = 4;
    t.data = v;
    safetensors_write_file_checked(good, &t, 1, 0, err, sizeof(err));
    size_t n = 0;
    unsigned char *bytes = read_all(good, &n);
    const size_t cuts[] = {0, 5, 20, n - 1};
    const char *msgs[] = {"0 bytes, too short for the 8-byte header length", "5 bytes, too short",
                          "runs past the end of the file", "run past the end of the data region"};
    for (int k = 0; k < 4; k++) {
        write_bytes(path, bytes, cuts[k]);
        err[0] = 0;
        const int rc = safetensors_open_checked(&f, path, err, sizeof(err));
        test_check(rc < 0 && contains(err, path) && contains(err, msgs[k]), "truncated to %zu of %zu bytes: %s",
                   cuts[k], n, err);
        safetensors_close(&f);
    }
    free(bytes);
    err[0] = 0;
    test_check(safetensors_open_checked(&f, tmp_dir, err, sizeof(err)) < 0 && contains(err, tmp_dir),
               "a directory is not a safetensors file: %s", err);
    tmp_path(path, sizeof(path), "absent.safetensors");
    test_check(safetensors_open_checked(&f, path, err, sizeof(err)) < 0 && contains(err, path),
               "an absent file: %s", err);
    // an unsupported dtype is read only to be refused
    tmp_path(path, sizeof(path), "i64.safetensors");
    st_raw(path, "{\"ids\": {\"dtype\": \"I64\", \"shape\": [1], \"data_offsets\": [0, 8]}}", 8, 0);
    float out[2];
    int rc = safetensors_open_checked(&f, path, err, sizeof(err));
    rc = rc == 0 ? safetensors_read_checked(&f, safetensors_find(&f, "ids"), ST_F32, out, err, sizeof(err)) : 0;
    test_check(rc < 0 && contains(err, path) && contains(err, "'ids' has dtype I64; only F32, F16 and BF16"),
               "an I64 tensor's values: refused naming file, tensor and dtype: %s", err);
    safetensors_close(&f);
}

// every corruption of a good file: opened, or refused with a message naming it; never a crash
static void test_safetensors_fuzz(void) {
    printf("-- safetensors.h: 3000 corrupted files (bytes changed, cut short)\n");
    char good[600], path[600], err[1024];
    tmp_path(good, sizeof(good), "fuzz_good.safetensors");
    tmp_path(path, sizeof(path), "fuzz.safetensors");
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t b[3] = {1, 2, 3};
    SafeTensorsWriteTensor t[2];
    memset(t, 0, sizeof(t));
    t[0].name = "a";
    t[0].dtype = ST_F32;
    t[0].ndim = 2;
    t[0].shape[0] = 2;
    t[0].shape[1] = 3;
    t[0].data = a;
    t[1].name = "bb";
    t[1].dtype = ST_BF16;
    t[1].ndim = 1;
    t[1].shape[0] = 3;
    t[1].data = b;
    safetensors_write_file_checked(good, t, 2, 0, err, sizeof(err));
    size_t n = 0;
    unsigned char *bytes = read_all(good, &n);
    unsigned char *mut = (unsigned char *)malloc(n + 1);
    uint64_t rng = 99;
    int opened = 0, refused = 0, unnamed = 0;
    static const char repl[] = "{}[]\":,0123456789-.eE \\ntfu";
    for (int k = 0; k < 3000 && bytes != NULL; k++) {
        memcpy(mut, bytes, n);
        size_t len = n;
        const int flips = 1 + (int)(k % 3);
        for (int f = 0; f < flips; f++) {
            rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
            const size_t at = (size_t)(rng >> 33) % n;
            mut[at] = (k & 1) ? (unsigned char)(rng >> 13) : (unsigned char)repl[(rng >> 20) % (sizeof(repl) - 1)];
        }
        if (k % 7 == 0) len = (size_t)(rng >> 40) % n;
        write_bytes(path, mut, len);
        SafeTensorsFile f;
        err[0] = 0;
        if (safetensors_open_checked(&f, path, err, sizeof(err)) == 0) {
            opened++;
            for (int i = 0; i < f.num_tensors; i++) {  // reading what opened must be safe too
                float *out = (float *)malloc((size_t)f.tensors[i].numel * sizeof(float) + 4);
                safetensors_read_checked(&f, &f.tensors[i], ST_F32, out, err, sizeof(err));
                free(out);
            }
            safetensors_close(&f);
        } else {
            refused++;
            unnamed += !contains(err, path);
        }
    }
    free(mut);
    free(bytes);
    test_check(unnamed == 0 && refused > 2000, "%d refused, every message naming the file (%d without); %d still "
               "valid (a changed value or name), read without harm", refused, unnamed, opened);
}

static void test_shards(void) {
    printf("-- safetensors.h: shards and the index\n");
    // huggingface_hub's documented example: [6, 6, 2, 6, 2, 2] GB under 10 GB -> [6] [6+2] [6+2+2]
    SafeTensorsWriteTensor t[6];
    memset(t, 0, sizeof(t));
    const uint64_t sizes[6] = {6, 6, 2, 6, 2, 2};
    for (int i = 0; i < 6; i++) {
        t[i].dtype = ST_U8;
        t[i].ndim = 1;
        t[i].shape[0] = sizes[i];
    }
    int shard_of[6];
    int shards = safetensors_plan_shards(t, 6, 10, shard_of);
    test_check(shards == 3 && shard_of[0] == 0 && shard_of[1] == 1 && shard_of[2] == 1 && shard_of[3] == 2 &&
                   shard_of[4] == 2 && shard_of[5] == 2, "shard plan [6,6,2,6,2,2] under 10: [6] [6,2] [6,2,2]");
    t[1].shape[0] = 12;  // larger than the limit: a shard of its own
    shards = safetensors_plan_shards(t, 6, 10, shard_of);
    test_check(shards == 4 && shard_of[0] == 0 && shard_of[1] == 1 && shard_of[2] == 2 && shard_of[5] == 3,
               "a tensor above the limit gets a shard of its own: %d shards", shards);
    shards = safetensors_plan_shards(t, 6, 1000, shard_of);
    test_check(shards == 1, "all under the limit: one file");

    // a sharded model written and read back
    char dir[256], path[600], err[1024] = "";
    tmp_path(dir, sizeof(dir), "sharded");
    mkdir(dir, 0777);
    float data[5][16];
    char names[5][16];
    SafeTensorsWriteTensor w[5];
    memset(w, 0, sizeof(w));
    for (int i = 0; i < 5; i++) {
        for (int j = 0; j < 16; j++) data[i][j] = (float)(i * 100 + j);
        snprintf(names[i], sizeof(names[i]), "t%d", i);
        w[i].name = names[i];
        w[i].dtype = ST_F32;
        w[i].ndim = 2;
        w[i].shape[0] = 4;
        w[i].shape[1] = 4;
        w[i].data = data[i];
    }
    int rc = safetensors_write_model_checked(dir, w, 5, 130, 0, err, sizeof(err));  // 64 bytes each: 2 per shard
    snprintf(path, sizeof(path), "%s/model-00003-of-00003.safetensors", dir);
    test_check(rc == 0 && safetensors_is_file_(path), "5 tensors of 64 bytes under 130: 3 shards%s%s",
               err[0] ? ": " : "", err);
    SafeTensorsModel m;
    rc = safetensors_model_open_checked(&m, dir, err, sizeof(err));
    int ok = rc == 0 && m.sharded && m.num_files == 3 && m.num_tensors == 5;
    for (int i = 0; ok && i < 5; i++) {
        const SafeTensorsEntry *e = safetensors_model_find(&m, names[i]);
        float out[16];
        ok = e != NULL && e->file == i / 2 &&
             safetensors_read_checked(&m.files[e->file], e->tensor, ST_F32, out, err, sizeof(err)) == 0 &&
             memcmp(out, data[i], sizeof(out)) == 0;
    }
    test_check(ok, "read back through the index: every tensor in its shard, bitwise%s%s", err[0] ? ": " : "", err);
    safetensors_model_close(&m);
    char index[600];
    snprintf(index, sizeof(index), "%s/%s", dir, SAFETENSORS_INDEX_NAME);
    size_t n = 0;
    char *text = (char *)read_all(index, &n);
    cJSON *root = text != NULL ? cJSON_Parse(text) : NULL;
    const cJSON *total = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "metadata"), "total_size");
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    const cJSON *t4 = cJSON_GetObjectItemCaseSensitive(map, "t4");
    test_check(cJSON_IsNumber(total) && total->valuedouble == 320 && cJSON_GetArraySize(map) == 5 && cJSON_IsString(t4) &&
                   strcmp(t4->valuestring, "model-00003-of-00003.safetensors") == 0,
               "the index: metadata.total_size 320, weight_map of the 5 tensors");
    cJSON_Delete(root);
    free(text);

    // bad sharded directories, each made from the good one
    char bak[600], other[600];
    snprintf(bak, sizeof(bak), "%s/index.bak", dir);
    rename(index, bak);
    snprintf(path, sizeof(path), "%s/model-00002-of-00003.safetensors", dir);
    const char *good_index = NULL;
    text = (char *)read_all(bak, &n);
    good_index = text;
    struct { const char *what, *from, *to, *message; } edits[] = {
        {"a shard named in the index but absent", "model-00002-of-00003", "model-00009-of-00003",
         "shard 'model-00009-of-00003.safetensors' (of tensor 't2') is missing"},
        {"a tensor of the index missing from its shard", "\"t4\":\t\"model-00003", "\"t4\":\t\"model-00001",
         "tensor 't4' is missing from its shard 'model-00001-of-00003.safetensors'"},
        {"a shard file name that leaves the directory", "\"t0\":\t\"model-00001-of-00003.safetensors",
         "\"t0\":\t\"../model-00001-of-00003.safetensors", "tensor 't0' maps to a bad file name"},
        {"a tensor of a shard that the index lacks", "\"t4\":\t\"model-00003-of-00003.safetensors\"",
         "\"u4\":\t\"model-00003-of-00003.safetensors\"", "tensor 'u4' is missing from its shard"},
        {"no weight_map", "weight_map", "weights", "no weight_map"},
        {"an index that is not JSON", "{", "[", "not valid JSON"},
        {"an index with bytes after its object", "\n}", "\n}}", "not valid JSON"},
    };
    for (size_t k = 0; k < sizeof(edits) / sizeof(edits[0]); k++) {
        const char *at = good_index != NULL ? strstr(good_index, edits[k].from) : NULL;
        if (at == NULL) {
            test_check(0, "%s: the index has no '%s' to edit", edits[k].what, edits[k].from);
            continue;
        }
        char *edited = (char *)malloc(n + 256);
        const size_t pre = (size_t)(at - good_index);
        memcpy(edited, good_index, pre);
        strcpy(edited + pre, edits[k].to);
        strcat(edited, at + strlen(edits[k].from));
        write_bytes(index, edited, strlen(edited));
        free(edited);
        err[0] = 0;
        rc = safetensors_model_open_checked(&m, dir, err, sizeof(err));
        test_check(rc < 0 && contains(err, index) && contains(err, edits[k].message), "%s: %s", edits[k].what, err);
        safetensors_model_close(&m);
    }
    // a tensor present in two shards: shard 3 gets t0 as well
    write_bytes(index, good_index, n);
    snprintf(path, sizeof(path), "%s/model-00003-of-00003.safetensors", dir);
    SafeTensorsWriteTensor three[3] = {w[4], w[0], w[3]};
    three[0] = w[4];
    three[1] = w[0];
    safetensors_write_file_checked(path, three, 2, 0, err, sizeof(err));
    err[0] = 0;
    rc = safetensors_model_open_checked(&m, dir, err, sizeof(err));
    test_check(rc < 0 && contains(err, "tensor 't0' is present in two shards"), "a tensor in two shards: %s", err);
    safetensors_model_close(&m);
    safetensors_write_file_checked(path, three, 1, 0, err, sizeof(err));  // back to t4 alone
    // a shard missing from the disk
    snprintf(path, sizeof(path), "%s/model-00002-of-00003.safetensors", dir);
    snprintf(other, sizeof(other), "%s/moved.safetensors", dir);
    rename(path, other);
    err[0] = 0;
    rc = safetensors_model_open_checked(&m, dir, err, sizeof(err));
    test_check(rc < 0 && contains(err, "shard 'model-00002-of-00003.safetensors'") && contains(err, "is missing"),
               "a shard deleted from the directory: %s", err);
    safetensors_model_close(&m);
    rename(other, path);
    err[0] = 0;
    test_check(safetensors_model_open_checked(&m, dir, err, sizeof(err)) == 0, "restored: opens again%s%s",
               err[0] ? ": " : "", err);
    safetensors_model_close(&m);
    // model.safetensors beside the index: ambiguous; neither: nothing to read
    snprintf(path, sizeof(path), "%s/%s", dir, SAFETENSORS_SINGLE_NAME);
    safetensors_write_file_checked(path, w, 1, 0, err, sizeof(err));
    rc = safetensors_model_open_checked(&m, dir, err, sizeof(err));
    test_check(rc < 0 && contains(err, "ambiguous"), "both model.safetensors and the index: %s", err);
    remove(path);
    remove(index);
    rc = safetensors_model_open_checked(&m, dir, err, sizeof(err));
    test_check(rc < 0 && contains(err, "has neither model.safetensors nor model.safetensors.index.json"),
               "neither: %s", err);
    free(text);
    remove_tree(dir);
}

// ----------------------------------------------------------------------------
// hf_config.h

// Llama-3.2-1B's config.json as transformers 4.x saves it
static const char *llama32_1b_json =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"
    " \"bos_token_id\": 128000, \"eos_token_id\": 128001, \"head_dim\": 64, \"hidden_act\": \"silu\","
    " \"hidden_size\": 2048, \"initializer_range\": 0.02, \"intermediate_size\": 8192,"
    " \"max_position_embeddings\": 131072, \"mlp_bias\": false, \"model_type\": \"llama\","
    " \"num_attention_heads\": 32, \"num_hidden_layers\": 16, \"num_key_value_heads\": 8, \"pretraining_tp\": 1,"
    " \"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"factor\": 32.0, \"high_freq_factor\": 4.0,"
    " \"low_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"},"
    " \"rope_theta\": 500000.0, \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\","
    " \"transformers_version\": \"4.45.0.dev0\", \"use_cache\": true, \"vocab_size\": 128256}";

// Qwen2.5-0.5B's
static const char *qwen25_05b_json =
    "{\"architectures\": [\"Qwen2ForCausalLM\"], \"attention_dropout\": 0.0, \"bos_token_id\": 151643,"
    " \"eos_token_id\": 151643, \"hidden_act\": \"silu\", \"hidden_size\": 896, \"initializer_range\": 0.02,"
    " \"intermediate_size\": 4864, \"max_position_embeddings\": 32768, \"max_window_layers\": 24,"
    " \"model_type\": \"qwen2\", \"num_attention_heads\": 14, \"num_hidden_layers\": 24, \"num_key_value_heads\": 2,"
    " \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, \"sliding_window\": 32768, \"tie_word_embeddings\": true,"
    " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.40.1\", \"use_cache\": true,"
    " \"use_sliding_window\": false, \"vocab_size\": 151936}";

// GPT-2 124M's (openai-community/gpt2)
static const char *gpt2_json =
    "{\"activation_function\": \"gelu_new\", \"architectures\": [\"GPT2LMHeadModel\"], \"attn_pdrop\": 0.1,"
    " \"bos_token_id\": 50256, \"embd_pdrop\": 0.1, \"eos_token_id\": 50256, \"initializer_range\": 0.02,"
    " \"layer_norm_epsilon\": 1e-05, \"model_type\": \"gpt2\", \"n_ctx\": 1024, \"n_embd\": 768, \"n_head\": 12,"
    " \"n_layer\": 12, \"n_positions\": 1024, \"resid_pdrop\": 0.1, \"summary_activation\": null,"
    " \"vocab_size\": 50257}";

// base with key set to value (JSON text), or removed when value is NULL: malloc'd text
static char *json_with(const char *base, const char *key, const char *value) {
    cJSON *root = cJSON_Parse(base);
    cJSON_DeleteItemFromObjectCaseSensitive(root, key);
    if (value != NULL) cJSON_AddItemToObject(root, key, cJSON_Parse(value));
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}

static int parse_text(const char *text, HFConfig *c, char *err, size_t err_len) {
    return hf_config_parse_checked("mem/config.json", text, strlen(text), c, err, err_len);
}

static LlamaConfig descriptor(const char *name) {
    LlamaConfig c;
    char err[256];
    llama_config_from_descriptor(name, 0, &c, err, sizeof(err));
    return c;
}

static void test_config_good(void) {
    printf("-- hf_config.h: published config.json files, transformers 4.x and 5.x forms\n");
    HFConfig c;
    char err[1024] = "", why[1024] = "";
    LlamaConfig want = descriptor("llama3.2-1b");
    int rc = parse_text(llama32_1b_json, &c, err, sizeof(err));
    test_check(rc == 0 && c.family == HF_FAMILY_LLAMA && llama_config_compare(&c.llama, &want, why, sizeof(why)) == 0,
               "Llama-3.2-1B's config.json (4.x: rope_theta + rope_scaling llama3) = the llama3.2-1b descriptor%s%s%s",
               err, why[0] ? " | differs: " : "", why);
    // transformers 5.x: rope_parameters only
    char *a = json_with(llama32_1b_json, "rope_scaling", NULL);
    char *b = json_with(a, "rope_theta", NULL);
    char *v5 = json_with(b, "rope_parameters", "{\"rope_type\": \"llama3\", \"rope_theta\": 500000.0, \"factor\": 32.0,"
                         " \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}");
    why[0] = 0;
    rc = parse_text(v5, &c, err, sizeof(err));
    test_check(rc == 0 && llama_config_compare(&c.llama, &want, why, sizeof(why)) == 0,
               "the same in 5.x's form (rope_parameters with rope_theta, no top-level fields)%s%s", err, why);
    free(a);
    free(b);
    free(v5);
    want = descriptor("qwen2.5-0.5b");
    why[0] = 0;
    rc = parse_text(qwen25_05b_json, &c, err, sizeof(err));
    test_check(rc == 0 && c.llama.model_type == LLAMA_TYPE_QWEN2 && c.llama.attention_bias == 1 &&
                   llama_config_compare(&c.llama, &want, why, sizeof(why)) == 0,
               "Qwen2.5-0.5B's config.json = the qwen2.5-0.5b descriptor (q/k/v biases implied)%s%s", err, why);
    a = json_with(qwen25_05b_json, "layer_types", "[\"full_attention\", \"full_attention\"]");
    test_check(parse_text(a, &c, err, sizeof(err)) == 0, "5.x's Qwen2 layer_types of full_attention: accepted%s", err);
    free(a);
    GPT2Config g;
    gpt2_config_from_descriptor("d12", 0, &g, err, sizeof(err));
    rc = parse_text(gpt2_json, &c, err, sizeof(err));
    test_check(rc == 0 && c.family == HF_FAMILY_GPT2 && gpt2_config_compare(&c.gpt2, &g, why, sizeof(why)) == 0,
               "GPT-2's config.json = the d12 descriptor (vocab 50257 padded to 50304)%s %s", err, why);
    a = json_with(llama32_1b_json, "eos_token_id", "[128001, 128008, 128009]");
    rc = parse_text(a, &c, err, sizeof(err));
    test_check(rc == 0 && c.llama.eos_token_id == 128001, "eos_token_id as a list: the first (128001)%s", err);
    free(a);
    a = json_with(llama32_1b_json, "bos_token_id", "null");
    rc = parse_text(a, &c, err, sizeof(err));
    test_check(rc == 0 && c.llama.bos_token_id == -1, "bos_token_id null: -1 (none)%s", err);
    free(a);
    a = json_with(llama32_1b_json, "num_key_value_heads", NULL);
    b = json_with(a, "head_dim", NULL);
    rc = parse_text(b, &c, err, sizeof(err));
    test_check(rc == 0 && c.llama.num_key_value_heads == 32 && c.llama.head_dim == 64,
               "Llama without num_key_value_heads / head_dim: transformers' defaults (heads, hidden / heads)%s", err);
    free(a);
    free(b);
    a = json_with(llama32_1b_json, "tie_word_embeddings", NULL);
    rc = parse_text(a, &c, err, sizeof(err));
    test_check(rc == 0 && c.llama.tie_word_embeddings == 0, "tie_word_embeddings absent: false (LlamaConfig's default)");
    free(a);
    a = json_with(llama32_1b_json, "rope_scaling", "{\"type\": \"default\"}");
    rc = parse_text(a, &c, err, sizeof(err));
    test_check(rc == 0 && c.llama.rope_scaling == LLAMA_ROPE_NONE, "rope_scaling {type: default}: plain RoPE%s", err);
    free(a);
}

static void test_json_floats(void) {
    printf("-- hf_config.h: floats written as Python's json writes them\n");
    // repr() of each value, from Python 3
    static const struct { double v; const char *text; } f[] = {
        {1e-5, "1e-05"}, {1e-6, "1e-06"}, {0.02, "0.02"}, {500000.0, "500000.0"}, {1e6, "1000000.0"}, {32.0, "32.0"},
        {0.0, "0.0"}, {0.1 + 0.2, "0.30000000000000004"}, {1e16, "1e+16"}, {1e15, "1000000000000000.0"},
        {123456.789, "123456.789"}, {1e-4, "0.0001"}, {0.00012345, "0.00012345"}, {5e-324, "5e-324"},
        {1.7976931348623157e308, "1.7976931348623157e+308"}, {2.5, "2.5"},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
        cJSON *j = hf_json_float_(f[i].v);
        if (strcmp(j->valuestring, f[i].text) != 0) {
            printf("      %.17g: %s, Python writes %s\n", f[i].v, j->valuestring, f[i].text);
            bad++;
        }
        cJSON_Delete(j);
    }
    test_check(bad == 0, "%d of 16 values differ from Python's repr (1e-05, 0.02, 500000.0, 1e+16, 5e-324, ...)", bad);
}

typedef struct {
    const char *what, *base_name, *key, *value, *message;
} BadConfig;

static void test_config_bad(void) {
    printf("-- hf_config.h: bad config.json, each refused naming the file and the field\n");
    static const char *required[] = {"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                                     "vocab_size", "max_position_embeddings", "rms_norm_eps", "model_type"};
    HFConfig c;
    char err[1024], msg[128];
    for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++) {
        char *t = json_with(llama32_1b_json, required[i], NULL);
        snprintf(msg, sizeof(msg), "field '%s' is missing", required[i]);
        err[0] = 0;
        test_check(parse_text(t, &c, err, sizeof(err)) < 0 && contains(err, "mem/config.json") && contains(err, msg),
                   "Llama without %s: %s", required[i], err);
        free(t);
    }
    static const char *gpt2_required[] = {"n_embd", "n_layer", "n_head", "n_positions", "vocab_size"};
    for (size_t i = 0; i < sizeof(gpt2_required) / sizeof(gpt2_required[0]); i++) {
        char *t = json_with(gpt2_json, gpt2_required[i], NULL);
        snprintf(msg, sizeof(msg), "field '%s' is missing", gpt2_required[i]);
        err[0] = 0;
        test_check(parse_text(t, &c, err, sizeof(err)) < 0 && contains(err, "mem/config.json") && contains(err, msg),
                   "GPT-2 without %s: %s", gpt2_required[i], err);
        free(t);
    }
    static const BadConfig bad[] = {
        {"no rope_theta anywhere", "llama", "rope_theta", NULL, "field 'rope_theta' is missing"},
        {"another model type", "llama", "model_type", "\"mistral\"", "model_type 'mistral' is not one this trainer takes"},
        {"another architecture", "llama", "architectures", "[\"LlamaForSequenceClassification\"]",
         "architectures 'LlamaForSequenceClassification' is not LlamaForCausalLM"},
        {"a GPT-2 class for a llama", "llama", "architectures", "[\"GPT2LMHeadModel\"]", "is not LlamaForCausalLM"},
        {"hidden_act gelu", "llama", "hidden_act", "\"gelu\"", "field 'hidden_act' is 'gelu'"},
        {"mlp_bias true", "llama", "mlp_bias", "true", "field 'mlp_bias' is true"},
        {"attention_bias true (an o_proj bias)", "llama", "attention_bias", "true", "attention_bias 1 with model_type llama"},
        {"a yarn rope", "llama", "rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 4.0}",
         "field 'rope_scaling.rope_type' is 'yarn': only 'default' and 'llama3'"},
        {"a linear rope (old 'type')", "llama", "rope_scaling", "{\"type\": \"linear\", \"factor\": 2.0}", "is 'linear'"},
        {"llama3 without factor", "llama", "rope_scaling",
         "{\"rope_type\": \"llama3\", \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
         "\"original_max_position_embeddings\": 8192}", "field 'rope_scaling.factor' is missing"},
        {"llama3 with a bad factor", "llama", "rope_scaling",
         "{\"rope_type\": \"llama3\", \"factor\": 0.5, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
         "\"original_max_position_embeddings\": 8192}", "rope_scaling.factor 0.5 must be a finite number >= 1"},
        {"rope_theta different in rope_parameters", "llama", "rope_parameters",
         "{\"rope_type\": \"default\", \"rope_theta\": 10000.0}", NULL},  // (rope_scaling wins: see below)
        {"partial rotation", "qwen", "rope_parameters", "{\"rope_type\": \"default\", \"partial_rotary_factor\": 0.5}",
         "field 'rope_parameters.partial_rotary_factor' is 0.5"},
        {"rope_parameters not an object", "qwen", "rope_parameters", "[1]", "field 'rope_parameters' is not an object"},
        {"head_dim not hidden / heads", "llama", "head_dim", "128", "field 'head_dim' 128 is not hidden_size / num_attention_heads"},
        {"hidden_size a string", "llama", "hidden_size", "\"2048\"", "field 'hidden_size' is not an integer"},
        {"vocab_size fractional", "llama", "vocab_size", "128256.5", "field 'vocab_size' is not an integer"},
        {"tie_word_embeddings 1", "llama", "tie_word_embeddings", "1", "field 'tie_word_embeddings' is not true or false"},
        {"num_key_value_heads 3", "llama", "num_key_value_heads", "3", "num_key_value_heads 3 does not divide"},
        {"rms_norm_eps 0", "llama", "rms_norm_eps", "0", "rms_norm_eps 0 must be finite and > 0"},
        {"bos_token_id past the vocabulary", "llama", "bos_token_id", "200000", "bos_token_id 200000"},
        {"eos_token_id a string", "llama", "eos_token_id", "\"</s>\"", "field 'eos_token_id' is neither an integer"},
        {"Qwen2 with a sliding window", "qwen", "use_sliding_window", "true", "field 'use_sliding_window' is true"},
        {"Qwen2 with sliding layers", "qwen", "layer_types", "[\"sliding_attention\"]", "field 'layer_types'"},
        {"Qwen2 without its kv heads (transformers' 32 does not divide 14)", "qwen", "num_key_value_heads", NULL,
         "num_key_value_heads 32 does not divide num_attention_heads 14"},
        {"GPT-2 with erf GELU", "gpt2", "activation_function", "\"gelu\"", "field 'activation_function' is 'gelu'"},
        {"GPT-2 with eps 1e-6", "gpt2", "layer_norm_epsilon", "1e-06", "field 'layer_norm_epsilon' is 1e-06"},
        {"GPT-2 untied", "gpt2", "tie_word_embeddings", "false", "field tie_word_embeddings false is not supported"},
        {"GPT-2 with n_inner 3 C", "gpt2", "n_inner", "2304", "field 'n_inner' 2304 is not 4 * n_embd"},
        {"GPT-2 scaled by layer", "gpt2", "scale_attn_by_inverse_layer_idx", "true", "scale_attn_by_inverse_layer_idx true"},
        {"GPT-2 as a llama", "gpt2", "architectures", "[\"LlamaForCausalLM\"]", "is not GPT2LMHeadModel (model_type gpt2)"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (bad[i].message == NULL) continue;
        const char *base = strcmp(bad[i].base_name, "llama") == 0 ? llama32_1b_json
                         : strcmp(bad[i].base_name, "qwen") == 0 ? qwen25_05b_json : gpt2_json;
        char *t = json_with(base, bad[i].key, bad[i].value);
        err[0] = 0;
        test_check(parse_text(t, &c, err, sizeof(err)) < 0 && contains(err, "mem/config.json") &&
                       contains(err, bad[i].message), "%s: %s", bad[i].what, err);
        free(t);
    }
    // rope_theta in two places: rope_parameters' (used by 5.x when rope_scaling is null) against the top level's
    char *a = json_with(qwen25_05b_json, "rope_parameters", "{\"rope_type\": \"default\", \"rope_theta\": 10000.0}");
    err[0] = 0;
    test_check(parse_text(a, &c, err, sizeof(err)) < 0 && contains(err, "field 'rope_theta' is 1000000 at the top level "
                                                                   "and 10000 in rope_parameters"),
               "rope_theta differing between the top level and rope_parameters: %s", err);
    free(a);
    // rope_scaling set: both versions use it and ignore rope_parameters
    a = json_with(llama32_1b_json, "rope_parameters", "{\"rope_type\": \"default\", \"rope_theta\": 10000.0}");
    test_check(parse_text(a, &c, err, sizeof(err)) == 0 && c.llama.rope_scaling == LLAMA_ROPE_LLAMA3 &&
                   c.llama.rope_theta == 500000.0, "rope_scaling set: it wins over rope_parameters (4.x and 5.x alike)");
    free(a);
    err[0] = 0;
    test_check(parse_text("{\"model_type\": \"llama\",", &c, err, sizeof(err)) < 0 && contains(err, "mem/config.json") &&
                   contains(err, "not valid JSON"), "config.json that does not parse: %s", err);
    test_check(parse_text("[1]", &c, err, sizeof(err)) < 0 && contains(err, "not a JSON object"),
               "config.json that is not an object: %s", err);
    char *tail = (char *)malloc(strlen(gpt2_json) + 8);
    sprintf(tail, "%s }", gpt2_json);
    err[0] = 0;
    test_check(parse_text(tail, &c, err, sizeof(err)) < 0 && contains(err, "not valid JSON"),
               "config.json with bytes after its object: %s", err);
    sprintf(tail, "%s \n", gpt2_json);
    test_check(parse_text(tail, &c, err, sizeof(err)) == 0, "  and with whitespace after it: fine");
    free(tail);
}

// ----------------------------------------------------------------------------
// hf_model.h: round trips and the tensors

static LlamaConfig small_llama(int qwen, int tied) {
    LlamaConfig c;
    memset(&c, 0, sizeof(c));
    c.model_type = qwen ? LLAMA_TYPE_QWEN2 : LLAMA_TYPE_LLAMA;
    c.hidden_size = 32;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 2;
    c.num_key_value_heads = 1;
    c.head_dim = 16;
    c.intermediate_size = 64;
    c.vocab_size = 200;
    c.padded_vocab_size = 256;
    c.max_position_embeddings = 128;
    c.tie_word_embeddings = tied;
    c.attention_bias = qwen;
    c.bos_token_id = 1;
    c.eos_token_id = qwen ? 1 : 2;
    c.rms_norm_eps = qwen ? 1e-6 : 1e-5;
    c.initializer_range = 0.02;
    if (qwen) {
        c.rope_theta = 1000000.0;
    } else {
        c.rope_theta = 500000.0;
        c.rope_scaling = LLAMA_ROPE_LLAMA3;
        c.rope_factor = 32.0;
        c.rope_low_freq_factor = 1.0;
        c.rope_high_freq_factor = 4.0;
        c.rope_original_max_position_embeddings = 64;
    }
    return c;
}

static GPT2Config small_gpt2(void) {
    GPT2Config c;
    c.max_seq_len = 64;
    c.vocab_size = 300;
    c.padded_vocab_size = 384;
    c.num_layers = 2;
    c.num_heads = 2;
    c.channels = 32;
    return c;
}

// random bf16 parameters of spec (the padding rows V..Vp 0, as a reader makes them): malloc'd
static uint16_t *random_params(const ModelSpec *s, uint64_t seed) {
    const size_t n = s->num_parameters;
    float *f = (float *)malloc(n * sizeof(float));
    uint16_t *b = (uint16_t *)malloc(n * sizeof(uint16_t));
    fill_uniform(f, n, 1.0f, &seed);
    const int heads[2] = {0, s->head};
    for (int k = 0; k < 2; k++) {
        const ParameterTensor *t = &s->tensors[heads[k]];
        memset(f + t->offset + (size_t)s->vocab_size * s->channels, 0,
               (size_t)(s->padded_vocab_size - s->vocab_size) * s->channels * sizeof(float));
    }
    floats_to_bf16(f, b, n);
    free(f);
    return b;
}

// a raw BF16 tensor of a file of dir, as bits (malloc'd), with its shape; NULL when absent
static uint16_t *read_hf_tensor(const char *dir, const char *name, uint64_t *d0, uint64_t *d1) {
    SafeTensorsModel m;
    char err[1024];
    if (safetensors_model_open_checked(&m, dir, err, sizeof(err)) != 0) return NULL;
    const SafeTensorsEntry *e = safetensors_model_find(&m, name);
    uint16_t *out = NULL;
    if (e != NULL) {
        out = (uint16_t *)malloc((size_t)e->tensor->numel * 2 + 2);
        safetensors_read_checked(&m.files[e->file], e->tensor, ST_BF16, out, err, sizeof(err));
        *d0 = e->tensor->shape[0];
        *d1 = e->tensor->ndim > 1 ? e->tensor->shape[1] : 0;
    }
    safetensors_model_close(&m);
    return out;
}

// ours -> a directory -> ours, bitwise; writing the loaded model again gives the same files
static void roundtrip(const char *label, const ModelSpec *spec, uint64_t max_shard) {
    char dir[256], dir2[512], a[600], b[600], err[1024] = "", why[1024] = "";
    snprintf(dir, sizeof(dir), "%s/%s", tmp_dir, label);
    snprintf(dir2, sizeof(dir2), "%s/%s_again", tmp_dir, label);
    uint16_t *p = random_params(spec, 1234);
    int rc = hf_write_dir_checked(dir, spec, p, max_shard, NULL, 0, err, sizeof(err));
    ModelSpec back;
    float *q = NULL;
    if (rc == 0) rc = model_load_checked(dir, 0, &back, &q, err, sizeof(err));
    int same = rc == 0 && model_spec_compare(&back, spec, why, sizeof(why)) == 0 &&
               back.num_parameters == spec->num_parameters;
    size_t diff = 0;
    for (size_t i = 0; same && i < spec->num_parameters; i++) {
        uint16_t bq = bf16_from_float(q[i]);
        diff += bq != p[i] || float_from_bf16(bq) != q[i];
    }
    test_check(same && diff == 0, "%s: ours -> %s -> ours (-e DIR): the same spec, %zu parameters bitwise (%zu differ)%s%s%s",
               label, max_shard ? "shards" : "model.safetensors", spec->num_parameters, diff, err, why[0] ? " | " : "", why);
    if (rc == 0 && same) {
        uint16_t *p2 = (uint16_t *)malloc(spec->num_parameters * 2);
        floats_to_bf16(q, p2, spec->num_parameters);
        rc = hf_write_dir_checked(dir2, &back, p2, max_shard, NULL, 0, err, sizeof(err));
        snprintf(a, sizeof(a), "%s/config.json", dir);
        snprintf(b, sizeof(b), "%s/config.json", dir2);
        int files_same = rc == 0 && same_file(a, b);
        snprintf(a, sizeof(a), "%s/%s", dir, max_shard ? SAFETENSORS_INDEX_NAME : SAFETENSORS_SINGLE_NAME);
        snprintf(b, sizeof(b), "%s/%s", dir2, max_shard ? SAFETENSORS_INDEX_NAME : SAFETENSORS_SINGLE_NAME);
        files_same = files_same && same_file(a, b);
        test_check(files_same, "%s: written again from what was read: the same bytes (deterministic)%s", label, err);
        free(p2);
        remove_tree(dir2);
    }
    free(q);
    free(p);
}

static void test_roundtrips(void) {
    printf("-- hf_model.h: our table -> Hugging Face directory -> our table\n");
    ModelSpec s;
    const struct { const char *label; int qwen, tied; } v[] = {
        {"llama_untied", 0, 0}, {"llama_tied", 0, 1}, {"qwen_tied", 1, 1}, {"qwen_untied", 1, 0},
    };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        LlamaConfig c = small_llama(v[i].qwen, v[i].tied);
        llama_spec(&c, &s);
        roundtrip(v[i].label, &s, 0);
    }
    LlamaConfig c = small_llama(1, 0);
    llama_spec(&c, &s);
    roundtrip("qwen_sharded", &s, 30000);
    char path[600];
    snprintf(path, sizeof(path), "%s/qwen_sharded/model-00003-of-00003.safetensors", tmp_dir);
    test_check(safetensors_is_file_(path), "qwen_sharded: 3 shards under 30000 bytes (each embedding 12800 bytes)");
    GPT2Config g = small_gpt2();
    gpt2_spec(&g, &s);
    roundtrip("gpt2", &s, 0);
    roundtrip("gpt2_sharded", &s, 30000);
}

static void test_tensors(void) {
    printf("-- hf_model.h: names, shapes, row splits, Conv1D transposes, config.json written\n");
    char dir[256], err[1024] = "";
    ModelSpec s;
    LlamaConfig c = small_llama(1, 0);  // Qwen2: biases, untied
    llama_spec(&c, &s);
    snprintf(dir, sizeof(dir), "%s/names_qwen", tmp_dir);
    uint16_t *p = random_params(&s, 7);
    hf_write_dir_checked(dir, &s, p, 0, NULL, 0, err, sizeof(err));
    const size_t C = 32, Q = 32, KV = 16, I = 64, QKV = Q + 2 * KV;
    const ParameterTensor *qkvw = model_tensor(&s, "qkvw"), *qkvb = model_tensor(&s, "qkvb");
    const ParameterTensor *gu = model_tensor(&s, "gateupw"), *head = model_tensor(&s, "lm_head");
    uint64_t d0 = 0, d1 = 0;
    uint16_t *t = read_hf_tensor(dir, "model.layers.1.self_attn.k_proj.weight", &d0, &d1);
    test_check(t != NULL && d0 == KV && d1 == C &&
                   memcmp(t, p + qkvw->offset + 1 * QKV * C + Q * C, KV * C * 2) == 0,
               "k_proj.weight of layer 1: (%llu, %llu), qkvw's rows [Q, Q + KV) of layer 1", (unsigned long long)d0,
               (unsigned long long)d1);
    free(t);
    t = read_hf_tensor(dir, "model.layers.0.self_attn.v_proj.bias", &d0, &d1);
    test_check(t != NULL && d0 == KV && d1 == 0 && memcmp(t, p + qkvb->offset + Q + KV, KV * 2) == 0,
               "v_proj.bias of layer 0: (%llu), qkvb's [Q + KV, Q + 2 KV)", (unsigned long long)d0);
    free(t);
    t = read_hf_tensor(dir, "model.layers.1.mlp.up_proj.weight", &d0, &d1);
    test_check(t != NULL && d0 == I && d1 == C && memcmp(t, p + gu->offset + 1 * 2 * I * C + I * C, I * C * 2) == 0,
               "up_proj.weight of layer 1: gateupw's rows [I, 2 I)");
    free(t);
    t = read_hf_tensor(dir, "lm_head.weight", &d0, &d1);
    test_check(t != NULL && d0 == 200 && d1 == C && memcmp(t, p + head->offset, 200 * C * 2) == 0,
               "lm_head.weight (untied): its V = 200 rows of our Vp = 256");
    free(t);
    t = read_hf_tensor(dir, "model.embed_tokens.weight", &d0, &d1);
    test_check(t != NULL && d0 == 200 && d1 == C, "embed_tokens.weight: (200, 32)");
    free(t);
    // config.json: both rope forms, the dtypes, floats as floats
    char path[600];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    size_t n = 0;
    char *text = (char *)read_all(path, &n);
    cJSON *root = text != NULL ? cJSON_Parse(text) : NULL;
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
    test_check(root != NULL && cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(root, "rope_scaling")) &&
                   cJSON_GetObjectItemCaseSensitive(rp, "rope_theta") != NULL &&
                   strcmp(cJSON_GetObjectItemCaseSensitive(rp, "rope_type")->valuestring, "default") == 0 &&
                   strcmp(cJSON_GetObjectItemCaseSensitive(root, "torch_dtype")->valuestring, "bfloat16") == 0 &&
                   strcmp(cJSON_GetObjectItemCaseSensitive(root, "dtype")->valuestring, "bfloat16") == 0 &&
                   strcmp(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "architectures"), 0)->valuestring,
                          "Qwen2ForCausalLM") == 0 &&
                   contains(text, "\"rope_theta\":\t1000000.0") && contains(text, "\"rms_norm_eps\":\t1e-06") &&
                   contains(text, "\"hidden_size\":\t32,"),
               "Qwen2's config.json: rope_scaling null, rope_parameters {default, rope_theta}, (torch_)dtype bfloat16, "
               "floats with a point or an exponent (1000000.0, 1e-06), integers plain");
    cJSON_Delete(root);
    free(text);
    free(p);

    c = small_llama(0, 1);  // Llama: llama3 rope, tied
    llama_spec(&c, &s);
    snprintf(dir, sizeof(dir), "%s/names_llama", tmp_dir);
    p = random_params(&s, 8);
    hf_write_dir_checked(dir, &s, p, 0, NULL, 0, err, sizeof(err));
    t = read_hf_tensor(dir, "lm_head.weight", &d0, &d1);
    test_check(t == NULL, "tied: no lm_head.weight");
    free(t);
    snprintf(path, sizeof(path), "%s/config.json", dir);
    text = (char *)read_all(path, &n);
    root = text != NULL ? cJSON_Parse(text) : NULL;
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
    rp = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
    test_check(cJSON_IsObject(rs) && cJSON_GetObjectItemCaseSensitive(rs, "rope_theta") == NULL &&
                   strcmp(cJSON_GetObjectItemCaseSensitive(rs, "rope_type")->valuestring, "llama3") == 0 &&
                   cJSON_GetObjectItemCaseSensitive(rs, "factor")->valuedouble == 32.0 &&
                   cJSON_GetObjectItemCaseSensitive(rp, "rope_theta")->valuedouble == 500000.0 &&
                   cJSON_GetObjectItemCaseSensitive(rp, "original_max_position_embeddings")->valuedouble == 64 &&
                   cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "tie_word_embeddings")) &&
                   cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(root, "attention_bias")) &&
                   contains(text, "\"factor\":\t32.0"),
               "Llama's config.json: rope_scaling llama3 without rope_theta (4.x), rope_parameters with it (5.x), "
               "tie_word_embeddings true, attention_bias false");
    cJSON_Delete(root);
    free(text);
    free(p);

    GPT2Config g = small_gpt2();
    gpt2_spec(&g, &s);
    snprintf(dir, sizeof(dir), "%s/names_gpt2", tmp_dir);
    p = random_params(&s, 9);
    hf_write_dir_checked(dir, &s, p, 0, NULL, 0, err, sizeof(err));
    const ParameterTensor *q = model_tensor(&s, "qkvw"), *fp = model_tensor(&s, "fcprojw");
    t = read_hf_tensor(dir, "transformer.h.1.attn.c_attn.weight", &d0, &d1);
    int ok = t != NULL && d0 == C && d1 == 3 * C;
    for (size_t i = 0; ok && i < C; i++)
        for (size_t j = 0; ok && j < 3 * C; j++) ok = t[i * 3 * C + j] == p[q->offset + 1 * 3 * C * C + j * C + i];
    test_check(ok, "GPT-2 c_attn.weight of layer 1: Conv1D (C, 3C), the transpose of our qkvw (3C, C)");
    free(t);
    t = read_hf_tensor(dir, "transformer.h.0.mlp.c_proj.weight", &d0, &d1);
    ok = t != NULL && d0 == 4 * C && d1 == C;
    for (size_t i = 0; ok && i < 4 * C; i++)
        for (size_t j = 0; ok && j < C; j++) ok = t[i * C + j] == p[fp->offset + j * 4 * C + i];
    test_check(ok, "GPT-2 mlp.c_proj.weight of layer 0: (4C, C), the transpose of our fcprojw (C, 4C)");
    free(t);
    t = read_hf_tensor(dir, "transformer.wte.weight", &d0, &d1);
    test_check(t != NULL && d0 == 300 && d1 == C && memcmp(t, p, 300 * C * 2) == 0,
               "GPT-2 wte: V = 300 rows of our Vp = 384");
    free(t);
    HFConfig hc;
    snprintf(path, sizeof(path), "%s/config.json", dir);
    test_check(hf_config_read_checked(path, &hc, err, sizeof(err)) == 0 && hc.family == HF_FAMILY_GPT2 &&
                   hc.gpt2.vocab_size == 300 && hc.gpt2.max_seq_len == 64,
               "GPT-2's config.json reads back%s", err);
    free(p);
    test_check(hf_num_tensors(&s) == 2 + 12 * 2 + 2, "GPT-2: %zu tensors (wte, wpe, 12 per layer, ln_f)",
               hf_num_tensors(&s));
}

// ----------------------------------------------------------------------------
// hf_model.h: bad directories

// rewrites dir's model.safetensors from spec's tensors (p, bf16), with tensor `drop` left out,
// tensor `reshape` written with its dimensions swapped, and extra tensors added
static void rewrite(const char *dir, const ModelSpec *s, const uint16_t *p, const char *drop, const char *reshape,
                    const SafeTensorsWriteTensor *extra, size_t n_extra, int strip_prefix) {
    HFTensorList list;
    hf_tensor_list(s, &list);
    SafeTensorsWriteTensor *t = (SafeTensorsWriteTensor *)calloc(list.n + n_extra + 1, sizeof(*t));
    char (*names)[HF_NAME_LEN] = (char (*)[HF_NAME_LEN])calloc(list.n + 1, HF_NAME_LEN);
    size_t m = 0;
    for (size_t k = 0; k < list.n; k++) {
        const HFTensor *h = &list.tensors[k];
        if (drop != NULL && strcmp(h->name, drop) == 0) continue;
        snprintf(names[k], HF_NAME_LEN, "%s", strip_prefix ? hf_gpt2_bare_(h->name) : h->name);
        t[m].name = names[k];
        t[m].dtype = ST_BF16;
        t[m].ndim = h->ndim;
        t[m].shape[0] = h->dim0;
        t[m].shape[1] = h->dim1;
        t[m].data = p + h->offset;
        t[m].transposed = h->transposed;
        if (reshape != NULL && strcmp(h->name, reshape) == 0) {
            t[m].shape[0] = h->dim1;
            t[m].shape[1] = h->dim0;
        }
        m++;
    }
    for (size_t k = 0; k < n_extra; k++) t[m++] = extra[k];
    char path[600], err[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, SAFETENSORS_SINGLE_NAME);
    if (safetensors_write_file_checked(path, t, m, 0, err, sizeof(err)) != 0) printf("      rewrite: %s\n", err);
    free(t);
    free(names);
    hf_tensor_list_free(&list);
}

static void expect_load_error(const char *dir, const char *what, const char *m1, const char *m2) {
    ModelSpec s;
    float *q = NULL;
    char err[1024] = "";
    const int rc = model_load_checked(dir, 0, &s, &q, err, sizeof(err));
    test_check(rc < 0 && q == NULL && contains(err, m1) && (m2 == NULL || contains(err, m2)), "%s: %s", what, err);
    free(q);
}

static void expect_load_ok(const char *dir, const char *what, const uint16_t *p, size_t n) {
    ModelSpec s;
    float *q = NULL;
    char err[1024] = "";
    int ok = model_load_checked(dir, 0, &s, &q, err, sizeof(err)) == 0 && s.num_parameters == n;
    for (size_t i = 0; ok && i < n; i++) ok = q[i] == float_from_bf16(p[i]);
    test_check(ok, "%s%s%s", what, err[0] ? ": " : "", err);
    free(q);
}

static void test_bad_dirs(void) {
    printf("-- hf_model.h: bad model directories, each refused naming the file and the tensor\n");
    char dir[256], path[600], err[1024] = "";
    ModelSpec s;
    LlamaConfig c = small_llama(0, 0);
    llama_spec(&c, &s);
    snprintf(dir, sizeof(dir), "%s/bad_llama", tmp_dir);
    uint16_t *p = random_params(&s, 11);
    hf_write_dir_checked(dir, &s, p, 0, NULL, 0, err, sizeof(err));
    snprintf(path, sizeof(path), "%s/%s", dir, SAFETENSORS_SINGLE_NAME);

    rewrite(dir, &s, p, NULL, "model.layers.0.mlp.down_proj.weight", NULL, 0, 0);
    expect_load_error(dir, "a shape other than config.json implies", path,
                      "tensor 'model.layers.0.mlp.down_proj.weight' has shape [64, 32], config.json");
    expect_load_error(dir, "  (the message gives the implied shape)", "implies [32, 64]", NULL);
    rewrite(dir, &s, p, "model.layers.1.post_attention_layernorm.weight", NULL, NULL, 0, 0);
    expect_load_error(dir, "a missing tensor", "tensor 'model.layers.1.post_attention_layernorm.weight' is missing", dir);
    float extra_f[32];
    for (int i = 0; i < 32; i++) extra_f[i] = (float)i;
    SafeTensorsWriteTensor x[2];
    memset(x, 0, sizeof(x));
    x[0].name = "model.layers.0.self_attn.o_proj.bias";
    x[0].dtype = ST_F32;
    x[0].ndim = 1;
    x[0].shape[0] = 32;
    x[0].data = extra_f;
    rewrite(dir, &s, p, NULL, NULL, x, 1, 0);
    expect_load_error(dir, "an unexpected tensor", path, "unexpected tensor 'model.layers.0.self_attn.o_proj.bias'");
    x[0].name = "model.layers.3.self_attn.q_proj.weight";  // a layer the model lacks
    rewrite(dir, &s, p, NULL, NULL, x, 1, 0);
    expect_load_error(dir, "a tensor of a layer past num_hidden_layers", "unexpected tensor 'model.layers.3.", NULL);
    x[0].name = "model.layers.0.self_attn.rotary_emb.inv_freq";
    x[0].shape[0] = 8;
    x[1] = x[0];
    x[1].name = "model.rotary_emb.inv_freq";
    rewrite(dir, &s, p, NULL, NULL, x, 2, 0);
    expect_load_ok(dir, "rotary_emb.inv_freq buffers (old 4.x saves): ignored", p, s.num_parameters);
    // model.norm.weight in another dtype
    const ParameterTensor *lnf = model_tensor(&s, "lnfw");
    int32_t ints[32] = {0};
    x[0].name = "model.norm.weight";
    x[0].dtype = ST_I32;
    x[0].shape[0] = 32;
    x[0].data = ints;
    rewrite(dir, &s, p, "model.norm.weight", NULL, x, 1, 0);
    expect_load_error(dir, "a model tensor of dtype I32", path, "'model.norm.weight' has dtype I32");
    float lnf_f[32];
    bf16_to_floats(p + lnf->offset, lnf_f, 32);
    x[0].dtype = ST_F32;
    x[0].data = lnf_f;
    rewrite(dir, &s, p, "model.norm.weight", NULL, x, 1, 0);
    expect_load_ok(dir, "a model tensor in F32 (the others BF16): read exactly", p, s.num_parameters);
    remove(path);
    expect_load_error(dir, "no safetensors in the directory", "has neither model.safetensors", dir);
    ModelSpec cheap;
    test_check(model_load_checked(dir, 0, &cheap, NULL, err, sizeof(err)) == 0 && cheap.family == llama_family() &&
                   cheap.num_parameters == s.num_parameters,
               "the cheap path (no parameters) reads config.json alone%s", err);
    snprintf(path, sizeof(path), "%s/config.json", dir);
    remove(path);
    expect_load_error(dir, "a directory without config.json (no GPT-2 default)", "has no config.json", dir);
    err[0] = 0;
    test_check(model_load_checked(dir, 0, &cheap, NULL, err, sizeof(err)) < 0 && contains(err, "has no config.json"),
               "  the cheap path too: %s", err);
    write_bytes(path, "{\"model_type\": \"mistral\"}", 25);
    expect_load_error(dir, "another architecture", path, "model_type 'mistral'");
    free(p);

    // tied: lm_head.weight may be there if it is the embedding
    c = small_llama(1, 1);
    llama_spec(&c, &s);
    snprintf(dir, sizeof(dir), "%s/bad_tied", tmp_dir);
    p = random_params(&s, 12);
    hf_write_dir_checked(dir, &s, p, 0, NULL, 0, err, sizeof(err));
    x[0].name = "lm_head.weight";
    x[0].dtype = ST_BF16;
    x[0].ndim = 2;
    x[0].shape[0] = 200;
    x[0].shape[1] = 32;
    x[0].data = p;  // the embedding's V rows
    rewrite(dir, &s, p, NULL, NULL, x, 1, 0);
    expect_load_ok(dir, "tied, with lm_head.weight equal to the embedding: accepted", p, s.num_parameters);
    x[0].data = p + 32;  // shifted by a row: different
    rewrite(dir, &s, p, NULL, NULL, x, 1, 0);
    expect_load_error(dir, "tied, with a different lm_head.weight", "'lm_head.weight' differs from the embedding",
                      "tie_word_embeddings");
    free(p);

    // GPT-2: the names without "transformer." and the old mask buffers
    GPT2Config g = small_gpt2();
    gpt2_spec(&g, &s);
    snprintf(dir, sizeof(dir), "%s/bad_gpt2", tmp_dir);
    p = random_params(&s, 13);
    hf_write_dir_checked(dir, &s, p, 0, NULL, 0, err, sizeof(err));
    static float mask[64 * 64];
    x[0].name = "h.0.attn.bias";
    x[0].dtype = ST_F32;
    x[0].ndim = 4;
    x[0].shape[0] = 1;
    x[0].shape[1] = 1;
    x[0].shape[2] = 64;
    x[0].shape[3] = 64;
    x[0].data = mask;
    x[1] = x[0];
    x[1].name = "h.1.attn.masked_bias";
    x[1].ndim = 0;
    rewrite(dir, &s, p, NULL, NULL, x, 2, 1);
    expect_load_ok(dir, "GPT-2 without 'transformer.' (GPT2Model's names), with attn.bias / masked_bias buffers",
                   p, s.num_parameters);
    x[0].name = "wpe.weight";
    x[0].ndim = 2;
    x[0].shape[0] = 64;
    x[0].shape[1] = 32;
    x[0].dtype = ST_BF16;
    x[0].data = p + model_tensor(&s, "wpe")->offset;
    rewrite(dir, &s, p, NULL, NULL, x, 1, 0);
    expect_load_error(dir, "GPT-2 with both transformer.wpe.weight and wpe.weight", "are both transformer.wpe.weight",
                      dir);
    rewrite(dir, &s, p, NULL, "transformer.h.0.attn.c_attn.weight", NULL, 0, 0);
    expect_load_error(dir, "GPT-2 c_attn.weight stored (out, in) instead of Conv1D's (in, out)",
                      "'transformer.h.0.attn.c_attn.weight' has shape [96, 32]", "implies [32, 96]");
    free(p);
}

// ----------------------------------------------------------------------------
// the directory write, the trainer's helpers, the checkpoint hook

static int hook_calls = 0;
static char hook_seen[256];

// a checkpoint extra that records whether the marker already existed (it must not)
static int test_hook(const CheckpointWrite *w, char *err, size_t err_len) {
    char path[CHECKPOINT_PATH_MAX];
    checkpoint_done_path(path, sizeof(path), w->dir, w->state->step);
    snprintf(hook_seen, sizeof(hook_seen), "%s", checkpoint_file_exists_(path) ? "marker" : "no marker");
    hook_calls++;
    return hf_checkpoint_write_checked(w->dir, w->state->step, w->model, w->params, 0, NULL, w->sync, err, err_len);
}

static int failing_hook(const CheckpointWrite *w, char *err, size_t err_len) {
    (void)w;
    llmc_set_error(err, err_len, "the extra failed");
    return -1;
}

static void test_dir_write(void) {
    printf("-- hf_model.h: the atomic directory write; the trainer's checkpoints\n");
    char dir[256], path[600], err[1024] = "";
    ModelSpec s;
    LlamaConfig c = small_llama(0, 0);
    llama_spec(&c, &s);
    uint16_t *p1 = random_params(&s, 21), *p2 = random_params(&s, 22);
    snprintf(dir, sizeof(dir), "%s/atomic/", tmp_dir);  // (a trailing slash is the same directory)
    int rc = hf_write_dir_checked(dir, &s, p1, 0, NULL, 1, err, sizeof(err));
    snprintf(dir, sizeof(dir), "%s/atomic", tmp_dir);
    rc = rc == 0 ? hf_write_dir_checked(dir, &s, p2, 0, NULL, 1, err, sizeof(err)) : rc;
    test_check(rc == 0 && count_prefixed(tmp_dir, "atomic.") == 0, "a directory written twice (fsync on): replaced, no "
               ".tmp-/.old- left%s", err);
    expect_load_ok(dir, "  and it holds the second write", p2, s.num_parameters);
    snprintf(path, sizeof(path), "%s/a_file", tmp_dir);
    write_bytes(path, "x", 1);
    rc = hf_write_dir_checked(path, &s, p1, 0, NULL, 0, err, sizeof(err));
    test_check(rc < 0 && contains(err, "exists and is not a directory of files"),
               "a file where the directory goes: refused, left alone: %s", err);
    snprintf(path, sizeof(path), "%s/a_file/hf", tmp_dir);
    rc = hf_write_dir_checked(path, &s, p1, 0, NULL, 0, err, sizeof(err));
    test_check(rc < 0 && contains(err, "cannot create the directory") && count_prefixed(tmp_dir, "a_file.") == 0,
               "a directory under a file: refused, nothing left: %s", err);
    snprintf(path, sizeof(path), "%s/atomic/sub", tmp_dir);
    mkdir(path, 0777);
    rc = hf_write_dir_checked(dir, &s, p1, 0, NULL, 0, err, sizeof(err));
    test_check(rc < 0 && contains(err, "not a directory of files") && hf_is_dir(path),
               "an existing directory holding a subdirectory: not replaced: %s", err);
    rmdir(path);
    GPT2Config g = small_gpt2();
    ModelSpec gs;
    gpt2_spec(&g, &gs);
    uint16_t *pg = random_params(&gs, 23);
    rc = hf_write_dir_checked(dir, &gs, pg, 0, NULL, 0, err, sizeof(err));
    free(pg);
    ModelSpec back;
    float *q = NULL;
    rc = rc == 0 ? model_load_checked(dir, 0, &back, &q, err, sizeof(err)) : rc;
    test_check(rc == 0 && back.family == gpt2_family(), "a GPT-2 written over that Llama directory: it holds GPT-2 "
               "alone (nothing of the old files is left to read)%s", err);
    free(q);
    free(p1);
    free(p2);
}

// the side files: read from a model directory, copied byte for byte into a written one; -e's
// tokenizer.json for samples; -tk's tokenizer.json where -e gives none
static void test_side_files(void) {
    printf("-- hf_model.h, models.h: the tokenizer's files beside the model\n");
    char src[256], out[256], a[600], b[600], tk[600], buf[600], err[1024] = "";
    ModelSpec s;
    LlamaConfig c = small_llama(0, 0);
    llama_spec(&c, &s);
    uint16_t *p = random_params(&s, 41);
    snprintf(src, sizeof(src), "%s/side_src", tmp_dir);
    snprintf(out, sizeof(out), "%s/side_out", tmp_dir);
    int rc = hf_write_dir_checked(src, &s, p, 0, NULL, 0, err, sizeof(err));
    HFSideFiles side;
    rc = rc == 0 ? hf_side_files_read_checked(&side, src, err, sizeof(err)) : rc;
    test_check(rc == 0 && side.n == 0, "a directory without tokenizer files: no side files%s", err);
    hf_side_files_free(&side);
    // a tokenizer.json, its config and generation_config.json, and a random binary tokenizer.model
    const char *names[] = {"tokenizer.json", "tokenizer_config.json", "generation_config.json", "tokenizer.model"};
    unsigned char bin[3001];
    uint64_t x = 77;
    for (size_t i = 0; i < sizeof(bin); i++) bin[i] = (unsigned char)((x = x * 6364136223846793005ULL + 1) >> 56);
    for (int k = 0; k < 4; k++) {
        snprintf(a, sizeof(a), "%s/%s", src, names[k]);
        if (k < 3) write_bytes(a, names[k], strlen(names[k]) + 1);
        else write_bytes(a, bin, sizeof(bin));
    }
    snprintf(a, sizeof(a), "%s/README.md", src);  // not a side file: left behind
    write_bytes(a, "# x\n", 4);
    rc = hf_side_files_read_checked(&side, src, err, sizeof(err));
    test_check(rc == 0 && side.n == 4, "the four there are read (%d)%s", side.n, err);
    rc = rc == 0 ? hf_write_dir_checked(out, &s, p, 0, &side, 0, err, sizeof(err)) : rc;
    int same = rc == 0;
    for (int k = 0; same && k < 4; k++) {
        snprintf(a, sizeof(a), "%s/%s", src, names[k]);
        snprintf(b, sizeof(b), "%s/%s", out, names[k]);
        same = same_file(a, b);
    }
    snprintf(b, sizeof(b), "%s/README.md", out);
    struct stat sb;
    test_check(same && stat(b, &sb) != 0, "written with them: each copied byte for byte, nothing else%s", err);
    expect_load_ok(out, "  and the model beside them loads", p, s.num_parameters);
    hf_side_files_free(&side);
    // what the trainer takes from -e and -tk
    test_check(model_dir_tokenizer(src, buf, sizeof(buf)) && strcmp(buf + strlen(src), "/tokenizer.json") == 0,
               "model_dir_tokenizer: -e DIR with a tokenizer.json names it");
    test_check(!model_dir_tokenizer("qwen-test", buf, sizeof(buf)) && !model_dir_tokenizer(tmp_dir, buf, sizeof(buf)),
               "  a descriptor, or a directory without one: none");
    snprintf(tk, sizeof(tk), "%s/other_tokenizer.json", tmp_dir);
    write_bytes(tk, "{\"other\": 1}", 12);
    rc = model_side_files_checked(src, tk, &side, err, sizeof(err));
    snprintf(a, sizeof(a), "%s/tokenizer.json", src);
    same = rc == 0 && side.n == 4 && strcmp(side.name[0], "tokenizer.json") == 0 && side.len[0] == strlen(names[0]) + 1;
    test_check(same, "model_side_files_checked: -e DIR's files, its own tokenizer.json before -tk's%s", err);
    hf_side_files_free(&side);
    rc = model_side_files_checked("qwen-test", tk, &side, err, sizeof(err));
    test_check(rc == 0 && side.n == 1 && strcmp(side.name[0], "tokenizer.json") == 0 && side.len[0] == 12 &&
                   memcmp(side.data[0], "{\"other\": 1}", 12) == 0,
               "  a descriptor with -tk's tokenizer.json: that one, as tokenizer.json%s", err);
    hf_side_files_free(&side);
    rc = model_side_files_checked("qwen-test", NULL, &side, err, sizeof(err));
    test_check(rc == 0 && side.n == 0, "  a descriptor without one: none%s", err);
    // what cannot be read is an error naming it
    snprintf(a, sizeof(a), "%s/no_such.json", tmp_dir);
    rc = model_side_files_checked("qwen-test", a, &side, err, sizeof(err));
    test_check(rc < 0 && contains(err, "no_such.json") && side.n == 0, "  -tk's missing: refused, naming it: %s", err);
    snprintf(a, sizeof(a), "%s/merges.txt", src);  // a directory where a side file goes
    mkdir(a, 0777);
    rc = hf_side_files_read_checked(&side, src, err, sizeof(err));
    test_check(rc < 0 && contains(err, "merges.txt") && contains(err, "directory") && side.n == 0,
               "a side file that is a directory: refused, naming it: %s", err);
    rmdir(a);
    snprintf(a, sizeof(a), "%s/vocab.json", src);  // a link to nothing
    rc = symlink("/nonexistent/vocab.json", a);
    rc = rc == 0 ? hf_side_files_read_checked(&side, src, err, sizeof(err)) : 0;
    test_check(rc < 0 && contains(err, "vocab.json") && side.n == 0, "a dangling link: refused, naming it: %s", err);
    unlink(a);
    snprintf(a, sizeof(a), "%s/big_tokenizer.json", tmp_dir);  // sparse: no disk taken
    FILE *fb = fopen(a, "wb");
    const int sparse = fb != NULL && ftruncate(fileno(fb), (off_t)HF_SIDE_MAX_BYTES + 1) == 0;
    if (fb != NULL) fclose(fb);
    rc = sparse ? hf_side_files_add_checked(&side, "tokenizer.json", a, err, sizeof(err)) : 0;
    test_check(rc < 0 && contains(err, "larger than 256 MiB") && side.n == 0,
               "a side file over 256 MiB: refused before it is read: %s", err);
    snprintf(b, sizeof(b), "%s/big/config.json", tmp_dir);  // config.json's limit, through the same read
    snprintf(buf, sizeof(buf), "%s/big", tmp_dir);
    mkdir(buf, 0777);
    rc = rename(a, b) == 0 ? hf_load_dir_checked(buf, &s, NULL, err, sizeof(err)) : 0;
    test_check(rc < 0 && contains(err, "config.json") && contains(err, "larger than 16 MiB"),
               "  and a config.json over 16 MiB: %s", err);
    unlink(b);
    rmdir(buf);
    rc = hf_side_files_add_checked(&side, "config.json", tk, err, sizeof(err));
    test_check(rc < 0 && side.n == 0, "hf_side_files_add_checked: a name that is not a side file is refused: %s", err);
    free(p);
}

static void test_checkpoint(void) {
    printf("-- checkpoint.h: the Hugging Face directory before the marker; leftovers cleared\n");
    char out[512], path[600], err[1024] = "";
    snprintf(out, sizeof(out), "%s/ckpt", tmp_dir);
    mkdir(out, 0777);
    ModelSpec s;
    LlamaConfig c = small_llama(1, 1);
    llama_spec(&c, &s);
    uint16_t *p = random_params(&s, 31);
    TrainingState st;
    memset(&st, 0, sizeof(st));
    st.num_processes = 1;
    st.use_master_weights = 0;
    st.step = 5;
    st.num_parameters = 0;
    CheckpointWrite w;
    memset(&w, 0, sizeof(w));
    w.dir = out;
    w.model = &s;
    w.params = p;
    w.state = &st;
    w.extra = test_hook;
    int rc = checkpoint_write_checked(&w, err, sizeof(err));
    snprintf(path, sizeof(path), "%s/hf_00000005", out);
    test_check(rc == 0 && hook_calls == 1 && strcmp(hook_seen, "no marker") == 0 &&
                   checkpoint_is_complete(out, 5, 1, err, sizeof(err)),
               "the hook runs once, before the DONE_ marker; the checkpoint is complete (%s)%s", hook_seen, err);
    expect_load_ok(path, "  <out>/hf_00000005 loads as the checkpoint's model", p, s.num_parameters);
    w.extra = failing_hook;
    st.step = 6;
    rc = checkpoint_write_checked(&w, err, sizeof(err));
    test_check(rc < 0 && contains(err, "the extra failed") && !checkpoint_is_complete(out, 6, 1, err, sizeof(err)),
               "a failing hook: the write fails and step 6 has no marker");
    // leftovers of interrupted directory writes
    const char *left[] = {"hf_00000010.tmp-123", "hf_00000010.old-77"};
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof(path), "%s/%s", out, left[k]);
        mkdir(path, 0777);
        snprintf(path, sizeof(path), "%s/%s/model.safetensors", out, left[k]);
        write_bytes(path, "x", 1);
    }
    snprintf(path, sizeof(path), "%s/hf_00000010.tmp-x", out);  // not ours: left alone
    mkdir(path, 0777);
    rc = checkpoint_clear_stale(out, 5, err, sizeof(err));
    snprintf(path, sizeof(path), "%s/hf_00000005", out);
    char other[600];
    snprintf(other, sizeof(other), "%s/hf_00000010.tmp-x", out);
    test_check(rc >= 0 && count_prefixed(out, "hf_00000010.tmp-1") == 0 && count_prefixed(out, "hf_00000010.old") == 0 &&
                   hf_is_dir(path) && hf_is_dir(other),
               "checkpoint_clear_stale removes hf_N.tmp-PID and hf_N.old-PID, keeps hf_N and other names%s", err);
    // the trainer's name check
    char longdir[HF_PATH_MAX];
    memset(longdir, 'o', sizeof(longdir));
    longdir[HF_PATH_MAX - 40] = 0;
    test_check(hf_checkpoint_dir_check(longdir, err, sizeof(err)) < 0 && contains(err, "would not fit"),
               "hf_checkpoint_dir_check: an -o too long for hf_<step> names is refused up front");
    test_check(hf_checkpoint_dir_check(out, err, sizeof(err)) == 0, "  and a normal one is fine");
    char hp[64];
    test_check(hf_checkpoint_path(hp, sizeof(hp), "out", 20) == 0 && strcmp(hp, "out/hf_00000020") == 0,
               "hf_checkpoint_path: out/hf_00000020");
    free(p);
}

int main(void) {
    snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/test_hf_XXXXXX");
    if (mkdtemp(tmp_dir) == NULL) {
        test_check(0, "create a temporary directory");
        return test_summary();
    }
    test_f16();
    test_safetensors_roundtrip();
    test_safetensors_bad();
    test_safetensors_fuzz();
    test_shards();
    test_config_good();
    test_config_bad();
    test_json_floats();
    test_roundtrips();
    test_tensors();
    test_bad_dirs();
    test_dir_write();
    test_side_files();
    test_checkpoint();
    remove_tree(tmp_dir);
    return test_summary();
}
