/*
fuzz_common.h - what the fuzz targets of test/fuzz/ share: the input written to a temporary
file (for the readers that take a path), an error buffer, a finding reported as an abort.

Each fuzz_<reader>.c defines LLVMFuzzerTestOneInput (and optionally LLVMFuzzerInitialize); it is
linked either with libFuzzer (clang -fsanitize=fuzzer,address,undefined) or with
test/fuzz/driver.c, the built-in mutation loop (gcc -fsanitize=address,undefined). A reader
that rejects its input with a message passes; a sanitizer report, a crash, a hang or an
inconsistent input accepted (FUZZ_CHECK) is a finding.
*/
#ifndef FUZZ_COMMON_H
#define FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

// an accepted input that breaks an invariant of the reader's result: a finding
#define FUZZ_CHECK(cond, ...)                                                               \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "FUZZ FINDING %s:%d: %s: ", __FILE__, __LINE__, #cond);         \
            fprintf(stderr, __VA_ARGS__);                                                   \
            fprintf(stderr, "\n");                                                          \
            abort();                                                                        \
        }                                                                                   \
    } while (0)

static char fuzz_dir_[64];

static void fuzz_cleanup_(void) {
    if (fuzz_dir_[0] == '\0') return;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fuzz_dir_);
    if (system(cmd) != 0) fprintf(stderr, "fuzz: cannot remove %s\n", fuzz_dir_);
}

// A path in this process's temporary directory (created on first use, removed at exit).
static inline const char *fuzz_path(const char *name) {
    static char path[256];
    if (fuzz_dir_[0] == '\0') {
        snprintf(fuzz_dir_, sizeof(fuzz_dir_), "/tmp/llmc_fuzz_XXXXXX");
        if (mkdtemp(fuzz_dir_) == NULL) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(fuzz_cleanup_);
    }
    snprintf(path, sizeof(path), "%s/%s", fuzz_dir_, name);
    return path;
}

// Writes data[0..size) to the file name of the temporary directory; returns its path.
static inline const char *fuzz_write_file(const char *name, const uint8_t *data, size_t size) {
    const char *path = fuzz_path(name);
    FILE *fp = fopen(path, "wb");
    if (fp == NULL || (size > 0 && fwrite(data, 1, size, fp) != size) || fclose(fp) != 0) {
        perror("fuzz: cannot write the input file");
        abort();
    }
    return path;
}

#endif
