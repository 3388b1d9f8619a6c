/*
shard.h - llm.c's token shard files: header validation, a checked writer and a whole-file
reader. The streaming reader for training is llmc/dataloader.h, which uses the same
validation.

Layout (little endian; llm.c dataloader.h and data_common.py):
    int32 header[256]: [0] = magic, [1] = version, [2] = ntok (>= 1), the rest 0
    ntok tokens
  GPT-2 shards:  magic 20240520, version 1, uint16 tokens
  Llama-3 shards: magic 20240801, version 7, uint32 tokens
  The file is exactly 1024 + ntok * sizeof(token) bytes. ntok is an int32, so a shard holds
  at most 2^31 - 1 tokens: up to 4 GiB of uint16 or 8 GiB of uint32 (offsets are 64-bit).
*/
#ifndef LLMC_SHARD_H
#define LLMC_SHARD_H

#include "utils.h"

#define SHARD_HEADER_INTS 256
#define SHARD_HEADER_BYTES (SHARD_HEADER_INTS * 4)
#define SHARD_MAGIC 20240520         // GPT-2: uint16 tokens
#define SHARD_VERSION 1
#define SHARD_MAGIC_LLAMA3 20240801  // Llama 3: uint32 tokens
#define SHARD_VERSION_LLAMA3 7

typedef struct {
    int version;          // 1 (uint16 tokens) or 7 (uint32 tokens)
    int token_bytes;      // 2 or 4
    int64_t num_tokens;   // header[2]
    int64_t file_bytes;   // 1024 + num_tokens * token_bytes
} ShardInfo;

// Checks a header against the file size; fills info. 0 on success, -1 with a message
// naming path and the offending field.
static inline int shard_check_header(const int32_t header[SHARD_HEADER_INTS], int64_t file_bytes,
                                     const char *path, ShardInfo *info, char *err, size_t err_len) {
    int32_t magic = header[0], version = header[1], ntok = header[2];
    if (magic != SHARD_MAGIC && magic != SHARD_MAGIC_LLAMA3) {
        llmc_set_error(err, err_len, "shard '%s': bad magic %d (expected %d for uint16 tokens or "
                       "%d for uint32 tokens)", path, (int)magic, SHARD_MAGIC, SHARD_MAGIC_LLAMA3);
        return -1;
    }
    int expected_version = magic == SHARD_MAGIC ? SHARD_VERSION : SHARD_VERSION_LLAMA3;
    if (version != expected_version) {
        llmc_set_error(err, err_len, "shard '%s': bad version %d for magic %d (expected %d)", path,
                       (int)version, (int)magic, expected_version);
        return -1;
    }
    if (ntok < 1) {
        llmc_set_error(err, err_len, "shard '%s': bad token count %d in the header (must be >= 1)",
                       path, (int)ntok);
        return -1;
    }
    int token_bytes = magic == SHARD_MAGIC ? 2 : 4;
    int64_t expected_bytes = SHARD_HEADER_BYTES + (int64_t)ntok * token_bytes;
    if (file_bytes != expected_bytes) {
        llmc_set_error(err, err_len, "shard '%s': file is %lld bytes but the header's %d tokens of "
                       "%d bytes need %lld (%s)", path, (long long)file_bytes, (int)ntok,
                       token_bytes, (long long)expected_bytes,
                       file_bytes < expected_bytes ? "truncated" : "trailing bytes");
        return -1;
    }
    info->version = version;
    info->token_bytes = token_bytes;
    info->num_tokens = ntok;
    info->file_bytes = file_bytes;
    return 0;
}

