/*
safetensors.h - Hugging Face's safetensors format, read and written on the host: one file, or a
sharded checkpoint (model.safetensors.index.json and its shards). The JSON goes through cJSON
(link with the Makefile's CJSON_CFLAGS / CJSON_LIBS).

File: an 8-byte little-endian u64 N, N bytes of JSON (the header), then the data region. The
header is an object: per tensor "name": {"dtype": "BF16", "shape": [d0, ...], "data_offsets":
[begin, end]} (byte offsets into the data region, end exclusive), and an optional
"__metadata__" object of string -> string. Tensors are C order, little endian.

Reader (safetensors_open_checked): the file is mapped read-only (mmap) and the header checked in
full before any tensor is handed out; refused, each with a message naming the file (and the
tensor or field):
  - a file shorter than 8 bytes; N above 100 MB (the reference implementation's limit); N
    running past the end of the file; a header that does not start with '{', is not JSON, has
    anything but whitespace after the object, or is not an object;
  - an entry that is not an object; a missing or unknown dtype; a shape that is not an array of
    non-negative integers (at most SAFETENSORS_MAX_DIMS of them); data_offsets that are not
    [begin, end] with 0 <= begin <= end; an entry whose byte size is not its dtype's size times
    the product of its shape; a tensor name given twice; a __metadata__ that is not an object
    of strings;
  - offsets that overlap, leave a hole, or run past the end of the data region: sorted by
    offset, the entries must tile [0, data size) exactly.
Any known dtype passes the header check (a checkpoint may carry buffers of other types that a
model ignores); reading a tensor's values converts F32, F16 and BF16 only, to fp32 or bf16, and
refuses any other dtype naming the tensor. F16 and BF16 widen to fp32 exactly; F32 (and F16)
narrow to bf16 rounding to nearest even (llmc/bf16.h).

Sharded checkpoint (safetensors_model_open_checked on a directory): model.safetensors alone, or
model.safetensors.index.json = {"metadata": {...}, "weight_map": {name: shard file}} and the
shards; both at once is refused as ambiguous. Refused too: a shard named in the index but
absent (or a name that is not a plain file name in the directory), a tensor of the index
missing from its shard, a tensor present in two shards, a tensor of a shard that the index does
not list.

Writer: safetensors_write_file_checked writes one file (atomically: llmc/utils.h's AtomicFile),
the tensors in the order given, the header {"__metadata__": {"format": "pt"}, ...} compact and
padded with spaces to a multiple of 8 bytes, as the reference writer does.
safetensors_write_model_checked writes model.safetensors, or, when the tensors' bytes exceed
max_shard_bytes, shards model-00001-of-0000K.safetensors and then (last) the index. Sharding
follows huggingface_hub's split_state_dict_into_shards (what transformers' save_pretrained
uses): tensors in order fill a shard until the next one would take it past the limit; a tensor
larger than the limit gets a shard of its own. The limit counts tensor bytes only; the default,
SAFETENSORS_DEFAULT_MAX_SHARD_BYTES, is transformers 4.x's max_shard_size "5GB" (5 * 10^9 bytes;
transformers 5.x's save_pretrained defaults to "50GB", and loads either).
*/
#ifndef LLMC_SAFETENSORS_H
#define LLMC_SAFETENSORS_H

#include "utils.h"  // first: it sets the POSIX feature macros

#include <math.h>
#include <sys/mman.h>

#include <cjson/cJSON.h>

#include "bf16.h"

#define SAFETENSORS_MAX_HEADER_BYTES 100000000ULL  // 100 MB, the reference implementation's limit
#define SAFETENSORS_MAX_DIMS 8
#define SAFETENSORS_DEFAULT_MAX_SHARD_BYTES 5000000000ULL
#define SAFETENSORS_SINGLE_NAME "model.safetensors"
#define SAFETENSORS_INDEX_NAME "model.safetensors.index.json"
#define SAFETENSORS_MAX_INDEX_BYTES 100000000LL
// the largest integer a JSON number (a double) holds exactly
#define SAFETENSORS_MAX_JSON_INT 9007199254740992.0

// ----------------------------------------------------------------------------
// dtypes

// The dtypes of the format (the reference implementation's names), with their sizes in bits;
// the first three are the ones whose values this header converts.
enum {
    ST_F32 = 0, ST_F16, ST_BF16,
    ST_F64, ST_I64, ST_U64, ST_I32, ST_U32, ST_I16, ST_U16, ST_I8, ST_U8, ST_BOOL,
    ST_F8_E4M3, ST_F8_E5M2, ST_F8_E8M0, ST_F6_E2M3, ST_F6_E3M2, ST_F4, ST_C64,
    ST_NUM_DTYPES
};

static inline const char *safetensors_dtype_name(int dtype) {
    static const char *const names[ST_NUM_DTYPES] = {
        "F32", "F16", "BF16", "F64", "I64", "U64", "I32", "U32", "I16", "U16", "I8", "U8", "BOOL",
        "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", "C64"};
    return dtype >= 0 && dtype < ST_NUM_DTYPES ? names[dtype] : "?";
}

static inline int safetensors_dtype_bits(int dtype) {
    static const int bits[ST_NUM_DTYPES] = {32, 16, 16, 64, 64, 64, 32, 32, 16, 16, 8, 8, 8, 8, 8, 8, 6, 6, 4, 64};
    return dtype >= 0 && dtype < ST_NUM_DTYPES ? bits[dtype] : 0;
}

// The dtype called name, or -1.
static inline int safetensors_dtype_parse(const char *name) {
    for (int d = 0; d < ST_NUM_DTYPES; d++)
        if (strcmp(name, safetensors_dtype_name(d)) == 0) return d;
    return -1;
}

