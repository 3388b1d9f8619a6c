/*
test_files.h - the file helpers the host test programs share: a temporary directory per run
(tmp_dir, filled by the test's main with mkdtemp), paths in it, whole-file reads and writes,
and substring checks on error messages. Include after llmc/utils.h (llmc_file_size).
*/
#ifndef TEST_FILES_H
#define TEST_FILES_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char tmp_dir[64];

static inline void tmp_path(char *buf, size_t len, const char *name) { snprintf(buf, len, "%s/%s", tmp_dir, name); }

static inline int contains(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

// Writes n bytes to path; 1 on success.
static inline int write_bytes(const char *path, const void *data, size_t n) {
    FILE *fp = fopen(path, "wb");
    if (fp == NULL) return 0;
    const int ok = fwrite(data, 1, n, fp) == n;
    return fclose(fp) == 0 && ok;
}

// The whole file, malloc'd with a NUL after its *n bytes (so that text can be searched); NULL
// when it cannot be read.
static inline unsigned char *read_all(const char *path, size_t *n) {
    *n = 0;
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) return NULL;
    int64_t size;
    if (llmc_file_size(fp, &size) != 0) {
        fclose(fp);
        return NULL;
    }
    unsigned char *buf = (unsigned char *)malloc((size_t)size + 16);
    if (buf != NULL && fread(buf, 1, (size_t)size, fp) != (size_t)size) {
        free(buf);
        buf = NULL;
    }
    fclose(fp);
    if (buf != NULL) {
        buf[size] = 0;
        *n = (size_t)size;
    }
    return buf;
}

#endif // TEST_FILES_H