// Opens and validates a shard; on success *fp is open (positioned after the header).
static inline int shard_open_checked(const char *path, FILE **fp_out, ShardInfo *info, char *err,
                                     size_t err_len) {
    *fp_out = NULL;
    FILE *fp = llmc_fopen_read_checked(path, "shard", err, err_len);
    if (fp == NULL) return -1;
    int32_t header[SHARD_HEADER_INTS];
    int64_t file_bytes = 0;
    if (llmc_file_size(fp, &file_bytes) != 0) {
        llmc_set_error(err, err_len, "shard '%s': cannot determine the file size: %s", path,
                       strerror(errno));
        fclose(fp);
        return -1;
    }
    if (file_bytes < SHARD_HEADER_BYTES || llmc_read_exact(fp, header, sizeof(header)) != 0) {
        llmc_set_error(err, err_len, "shard '%s': truncated header (file is %lld bytes, the header "
                       "alone is %d)", path, (long long)file_bytes, SHARD_HEADER_BYTES);
        fclose(fp);
        return -1;
    }
    if (shard_check_header(header, file_bytes, path, info, err, err_len) != 0) {
        fclose(fp);
        return -1;
    }
    *fp_out = fp;
    return 0;
}

// The largest token id of an open shard (fp from shard_open_checked; its position moves) and
// the position of its first occurrence: one sequential pass, so that a loader can check a
// shard against a vocabulary once instead of every batch.
static inline int shard_max_token_checked(FILE *fp, const ShardInfo *info, const char *path,
                                          uint32_t *max_id, int64_t *max_at, char *err, size_t err_len) {
    *max_id = 0;
    *max_at = 0;
    if (fseeko(fp, SHARD_HEADER_BYTES, SEEK_SET) != 0) {
        llmc_set_error(err, err_len, "shard '%s': seek failed: %s", path, strerror(errno));
        return -1;
    }
    unsigned char buf[1 << 16];
    const int64_t per_read = (int64_t)sizeof(buf) / info->token_bytes;
    for (int64_t done = 0; done < info->num_tokens;) {
        const int64_t n = info->num_tokens - done < per_read ? info->num_tokens - done : per_read;
        if (llmc_read_exact(fp, buf, (size_t)n * (size_t)info->token_bytes) != 0) {
            llmc_set_error(err, err_len, "shard '%s': read error in the token data (file changed?)", path);
            return -1;
        }
        for (int64_t i = 0; i < n; i++) {
            const unsigned char *p = buf + i * info->token_bytes;
            const uint32_t v = info->token_bytes == 2 ? (uint32_t)(p[0] | (p[1] << 8)) : llmc_get_u32(p);
            if (v > *max_id || done + i == 0) {
                *max_id = v;
                *max_at = done + i;
            }
        }
        done += n;
    }
    return 0;
}

// Writes ids[0..n) as a shard of the given version (1: ids < 65536, 7: any uint32).
static inline int shard_write_checked(const char *path, const uint32_t *ids, size_t n, int version,
                                      char *err, size_t err_len) {
    if (version != SHARD_VERSION && version != SHARD_VERSION_LLAMA3) {
        llmc_set_error(err, err_len, "shard '%s': cannot write version %d (1 or 7)", path, version);
        return -1;
    }
    if (n < 1 || n > 0x7FFFFFFF) {
        llmc_set_error(err, err_len, "shard '%s': %zu tokens do not fit a shard (1 .. 2^31-1)",
                       path, n);
        return -1;
    }
    int token_bytes = version == SHARD_VERSION ? 2 : 4;
    if (token_bytes == 2) {
        for (size_t i = 0; i < n; i++) {
            if (ids[i] > 0xFFFF) {
                llmc_set_error(err, err_len, "shard '%s': token %zu has id %u, too large for "
                               "uint16 (write version 7 for uint32 tokens)", path, i, ids[i]);
                return -1;
            }
        }
    }
    unsigned char header[SHARD_HEADER_BYTES];
    memset(header, 0, sizeof(header));
    llmc_put_u32(header, token_bytes == 2 ? SHARD_MAGIC : SHARD_MAGIC_LLAMA3);
    llmc_put_u32(header + 4, (uint32_t)version);
    llmc_put_u32(header + 8, (uint32_t)n);
    AtomicFile af;
    if (atomic_file_open(&af, path, 0) != 0) {
        llmc_set_error(err, err_len, "%s", af.err);
        return -1;
    }
    atomic_file_write(&af, header, sizeof(header));
    unsigned char buf[8192];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        for (int b = 0; b < token_bytes; b++) buf[k++] = (unsigned char)((ids[i] >> (8 * b)) & 0xFF);
        if (k == sizeof(buf)) {
            atomic_file_write(&af, buf, k);
            k = 0;
        }
    }
    atomic_file_write(&af, buf, k);
    if (atomic_file_commit(&af) != 0) {
        llmc_set_error(err, err_len, "%s", af.err);
        return -1;
    }
    return 0;
}