// IEEE half -> float, exactly (subnormals normalised; infinities and NaNs, payload included, kept).
static inline float safetensors_f16_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu, u;
    if (exp == 0) {
        if (mant == 0) {
            u = sign;
        } else {  // mant * 2^-24: s shifts bring the leading 1 to bit 10, giving 1.f * 2^(-14 - s)
            uint32_t e = 113;  // float's biased exponent of 2^-14, less one per shift
            do {
                mant <<= 1;
                e--;
            } while ((mant & 0x400u) == 0);
            u = sign | (e << 23) | ((mant & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (mant << 13);
    } else {
        u = sign | ((exp + 112) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

// ----------------------------------------------------------------------------
// one file

typedef struct {
    char *name;
    int dtype;                            // ST_*
    int ndim;
    uint64_t shape[SAFETENSORS_MAX_DIMS];
    uint64_t numel;                       // the product of the shape (1 for a scalar)
    uint64_t begin, end;                  // byte offsets in the data region, end exclusive
} SafeTensor;

typedef struct {
    char *path;                    // as opened (messages name it)
    void *map;                     // the mapping (NULL for an empty data region with no header)
    size_t map_bytes;
    uint64_t header_bytes;         // N
    const unsigned char *data;     // the data region
    uint64_t data_bytes;
    int num_tensors;
    SafeTensor *tensors;           // sorted by name
    int num_metadata;
    char **metadata;               // key, value, key, value, ... in the header's order
} SafeTensorsFile;

static inline void safetensors_close(SafeTensorsFile *f) {
    if (f->map != NULL) munmap(f->map, f->map_bytes);
    for (int i = 0; i < f->num_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    for (int i = 0; i < 2 * f->num_metadata; i++) free(f->metadata[i]);
    free(f->metadata);
    free(f->path);
    memset(f, 0, sizeof(*f));
}

static inline char *safetensors_strdup_(const char *s) {
    const size_t n = strlen(s) + 1;
    char *p = (char *)malloc(n);
    if (p != NULL) memcpy(p, s, n);
    return p;
}

static inline int safetensors_cmp_name_(const void *a, const void *b) {
    return strcmp(((const SafeTensor *)a)->name, ((const SafeTensor *)b)->name);
}

// a JSON number that is an integer in [0, 2^53]: 0 and *out, or -1
static inline int safetensors_json_uint_(const cJSON *item, uint64_t *out) {
    if (!cJSON_IsNumber(item)) return -1;
    const double d = item->valuedouble;
    if (!isfinite(d) || d < 0.0 || d > SAFETENSORS_MAX_JSON_INT || d != floor(d)) return -1;
    *out = (uint64_t)d;
    return 0;
}

// One header entry into t (its name already set); 0, or -1 with a message.
static inline int safetensors_parse_entry_(const char *path, const cJSON *e, SafeTensor *t, uint64_t data_bytes,
                                           char *err, size_t err_len) {
    if (!cJSON_IsObject(e)) {
        llmc_set_error(err, err_len, "safetensors file '%s': the entry of tensor '%s' is not an object", path, t->name);
        return -1;
    }
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    if (!cJSON_IsString(dtype)) {
        llmc_set_error(err, err_len, "safetensors file '%s': tensor '%s' has %s dtype", path, t->name,
                       dtype == NULL ? "no" : "a non-string");
        return -1;
    }
    t->dtype = safetensors_dtype_parse(dtype->valuestring);
    if (t->dtype < 0) {
        llmc_set_error(err, err_len, "safetensors file '%s': tensor '%s' has the unknown dtype '%.32s'", path, t->name,
                       dtype->valuestring);
        return -1;
    }
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    if (!cJSON_IsArray(shape)) {
        llmc_set_error(err, err_len, "safetensors file '%s': tensor '%s' has %s shape (an array of integers)", path,
                       t->name, shape == NULL ? "no" : "a non-array");
        return -1;
    }
    const int ndim = cJSON_GetArraySize(shape);
    if (ndim > SAFETENSORS_MAX_DIMS) {
        llmc_set_error(err, err_len, "safetensors file '%s': tensor '%s' has %d dimensions (at most %d here)", path,
                       t->name, ndim, SAFETENSORS_MAX_DIMS);
        return -1;
    }
    t->ndim = ndim;
    t->numel = 1;
    int k = 0, overflow = 0;
    for (const cJSON *d = shape->child; d != NULL; d = d->next, k++) {
        if (safetensors_json_uint_(d, &t->shape[k]) != 0) {
            llmc_set_error(err, err_len, "safetensors file '%s': tensor '%s': shape[%d] is not a non-negative integer",
                           path, t->name, k);
            return -1;
        }
        overflow = overflow || llmc_mul_u64(t->numel, t->shape[k], &t->numel) != 0;
    }
    const cJSON *offsets = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    const cJSON *b = cJSON_IsArray(offsets) && cJSON_GetArraySize(offsets) == 2 ? offsets->child : NULL;
    if (b == NULL || safetensors_json_uint_(b, &t->begin) != 0 || safetensors_json_uint_(b->next, &t->end) != 0 ||
        t->begin > t->end) {
        llmc_set_error(err, err_len, "safetensors file '%s': tensor '%s': data_offsets %s (expected [begin, end], "
                       "integers, 0 <= begin <= end)", path, t->name, offsets == NULL ? "missing" : "malformed");
        return -1;
    }
    uint64_t bits = 0;
    if (overflow || llmc_mul_u64(t->numel, (uint64_t)safetensors_dtype_bits(t->dtype), &bits) != 0 || bits % 8 != 0 ||
        bits / 8 != t->end - t->begin) {
        llmc_set_error(err, err_len, "safetensors file '%s': tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, "
                       "but %llu elements of %s need %s%llu", path, t->name, (unsigned long long)t->begin,
                       (unsigned long long)t->end, (unsigned long long)(t->end - t->begin),
                       (unsigned long long)t->numel, safetensors_dtype_name(t->dtype),
                       overflow || bits % 8 != 0 ? "a whole number of bytes, not " : "",
                       (unsigned long long)(bits / 8));
        return -1;
    }
    if (t->end > data_bytes) {
        llmc_set_error(err, err_len, "safetensors file '%s': tensor '%s': data_offsets [%llu, %llu] run past the end "
                       "of the data region (%llu bytes)", path, t->name, (unsigned long long)t->begin,
                       (unsigned long long)t->end, (unsigned long long)data_bytes);
        return -1;
    }
    return 0;
}

typedef struct {
    uint64_t begin, end;
    int index;
} SafeTensorsSpan_;

static inline int safetensors_cmp_span_(const void *a, const void *b) {
    const SafeTensorsSpan_ *x = (const SafeTensorsSpan_ *)a, *y = (const SafeTensorsSpan_ *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

// The parsed header (root, an object) into f; 0, or -1 with a message.
static inline int safetensors_parse_header_(SafeTensorsFile *f, const cJSON *root, char *err, size_t err_len) {
    const char *path = f->path;
    int n = 0, have_meta = 0;
    for (const cJSON *e = root->child; e != NULL; e = e->next) {
        if (strcmp(e->string, "__metadata__") != 0) {
            n++;
            continue;
        }
        if (have_meta++) {
            llmc_set_error(err, err_len, "safetensors file '%s': __metadata__ appears twice", path);
            return -1;
        }
        if (!cJSON_IsObject(e)) {
            llmc_set_error(err, err_len, "safetensors file '%s': __metadata__ is not an object", path);
            return -1;
        }
        const int m = cJSON_GetArraySize(e);
        f->metadata = (char **)calloc((size_t)(2 * m + 1), sizeof(char *));
        if (f->metadata == NULL) {
            llmc_set_error(err, err_len, "safetensors file '%s': out of memory", path);
            return -1;
        }
        for (const cJSON *kv = e->child; kv != NULL; kv = kv->next) {
            if (!cJSON_IsString(kv)) {
                llmc_set_error(err, err_len, "safetensors file '%s': __metadata__ '%s' is not a string", path,
                               kv->string);
                return -1;
            }
            f->metadata[2 * f->num_metadata] = safetensors_strdup_(kv->string);
            f->metadata[2 * f->num_metadata + 1] = safetensors_strdup_(kv->valuestring);
            f->num_metadata++;
            if (f->metadata[2 * f->num_metadata - 2] == NULL || f->metadata[2 * f->num_metadata - 1] == NULL) {
                llmc_set_error(err, err_len, "safetensors file '%s': out of memory", path);
                return -1;
            }
        }
    }
    f->tensors = (SafeTensor *)calloc((size_t)n + 1, sizeof(SafeTensor));
    SafeTensorsSpan_ *spans = (SafeTensorsSpan_ *)malloc(((size_t)n + 1) * sizeof(SafeTensorsSpan_));
    if (f->tensors == NULL || spans == NULL) {
        free(spans);
        llmc_set_error(err, err_len, "safetensors file '%s': out of memory for %d tensors", path, n);
        return -1;
    }
    for (const cJSON *e = root->child; e != NULL; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) continue;
        SafeTensor *t = &f->tensors[f->num_tensors];
        t->name = safetensors_strdup_(e->string);
        if (t->name == NULL) {
            free(spans);
            llmc_set_error(err, err_len, "safetensors file '%s': out of memory", path);
            return -1;
        }
        f->num_tensors++;
        if (safetensors_parse_entry_(path, e, t, f->data_bytes, err, err_len) != 0) {
            free(spans);
            return -1;
        }
    }
    qsort(f->tensors, (size_t)n, sizeof(SafeTensor), safetensors_cmp_name_);
    for (int i = 1; i < n; i++) {
        if (strcmp(f->tensors[i - 1].name, f->tensors[i].name) == 0) {
            llmc_set_error(err, err_len, "safetensors file '%s': tensor '%s' appears twice in the header", path,
                           f->tensors[i].name);
            free(spans);
            return -1;
        }
    }
    // the entries must tile the data region: sorted by offset, each begins where the last ended
    for (int i = 0; i < n; i++) {
        spans[i].begin = f->tensors[i].begin;
        spans[i].end = f->tensors[i].end;
        spans[i].index = i;
    }
    qsort(spans, (size_t)n, sizeof(SafeTensorsSpan_), safetensors_cmp_span_);
    uint64_t at = 0;
    int prev = -1, rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const SafeTensor *t = &f->tensors[spans[i].index];
        if (t->begin < at) {
            llmc_set_error(err, err_len, "safetensors file '%s': tensors '%s' and '%s' overlap (bytes [%llu, %llu) and "
                           "[%llu, %llu))", path, f->tensors[prev].name, t->name,
                           (unsigned long long)f->tensors[prev].begin, (unsigned long long)f->tensors[prev].end,
                           (unsigned long long)t->begin, (unsigned long long)t->end);
            rc = -1;
        } else if (t->begin > at) {
            llmc_set_error(err, err_len, "safetensors file '%s': a hole of %llu bytes in the data before tensor '%s' "
                           "(bytes [%llu, %llu) belong to no tensor)", path, (unsigned long long)(t->begin - at),
                           t->name, (unsigned long long)at, (unsigned long long)t->begin);
            rc = -1;
        }
        at = t->end;
        prev = spans[i].index;
    }
    free(spans);
    if (rc == 0 && at != f->data_bytes) {
        llmc_set_error(err, err_len, "safetensors file '%s': the tensors end at byte %llu of a data region of %llu "
                       "bytes (%llu bytes at the end belong to no tensor)", path, (unsigned long long)at,
                       (unsigned long long)f->data_bytes, (unsigned long long)(f->data_bytes - at));
        rc = -1;
    }
    return rc;
}

// Checks the bytes of a whole file (bytes[0..size)) and fills f's tables; f->path is set. The
// tensors' data stays in bytes (f->data points into it). 0, or -1 with a message.
static inline int safetensors_parse_checked_(SafeTensorsFile *f, const unsigned char *bytes, uint64_t size, char *err,
                                             size_t err_len) {
    const char *path = f->path;
    if (size < 8) {
        llmc_set_error(err, err_len, "safetensors file '%s': %llu bytes, too short for the 8-byte header length "
                       "(truncated)", path, (unsigned long long)size);
        return -1;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | bytes[i];
    if (n > SAFETENSORS_MAX_HEADER_BYTES) {
        llmc_set_error(err, err_len, "safetensors file '%s': header length %llu is above the limit of %llu bytes", path,
                       (unsigned long long)n, (unsigned long long)SAFETENSORS_MAX_HEADER_BYTES);
        return -1;
    }
    if (n > size - 8) {
        llmc_set_error(err, err_len, "safetensors file '%s': header length %llu runs past the end of the file (%llu "
                       "bytes: truncated?)", path, (unsigned long long)n, (unsigned long long)size);
        return -1;
    }
    f->header_bytes = n;
    f->data = bytes + 8 + n;
    f->data_bytes = size - 8 - n;
    const char *h = (const char *)bytes + 8;
    if (n < 2 || h[0] != '{') {
        llmc_set_error(err, err_len, "safetensors file '%s': the header (%llu bytes) does not start with '{'", path,
                       (unsigned long long)n);
        return -1;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(h, (size_t)n, &end, 0);
    if (root == NULL) {
        const char *at = cJSON_GetErrorPtr();
        const long long pos = at != NULL && at >= h && at <= h + n ? (long long)(at - h) : -1;
        llmc_set_error(err, err_len, "safetensors file '%s': the header is not valid JSON (at byte %lld of %llu)", path,
                       pos, (unsigned long long)n);
        return -1;
    }
    for (const char *p = end; p != NULL && p < h + n; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            llmc_set_error(err, err_len, "safetensors file '%s': the header has bytes other than whitespace after its "
                           "JSON object (at byte %lld)", path, (long long)(p - h));
            cJSON_Delete(root);
            return -1;
        }
    }
    if (!cJSON_IsObject(root)) {
        llmc_set_error(err, err_len, "safetensors file '%s': the header is not a JSON object", path);
        cJSON_Delete(root);
        return -1;
    }
    const int rc = safetensors_parse_header_(f, root, err, err_len);
    cJSON_Delete(root);
    return rc;
}

// Opens and checks a safetensors file (see the top of this file). 0, or -1 with a message
// (f is then empty; safetensors_close is still allowed).
static inline int safetensors_open_checked(SafeTensorsFile *f, const char *path, char *err, size_t err_len) {
    memset(f, 0, sizeof(*f));
    f->path = safetensors_strdup_(path);
    if (f->path == NULL) {
        llmc_set_error(err, err_len, "safetensors file '%s': out of memory", path);
        return -1;
    }
    FILE *fp = llmc_fopen_read_checked(path, "safetensors file", err, err_len);
    if (fp == NULL) {
        safetensors_close(f);
        return -1;
    }
    int64_t size = 0;
    int rc = llmc_file_size(fp, &size);
    if (rc != 0) {
        llmc_set_error(err, err_len, "safetensors file '%s': cannot find its size: %s", path, strerror(errno));
    } else if ((uint64_t)size > (uint64_t)SIZE_MAX) {
        llmc_set_error(err, err_len, "safetensors file '%s': %lld bytes do not fit this machine's address space", path,
                       (long long)size);
        rc = -1;
    } else if (size > 0) {
        void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fileno(fp), 0);
        if (map == MAP_FAILED) {
            llmc_set_error(err, err_len, "safetensors file '%s': cannot map its %lld bytes: %s", path, (long long)size,
                           strerror(errno));
            rc = -1;
        } else {
            f->map = map;
            f->map_bytes = (size_t)size;
        }
    }
    fclose(fp);  // the mapping stays valid
    static const unsigned char empty[1] = {0};
    if (rc == 0) rc = safetensors_parse_checked_(f, f->map != NULL ? (const unsigned char *)f->map : empty,
                                                 (uint64_t)size, err, err_len);
    if (rc != 0) safetensors_close(f);
    return rc;
}

// The tensor called name, or NULL.
static inline const SafeTensor *safetensors_find(const SafeTensorsFile *f, const char *name) {
    SafeTensor key;
    memset(&key, 0, sizeof(key));
    key.name = (char *)name;
    return f->num_tensors > 0 ? (const SafeTensor *)bsearch(&key, f->tensors, (size_t)f->num_tensors,
                                                            sizeof(SafeTensor), safetensors_cmp_name_)
                              : NULL;
}

// The __metadata__ value of key, or NULL.
static inline const char *safetensors_metadata_get(const SafeTensorsFile *f, const char *key) {
    for (int i = 0; i < f->num_metadata; i++)
        if (strcmp(f->metadata[2 * i], key) == 0) return f->metadata[2 * i + 1];
    return NULL;
}

// t's numel values (t of f) as out_dtype, ST_F32 (float) or ST_BF16 (uint16_t bits), into out.
// F32, F16 and BF16 convert (see the top of this file); any other dtype is refused. 0, or -1.
static inline int safetensors_read_checked(const SafeTensorsFile *f, const SafeTensor *t, int out_dtype, void *out,
                                           char *err, size_t err_len) {
    if (out_dtype != ST_F32 && out_dtype != ST_BF16) {
        llmc_set_error(err, err_len, "safetensors file '%s': tensor '%s': cannot convert to %s (F32 or BF16 only)",
                       f->path, t->name, safetensors_dtype_name(out_dtype));
        return -1;
    }
    if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16) {
        llmc_set_error(err, err_len, "safetensors file '%s': tensor '%s' has dtype %s; only F32, F16 and BF16 are "
                       "read", f->path, t->name, safetensors_dtype_name(t->dtype));
        return -1;
    }
    const unsigned char *src = f->data + t->begin;
    const size_t n = (size_t)t->numel;
    float *of = (float *)out;
    uint16_t *ob = (uint16_t *)out;
    if (t->dtype == ST_F32) {
        if (out_dtype == ST_F32) {
            memcpy(out, src, n * 4);
        } else {
            for (size_t i = 0; i < n; i++) {
                float v;
                memcpy(&v, src + 4 * i, 4);
                ob[i] = bf16_from_float(v);
            }
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            const uint16_t h = (uint16_t)(src[2 * i] | (src[2 * i + 1] << 8));
            if (t->dtype == ST_BF16) {
                if (out_dtype == ST_F32) of[i] = float_from_bf16(h);
                else ob[i] = h;
            } else {
                const float v = safetensors_f16_to_float(h);
                if (out_dtype == ST_F32) of[i] = v;
                else ob[i] = bf16_from_float(v);
            }
        }
    }
    return 0;
}

// "[2, 3]" into buf (a message's shape)
static inline const char *safetensors_shape_str(const uint64_t *shape, int ndim, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = 0;
    for (int k = 0; k <= ndim && used < len; k++) {
        int w = k == ndim ? snprintf(buf + used, len - used, "]")
                          : snprintf(buf + used, len - used, "%s%llu", k == 0 ? "[" : ", ", (unsigned long long)shape[k]);
        if (w < 0) break;
        used += (size_t)w;
    }
    if (ndim == 0) snprintf(buf, len, "[]");
    return buf;
}

// ----------------------------------------------------------------------------
// a model directory: model.safetensors, or an index and its shards

typedef struct {
    const char *name;        // the shard's (owned by its SafeTensorsFile)
    int file;                // the shard: files[file]
    const SafeTensor *tensor;
} SafeTensorsEntry;

typedef struct {
    char *dir;
    int sharded;             // 1: read through model.safetensors.index.json
    int num_files;
    SafeTensorsFile *files;
    size_t num_tensors;
    SafeTensorsEntry *entries;  // every tensor of every file, sorted by name
} SafeTensorsModel;

static inline void safetensors_model_close(SafeTensorsModel *m) {
    for (int i = 0; i < m->num_files; i++) safetensors_close(&m->files[i]);
    free(m->files);
    free(m->entries);
    free(m->dir);
    memset(m, 0, sizeof(*m));
}

static inline int safetensors_cmp_entry_(const void *a, const void *b) {
    return strcmp(((const SafeTensorsEntry *)a)->name, ((const SafeTensorsEntry *)b)->name);
}

// "dir/name" into a malloc'd string (NULL when out of memory)
static inline char *safetensors_join_(const char *dir, const char *name) {
    const size_t a = strlen(dir), b = strlen(name);
    char *p = (char *)malloc(a + b + 2);
    if (p == NULL) return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

static inline int safetensors_is_file_(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

// A whole small file (a JSON file) into a malloc'd, NUL-terminated buffer; NULL with a message.
static inline char *safetensors_slurp_(const char *path, const char *what, long long limit, size_t *len, char *err,
                                       size_t err_len) {
    FILE *fp = llmc_fopen_read_checked(path, what, err, err_len);
    if (fp == NULL) return NULL;
    int64_t size = 0;
    if (llmc_file_size(fp, &size) != 0 || size > limit) {
        llmc_set_error(err, err_len, "%s '%s': %s", what, path, size > limit ? "larger than the limit" : "unreadable");
        fclose(fp);
        return NULL;
    }
    char *buf = (char *)malloc((size_t)size + 1);
    if (buf == NULL || llmc_read_exact(fp, buf, (size_t)size) != 0) {
        llmc_set_error(err, err_len, "%s '%s': %s", what, path, buf == NULL ? "out of memory" : "read error");
        free(buf);
        fclose(fp);
        return NULL;
    }
    fclose(fp);
    buf[size] = 0;
    *len = (size_t)size;
    return buf;
}

// JSON text[0..len) as one value with nothing but whitespace after it (as Python's json reads
// it), or NULL
static inline cJSON *safetensors_json_parse_whole_(const char *text, size_t len) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    for (const char *p = end; root != NULL && p != NULL && p < text + len; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(root);
            return NULL;
        }
    }
    return root;
}

// Opens the files of the index at index_path into m (m->dir set); 0, or -1 with a message.
static inline int safetensors_model_open_index_(SafeTensorsModel *m, const char *index_path, char *err,
                                                size_t err_len) {
    size_t len = 0;
    char *text = safetensors_slurp_(index_path, "safetensors index", SAFETENSORS_MAX_INDEX_BYTES, &len, err, err_len);
    if (text == NULL) return -1;
    cJSON *root = safetensors_json_parse_whole_(text, len);
    free(text);
    const cJSON *map = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    const cJSON *meta = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "metadata") : NULL;
    int rc = 0;
    if (root == NULL || !cJSON_IsObject(root)) {
        llmc_set_error(err, err_len, "safetensors index '%s': %s", index_path,
                       root == NULL ? "not valid JSON" : "not a JSON object");
        rc = -1;
    } else if (!cJSON_IsObject(map)) {
        llmc_set_error(err, err_len, "safetensors index '%s': %s weight_map (an object of tensor name -> shard file)",
                       index_path, map == NULL ? "no" : "a malformed");
        rc = -1;
    } else if (meta != NULL && !cJSON_IsObject(meta) && !cJSON_IsNull(meta)) {
        llmc_set_error(err, err_len, "safetensors index '%s': metadata is not an object", index_path);
        rc = -1;
    }
    const int n = rc == 0 ? cJSON_GetArraySize(map) : 0;
    const char **names = (const char **)calloc((size_t)n + 1, sizeof(char *));  // the distinct shard names
    int *file_of = (int *)calloc((size_t)n + 1, sizeof(int));  // each weight_map entry's file
    m->files = (SafeTensorsFile *)calloc((size_t)n + 1, sizeof(SafeTensorsFile));
    if (rc == 0 && (names == NULL || file_of == NULL || m->files == NULL)) {
        llmc_set_error(err, err_len, "safetensors index '%s': out of memory", index_path);
        rc = -1;
    }
    int k = 0;
    for (const cJSON *e = rc == 0 ? map->child : NULL; e != NULL && rc == 0; e = e->next, k++) {
        const char *s = cJSON_IsString(e) ? e->valuestring : NULL;
        if (s == NULL || s[0] == 0 || strchr(s, '/') != NULL || strcmp(s, ".") == 0 || strcmp(s, "..") == 0) {
            llmc_set_error(err, err_len, "safetensors index '%s': tensor '%s' maps to %s (a shard's file name in the "
                           "directory)", index_path, e->string, s == NULL ? "a non-string" : "a bad file name");
            rc = -1;
            break;
        }
        int f = 0;
        while (f < m->num_files && strcmp(names[f], s) != 0) f++;
        if (f == m->num_files) {  // a new shard: open it
            char *path = safetensors_join_(m->dir, s);
            if (path == NULL) {
                llmc_set_error(err, err_len, "safetensors index '%s': out of memory", index_path);
                rc = -1;
                break;
            }
            if (!safetensors_is_file_(path)) {
                llmc_set_error(err, err_len, "safetensors index '%s': shard '%s' (of tensor '%s') is missing: no file "
                               "'%s'", index_path, s, e->string, path);
                free(path);
                rc = -1;
                break;
            }
            rc = safetensors_open_checked(&m->files[f], path, err, err_len);
            free(path);
            if (rc != 0) break;
            names[f] = s;
            m->num_files++;
        }
        file_of[k] = f;
    }
    // every tensor of the index in its shard; every tensor of a shard in the index, for that shard
    for (k = 0; rc == 0 && k < n; k++) {
        const cJSON *e = cJSON_GetArrayItem(map, k);
        if (safetensors_find(&m->files[file_of[k]], e->string) == NULL) {
            llmc_set_error(err, err_len, "safetensors index '%s': tensor '%s' is missing from its shard '%s'",
                           index_path, e->string, names[file_of[k]]);
            rc = -1;
        }
    }
    for (int f = 0; rc == 0 && f < m->num_files; f++) {
        for (int t = 0; rc == 0 && t < m->files[f].num_tensors; t++) {
            const char *name = m->files[f].tensors[t].name;
            const cJSON *e = cJSON_GetObjectItemCaseSensitive(map, name);
            if (e == NULL) {
                llmc_set_error(err, err_len, "safetensors index '%s': tensor '%s' of shard '%s' is not in the index",
                               index_path, name, names[f]);
                rc = -1;
            } else if (strcmp(e->valuestring, names[f]) != 0) {
                llmc_set_error(err, err_len, "safetensors index '%s': tensor '%s' is present in two shards, '%s' and "
                               "'%s'", index_path, name, names[f], e->valuestring);
                rc = -1;
            }
        }
    }
    free(names);
    free(file_of);
    cJSON_Delete(root);
    return rc;
}

// Opens the safetensors of a model directory (see the top of this file). 0, or -1 with a message
// naming the file and the tensor (m is then empty; safetensors_model_close is still allowed).
static inline int safetensors_model_open_checked(SafeTensorsModel *m, const char *dir, char *err, size_t err_len) {
    memset(m, 0, sizeof(*m));
    m->dir = safetensors_strdup_(dir);
    char *single = safetensors_join_(dir, SAFETENSORS_SINGLE_NAME), *index = safetensors_join_(dir, SAFETENSORS_INDEX_NAME);
    int rc = 0;
    if (m->dir == NULL || single == NULL || index == NULL) {
        llmc_set_error(err, err_len, "model directory '%s': out of memory", dir);
        rc = -1;
    } else if (safetensors_is_file_(single) && safetensors_is_file_(index)) {
        llmc_set_error(err, err_len, "model directory '%s' holds both %s and %s: which is the model is ambiguous", dir,
                       SAFETENSORS_SINGLE_NAME, SAFETENSORS_INDEX_NAME);
        rc = -1;
    } else if (safetensors_is_file_(index)) {
        m->sharded = 1;
        rc = safetensors_model_open_index_(m, index, err, err_len);
    } else if (safetensors_is_file_(single)) {
        m->files = (SafeTensorsFile *)calloc(1, sizeof(SafeTensorsFile));
        rc = m->files == NULL ? -1 : safetensors_open_checked(&m->files[0], single, err, err_len);
        if (m->files == NULL) llmc_set_error(err, err_len, "model directory '%s': out of memory", dir);
        m->num_files = rc == 0 ? 1 : 0;
    } else {
        llmc_set_error(err, err_len, "model directory '%s' has neither %s nor %s", dir, SAFETENSORS_SINGLE_NAME,
                       SAFETENSORS_INDEX_NAME);
        rc = -1;
    }
    free(single);
    free(index);
    for (int f = 0; rc == 0 && f < m->num_files; f++) m->num_tensors += (size_t)m->files[f].num_tensors;
    if (rc == 0) {
        m->entries = (SafeTensorsEntry *)calloc(m->num_tensors + 1, sizeof(SafeTensorsEntry));
        if (m->entries == NULL) {
            llmc_set_error(err, err_len, "model directory '%s': out of memory", dir);
            rc = -1;
        }
    }
    if (rc == 0) {
        size_t k = 0;
        for (int f = 0; f < m->num_files; f++) {
            for (int t = 0; t < m->files[f].num_tensors; t++, k++) {
                m->entries[k].name = m->files[f].tensors[t].name;
                m->entries[k].file = f;
                m->entries[k].tensor = &m->files[f].tensors[t];
            }
        }
        qsort(m->entries, m->num_tensors, sizeof(SafeTensorsEntry), safetensors_cmp_entry_);
        for (size_t i = 1; i < m->num_tensors && rc == 0; i++) {  // (the index already refuses this)
            if (strcmp(m->entries[i - 1].name, m->entries[i].name) == 0) {
                llmc_set_error(err, err_len, "model directory '%s': tensor '%s' is present in two shards, '%s' and '%s'",
                               dir, m->entries[i].name, m->files[m->entries[i - 1].file].path,
                               m->files[m->entries[i].file].path);
                rc = -1;
            }
        }
    }
    if (rc != 0) safetensors_model_close(m);
    return rc;
}

// The entry of the tensor called name, or NULL.
static inline const SafeTensorsEntry *safetensors_model_find(const SafeTensorsModel *m, const char *name) {
    SafeTensorsEntry key;
    memset(&key, 0, sizeof(key));
    key.name = name;
    return m->num_tensors > 0 ? (const SafeTensorsEntry *)bsearch(&key, m->entries, m->num_tensors,
                                                                  sizeof(SafeTensorsEntry), safetensors_cmp_entry_)
                              : NULL;
}

// ----------------------------------------------------------------------------
// writer

// One tensor to write: numel elements of dtype at data, C order; with transposed (ndim 2 only)
// data holds the (shape[1], shape[0]) matrix and its transpose is written (a Conv1D weight
// from a Linear one), row by row, without a copy of the whole.
typedef struct {
    const char *name;
    int dtype;
    int ndim;
    uint64_t shape[SAFETENSORS_MAX_DIMS];
    const void *data;
    int transposed;
} SafeTensorsWriteTensor;

static inline uint64_t safetensors_write_bytes_(const SafeTensorsWriteTensor *t) {
    uint64_t numel = 1;
    for (int k = 0; k < t->ndim; k++) numel *= t->shape[k];
    return numel * (uint64_t)safetensors_dtype_bits(t->dtype) / 8;
}

// Checks what a writer is given (names unique and non-empty, whole-byte dtypes, shapes); 0 or -1.
static inline int safetensors_write_check_(const char *path, const SafeTensorsWriteTensor *t, size_t n, char *err,
                                           size_t err_len) {
    for (size_t i = 0; i < n; i++) {
        const int bits = safetensors_dtype_bits(t[i].dtype);
        uint64_t numel = 1, bytes = 0;
        int bad = t[i].ndim < 0 || t[i].ndim > SAFETENSORS_MAX_DIMS;
        for (int k = 0; !bad && k < t[i].ndim; k++) bad = llmc_mul_u64(numel, t[i].shape[k], &numel) != 0;
        bad = bad || llmc_mul_u64(numel, (uint64_t)bits, &bytes) != 0 || bits % 8 != 0 ||
              (double)bytes > SAFETENSORS_MAX_JSON_INT;
        if (t[i].name == NULL || t[i].name[0] == 0 || strcmp(t[i].name, "__metadata__") == 0 || bits == 0 || bad ||
            (t[i].transposed && t[i].ndim != 2) || (t[i].data == NULL && numel > 0)) {
            llmc_set_error(err, err_len, "safetensors file '%s': cannot write tensor %zu ('%s'): bad name, dtype, "
                           "shape or data", path, i, t[i].name != NULL ? t[i].name : "(null)");
            return -1;
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(t[i].name, t[j].name) == 0) {
                llmc_set_error(err, err_len, "safetensors file '%s': tensor '%s' given twice", path, t[i].name);
                return -1;
            }
        }
    }
    return 0;
}

// cJSON's number printing switches to an exponent for large integers; offsets are written as
// the integers they are
static inline cJSON *safetensors_json_u64_(uint64_t v) {
    char buf[32];
    snprintf(buf, sizeof(buf), "%llu", (unsigned long long)v);
    return cJSON_CreateRaw(buf);
}

// The header of n tensors, laid out in order from offset 0, padded with spaces to a multiple of 8:
// malloc'd, its length in *len; NULL when out of memory.
static inline char *safetensors_header_(const SafeTensorsWriteTensor *t, size_t n, size_t *len) {
    cJSON *root = cJSON_CreateObject(), *meta = cJSON_CreateObject();
    int ok = root != NULL && meta != NULL && cJSON_AddItemToObject(root, "__metadata__", meta);
    if (!ok) cJSON_Delete(meta);
    ok = ok && cJSON_AddStringToObject(meta, "format", "pt") != NULL;
    uint64_t at = 0;
    for (size_t i = 0; ok && i < n; i++) {
        cJSON *e = cJSON_CreateObject(), *shape = cJSON_CreateArray(), *offs = cJSON_CreateArray();
        ok = e != NULL && shape != NULL && offs != NULL && cJSON_AddItemToObject(root, t[i].name, e);
        if (!ok) {
            cJSON_Delete(e);
            cJSON_Delete(shape);
            cJSON_Delete(offs);
            break;
        }
        ok = cJSON_AddStringToObject(e, "dtype", safetensors_dtype_name(t[i].dtype)) != NULL;
        ok = cJSON_AddItemToObject(e, "shape", shape) && ok;
        ok = cJSON_AddItemToObject(e, "data_offsets", offs) && ok;
        for (int k = 0; ok && k < t[i].ndim; k++) ok = cJSON_AddItemToArray(shape, safetensors_json_u64_(t[i].shape[k]));
        const uint64_t bytes = safetensors_write_bytes_(&t[i]);
        ok = ok && cJSON_AddItemToArray(offs, safetensors_json_u64_(at)) &&
             cJSON_AddItemToArray(offs, safetensors_json_u64_(at + bytes));
        at += bytes;
    }
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (text == NULL) return NULL;
    const size_t raw = strlen(text), padded = (raw + 7) / 8 * 8;
    char *out = (char *)malloc(padded + 1);
    if (out != NULL) {
        memcpy(out, text, raw);
        memset(out + raw, ' ', padded - raw);
        out[padded] = 0;
        *len = padded;
    }
    free(text);
    return out;
}

// Writes the n tensors into the file at path, atomically (<path>.tmp, fsync with sync, rename).
// 0, or -1 with a message.
static inline int safetensors_write_file_checked(const char *path, const SafeTensorsWriteTensor *t, size_t n, int sync,
                                                 char *err, size_t err_len) {
    if (safetensors_write_check_(path, t, n, err, err_len) != 0) return -1;
    size_t hlen = 0;
    char *header = safetensors_header_(t, n, &hlen);
    if (header == NULL) {
        llmc_set_error(err, err_len, "safetensors file '%s': out of memory for the header", path);
        return -1;
    }
    if ((uint64_t)hlen > SAFETENSORS_MAX_HEADER_BYTES) {
        llmc_set_error(err, err_len, "safetensors file '%s': the header of %zu tensors is %zu bytes, above the "
                       "readers' limit of %llu", path, n, hlen, (unsigned long long)SAFETENSORS_MAX_HEADER_BYTES);
        free(header);
        return -1;
    }
    AtomicFile af;
    if (atomic_file_open(&af, path, sync) != 0) {
        llmc_set_error(err, err_len, "%s", af.err);
        free(header);
        return -1;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(((uint64_t)hlen >> (8 * i)) & 0xFF);
    atomic_file_write(&af, len8, 8);
    atomic_file_write(&af, header, hlen);
    free(header);
    unsigned char *row = NULL;
    for (size_t i = 0; i < n && !af.failed; i++) {
        if (!t[i].transposed) {
            atomic_file_write(&af, t[i].data, (size_t)safetensors_write_bytes_(&t[i]));
            continue;
        }
        // out (rows, cols) = transpose of data (cols, rows)
        const size_t rows = (size_t)t[i].shape[0], cols = (size_t)t[i].shape[1];
        const size_t es = (size_t)safetensors_dtype_bits(t[i].dtype) / 8;
        const unsigned char *src = (const unsigned char *)t[i].data;
        free(row);
        row = (unsigned char *)malloc(cols * es + 1);
        if (row == NULL) {
            llmc_set_error(err, err_len, "safetensors file '%s': out of memory", path);
            atomic_file_abort(&af);
            return -1;
        }
        for (size_t r = 0; r < rows && !af.failed; r++) {
            for (size_t c = 0; c < cols; c++) memcpy(row + c * es, src + (c * rows + r) * es, es);
            atomic_file_write(&af, row, cols * es);
        }
    }
    free(row);
    if (atomic_file_commit(&af) != 0) {
        llmc_set_error(err, err_len, "%s", af.err);
        return -1;
    }
    return 0;
}

// How n tensors split into shards of at most max_shard_bytes (huggingface_hub's rule, see the
// top of this file): shard_of[i] for each tensor; returns the number of shards.
static inline int safetensors_plan_shards(const SafeTensorsWriteTensor *t, size_t n, uint64_t max_shard_bytes,
                                          int *shard_of) {
    int shard = 0, open = 0;  // open: the current shard holds a tensor already
    uint64_t used = 0;
    for (size_t i = 0; i < n; i++) {
        const uint64_t b = safetensors_write_bytes_(&t[i]);
        if (b > max_shard_bytes) {  // a shard of its own
            if (open) shard++;
            shard_of[i] = shard++;
            open = 0;
            used = 0;
            continue;
        }
        if (open && used + b > max_shard_bytes) {
            shard++;
            used = 0;
        }
        shard_of[i] = shard;
        used += b;
        open = 1;
    }
    return n == 0 ? 1 : open ? shard + 1 : shard;
}

// Writes the tensors of a model into dir (an existing directory holding no other model files):
// model.safetensors, or shards model-0000k-of-0000K.safetensors and, last, the index (see the top
// of this file). max_shard_bytes 0: SAFETENSORS_DEFAULT_MAX_SHARD_BYTES. 0, or -1 with a message.
static inline int safetensors_write_model_checked(const char *dir, const SafeTensorsWriteTensor *t, size_t n,
                                                  uint64_t max_shard_bytes, int sync, char *err, size_t err_len) {
    if (max_shard_bytes == 0) max_shard_bytes = SAFETENSORS_DEFAULT_MAX_SHARD_BYTES;
    if (safetensors_write_check_(dir, t, n, err, err_len) != 0) return -1;
    int *shard_of = (int *)malloc((n + 1) * sizeof(int));
    SafeTensorsWriteTensor *part = (SafeTensorsWriteTensor *)malloc((n + 1) * sizeof(SafeTensorsWriteTensor));
    char *path = (char *)malloc(strlen(dir) + 64);
    if (shard_of == NULL || part == NULL || path == NULL) {
        llmc_set_error(err, err_len, "model directory '%s': out of memory", dir);
        free(shard_of);
        free(part);
        free(path);
        return -1;
    }
    const int shards = safetensors_plan_shards(t, n, max_shard_bytes, shard_of);
    int rc = 0;
    if (shards == 1) {
        sprintf(path, "%s/%s", dir, SAFETENSORS_SINGLE_NAME);
        rc = safetensors_write_file_checked(path, t, n, sync, err, err_len);
    }
    for (int s = 0; shards > 1 && s < shards && rc == 0; s++) {
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if (shard_of[i] == s) part[m++] = t[i];
        sprintf(path, "%s/model-%05d-of-%05d.safetensors", dir, s + 1, shards);
        rc = safetensors_write_file_checked(path, part, m, sync, err, err_len);
    }
    if (shards > 1 && rc == 0) {  // the index, last
        cJSON *root = cJSON_CreateObject(), *meta = cJSON_CreateObject(), *map = cJSON_CreateObject();
        int ok = root != NULL && meta != NULL && map != NULL;
        if (ok) {
            cJSON_AddItemToObject(root, "metadata", meta);
            cJSON_AddItemToObject(root, "weight_map", map);
        } else {
            cJSON_Delete(meta);
            cJSON_Delete(map);
        }
        uint64_t total = 0;
        for (size_t i = 0; i < n; i++) total += safetensors_write_bytes_(&t[i]);
        ok = ok && cJSON_AddItemToObject(meta, "total_size", safetensors_json_u64_(total));
        for (size_t i = 0; ok && i < n; i++) {
            char file[64];
            snprintf(file, sizeof(file), "model-%05d-of-%05d.safetensors", shard_of[i] + 1, shards);
            ok = cJSON_AddStringToObject(map, t[i].name, file) != NULL;
        }
        char *text = ok ? cJSON_Print(root) : NULL;
        cJSON_Delete(root);
        if (text == NULL) {
            llmc_set_error(err, err_len, "model directory '%s': out of memory for the index", dir);
            rc = -1;
        } else {
            sprintf(path, "%s/%s", dir, SAFETENSORS_INDEX_NAME);
            rc = atomic_write_file(path, text, strlen(text), sync, err, err_len);
            free(text);
        }
    }
    free(shard_of);
    free(part);
    free(path);
    return rc;
}

#endif // LLMC_SAFETENSORS_H