// Reads a whole shard of either version into *ids (malloc'd, free it) as uint32.
static inline int shard_read_checked(const char *path, uint32_t **ids, size_t *n, ShardInfo *info,
                                     char *err, size_t err_len) {
    *ids = NULL;
    *n = 0;
    FILE *fp;
    ShardInfo si;
    if (shard_open_checked(path, &fp, &si, err, err_len) != 0) return -1;
    size_t count = (size_t)si.num_tokens, nbytes = count * (size_t)si.token_bytes;
    unsigned char *raw = (unsigned char *)malloc(nbytes);
    uint32_t *out = (uint32_t *)malloc(count * sizeof(uint32_t));
    if (raw == NULL || out == NULL) {
        llmc_set_error(err, err_len, "shard '%s': out of memory for %zu tokens", path, count);
        free(raw);
        free(out);
        fclose(fp);
        return -1;
    }
    int rc = llmc_read_exact(fp, raw, nbytes);
    fclose(fp);
    if (rc != 0) {
        llmc_set_error(err, err_len, "shard '%s': read error in the token data", path);
        free(raw);
        free(out);
        return -1;
    }
    for (size_t i = 0; i < count; i++) {
        const unsigned char *p = raw + i * (size_t)si.token_bytes;
        out[i] = si.token_bytes == 2 ? (uint32_t)(p[0] | (p[1] << 8)) : llmc_get_u32(p);
    }
    free(raw);
    *ids = out;
    *n = count;
    if (info != NULL) *info = si;
    return 0;
}

// ----------------------------------------------------------------------------
// the GPT-2 (uint16, version 1) entry points used by data/bpe_encode.c and test/test_bpe.c;
// they print "error: ..." to stderr and return -1 on failure

static inline int shard_write(const char *path, const uint32_t *ids, size_t n) {
    char err[512];
    if (shard_write_checked(path, ids, n, SHARD_VERSION, err, sizeof(err)) != 0) {
        fprintf(stderr, "error: %s\n", err);
        return -1;
    }
    return 0;
}

// Reads a version 1 shard; *ids is malloc'd (free it).
static inline int shard_read(const char *path, uint16_t **ids, size_t *n) {
    char err[512];
    uint32_t *wide;
    ShardInfo si;
    *ids = NULL;
    *n = 0;
    if (shard_read_checked(path, &wide, n, &si, err, sizeof(err)) != 0) {
        fprintf(stderr, "error: %s\n", err);
        return -1;
    }
    if (si.version != SHARD_VERSION) {
        fprintf(stderr, "error: shard '%s' is version %d (uint32 tokens); expected version 1\n",
                path, si.version);
        free(wide);
        *n = 0;
        return -1;
    }
    uint16_t *narrow = (uint16_t *)malloc(*n * sizeof(uint16_t));
    if (narrow == NULL) {
        fprintf(stderr, "error: shard '%s': out of memory\n", path);
        free(wide);
        *n = 0;
        return -1;
    }
    for (size_t i = 0; i < *n; i++) narrow[i] = (uint16_t)wide[i];
    free(wide);
    *ids = narrow;
    return 0;
}

#endif // LLMC_SHARD_H
