/*
utils.h - checked file and memory calls, and the atomic writer every file writer uses.

Two kinds of error handling, as in llm.c plus a testable layer under it:
  - fopen_check, fread_check, fwrite_check, fflush_check, fclose_check, fseek_check, ftell_check,
    malloc_check: on failure print the source file and line of the call, the path of the
    file involved (remembered from fopen_check) and what went wrong, then exit(1).
  - the *_checked functions of the other llmc/ headers never exit: they return 0 on
    success and -1 on failure after formatting a message into a caller's buffer
    (char *err, size_t err_len; either may be NULL/0). The exiting entry points
    (tokenizer_init, dataloader_init, ...) are thin wrappers around them.

Atomic writes: AtomicFile writes to "<path>.tmp", checks every write, flushes, optionally
fsyncs, closes and renames the temporary over <path>; on any failure the temporary is
removed. So a reader (or a resumed run) never sees a half-written checkpoint.
atomic_write_signal_safe is the same commit without stdio or malloc, for an exit path or a
signal handler (the multi-GPU rendezvous' files: llmc/rendezvous.h).

Files are little endian; like llm.c, headers and tensors are read and written as raw
host integers and floats, so the host must be little endian (x86-64 and aarch64 are).

This header needs POSIX (fseeko/ftello with a 64-bit off_t, fileno, fsync). It requests
it itself when it is the first header of a translation unit; a C file that includes
system headers before it should start with #define _POSIX_C_SOURCE 200809L.
*/
#ifndef LLMC_UTILS_H
#define LLMC_UTILS_H

#if !defined(_POSIX_C_SOURCE) && !defined(_XOPEN_SOURCE) && !defined(_GNU_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#ifndef _FILE_OFFSET_BITS
#define _FILE_OFFSET_BITS 64
#endif

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

// shards and checkpoints are larger than 2 GiB: offsets must not be truncated to 32 bits
typedef char llmc_off_t_must_be_64_bit[sizeof(off_t) >= 8 ? 1 : -1];

// ----------------------------------------------------------------------------
// error messages for the non-exiting (*_checked) functions

// Formats a message into err[0..err_len) (truncating); a NULL err is allowed.
static inline void llmc_set_error(char *err, size_t err_len, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static inline void llmc_set_error(char *err, size_t err_len, const char *fmt, ...) {
    if (err == NULL || err_len == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

// ----------------------------------------------------------------------------
// paths of the streams opened by fopen_check, so later failures can name the file

#define LLMC_TRACKED_FILES 64
#define LLMC_TRACKED_PATH_LEN 512

typedef struct {
    FILE *fp;
    char path[LLMC_TRACKED_PATH_LEN];
} LlmcTrackedFile;

// One table per translation unit; a stream opened in another one is reported unnamed.
static inline LlmcTrackedFile *llmc_tracked_files(void) {
    static LlmcTrackedFile table[LLMC_TRACKED_FILES];
    return table;
}

static inline void llmc_track_file(FILE *fp, const char *path) {
    LlmcTrackedFile *t = llmc_tracked_files();
    for (int i = 0; i < LLMC_TRACKED_FILES; i++) {
        if (t[i].fp == NULL) {
            t[i].fp = fp;
            llmc_set_error(t[i].path, sizeof(t[i].path), "%s", path);
            return;
        }
    }  // table full: the stream simply stays unnamed in messages
}

static inline void llmc_untrack_file(FILE *fp) {
    LlmcTrackedFile *t = llmc_tracked_files();
    for (int i = 0; i < LLMC_TRACKED_FILES; i++)
        if (t[i].fp == fp) t[i].fp = NULL;
}

static inline const char *llmc_file_path(FILE *fp) {
    LlmcTrackedFile *t = llmc_tracked_files();
    for (int i = 0; i < LLMC_TRACKED_FILES; i++)
        if (fp != NULL && t[i].fp == fp) return t[i].path;
    return "(unnamed stream)";
}

// ----------------------------------------------------------------------------
// exiting checks (llm.c style)

static inline FILE *fopen_check_(const char *path, const char *mode, const char *file, int line) {
    FILE *fp = fopen(path, mode);
    if (fp == NULL) {
        fprintf(stderr, "Error: failed to open file '%s' (mode %s) at %s:%d: %s\n", path, mode,
                file, line, strerror(errno));
        exit(EXIT_FAILURE);
    }
    llmc_track_file(fp, path);
    return fp;
}
#define fopen_check(path, mode) fopen_check_(path, mode, __FILE__, __LINE__)

static inline void fread_check_(void *ptr, size_t size, size_t nmemb, FILE *fp, const char *file,
                                int line) {
    size_t got = fread(ptr, size, nmemb, fp);
    if (got != nmemb) {
        fprintf(stderr, "Error: reading '%s' failed at %s:%d: expected %zu elements of %zu bytes, "
                "got %zu (%s)\n", llmc_file_path(fp), file, line, nmemb, size, got,
                feof(fp) ? "unexpected end of file" : ferror(fp) ? strerror(errno) : "short read");
        exit(EXIT_FAILURE);
    }
}
#define fread_check(ptr, size, nmemb, fp) fread_check_(ptr, size, nmemb, fp, __FILE__, __LINE__)

static inline void fwrite_check_(const void *ptr, size_t size, size_t nmemb, FILE *fp,
                                 const char *file, int line) {
    size_t put = fwrite(ptr, size, nmemb, fp);
    if (put != nmemb) {
        fprintf(stderr, "Error: writing '%s' failed at %s:%d: expected %zu elements of %zu bytes, "
                "wrote %zu (%s)\n", llmc_file_path(fp), file, line, nmemb, size, put,
                strerror(errno));
        exit(EXIT_FAILURE);
    }
}
#define fwrite_check(ptr, size, nmemb, fp) fwrite_check_(ptr, size, nmemb, fp, __FILE__, __LINE__)

static inline void fflush_check_(FILE *fp, const char *file, int line) {
    if (fflush(fp) != 0) {
        fprintf(stderr, "Error: flushing '%s' failed at %s:%d: %s\n", llmc_file_path(fp), file, line,
                strerror(errno));
        exit(EXIT_FAILURE);
    }
}
#define fflush_check(fp) fflush_check_(fp, __FILE__, __LINE__)

static inline void fclose_check_(FILE *fp, const char *file, int line) {
    char path[LLMC_TRACKED_PATH_LEN];
    llmc_set_error(path, sizeof(path), "%s", llmc_file_path(fp));
    llmc_untrack_file(fp);
    if (fclose(fp) != 0) {
        fprintf(stderr, "Error: closing '%s' failed at %s:%d: %s\n", path, file, line,
                strerror(errno));
        exit(EXIT_FAILURE);
    }
}
#define fclose_check(fp) fclose_check_(fp, __FILE__, __LINE__)

// offset is 64-bit: positions past 2 GiB go through fseeko unchanged
static inline void fseek_check_(FILE *fp, int64_t offset, int whence, const char *file, int line) {
    if (fseeko(fp, (off_t)offset, whence) != 0) {
        fprintf(stderr, "Error: seeking '%s' to offset %lld (whence %d) failed at %s:%d: %s\n",
                llmc_file_path(fp), (long long)offset, whence, file, line, strerror(errno));
        exit(EXIT_FAILURE);
    }
}
#define fseek_check(fp, offset, whence) fseek_check_(fp, offset, whence, __FILE__, __LINE__)

static inline int64_t ftell_check_(FILE *fp, const char *file, int line) {
    off_t pos = ftello(fp);
    if (pos < 0) {
        fprintf(stderr, "Error: ftell on '%s' failed at %s:%d: %s\n", llmc_file_path(fp), file,
                line, strerror(errno));
        exit(EXIT_FAILURE);
    }
    return (int64_t)pos;
}
#define ftell_check(fp) ftell_check_(fp, __FILE__, __LINE__)

static inline void *malloc_check_(size_t size, const char *file, int line) {
    void *p = malloc(size ? size : 1);
    if (p == NULL) {
        fprintf(stderr, "Error: failed to allocate %zu bytes at %s:%d\n", size, file, line);
        exit(EXIT_FAILURE);
    }
    return p;
}
#define malloc_check(size) malloc_check_(size, __FILE__, __LINE__)

// ----------------------------------------------------------------------------
// non-exiting helpers for the readers

// Opens a regular file for reading; NULL with "cannot open <what> '<path>': <reason>" in err.
// A directory is refused here: fopen accepts one, and its "size" would be read as 2^63 - 1.
static inline FILE *llmc_fopen_read_checked(const char *path, const char *what, char *err, size_t err_len) {
    FILE *fp = fopen(path, "rb");
    struct stat sb;
    if (fp != NULL && fstat(fileno(fp), &sb) == 0 && !S_ISREG(sb.st_mode)) {
        fclose(fp);
        fp = NULL;
        errno = S_ISDIR(sb.st_mode) ? EISDIR : EINVAL;
    }
    if (fp == NULL)
        llmc_set_error(err, err_len, "cannot open %s '%s': %s", what, path,
                       errno == EINVAL ? "not a regular file" : strerror(errno));
    return fp;
}

// Size of an open file in bytes (the position is restored); 0 on success, -1 on failure.
static inline int llmc_file_size(FILE *fp, int64_t *size) {
    off_t pos = ftello(fp);
    if (pos < 0 || fseeko(fp, 0, SEEK_END) != 0) return -1;
    off_t end = ftello(fp);
    if (end < 0 || fseeko(fp, pos, SEEK_SET) != 0) return -1;
    *size = (int64_t)end;
    return 0;
}

// Reads exactly n bytes; 0 on success, -1 on a short read or an error.
static inline int llmc_read_exact(FILE *fp, void *dst, size_t n) {
    return fread(dst, 1, n, fp) == n ? 0 : -1;
}

// The whole regular file at path (what names it in messages) of at most max_bytes, malloc'd with
// a NUL after its *len bytes (free it); NULL with "<what> '<path>': <why>" in err.
static inline char *llmc_read_whole_checked(const char *path, const char *what, int64_t max_bytes, size_t *len,
                                            char *err, size_t err_len) {
    *len = 0;
    FILE *fp = llmc_fopen_read_checked(path, what, err, err_len);
    if (fp == NULL) return NULL;
    int64_t size = 0;
    char *data = NULL;
    int rc = llmc_file_size(fp, &size) == 0 && size <= max_bytes ? 0 : -1;
    if (rc == 0) data = (char *)malloc((size_t)size + 1);
    if (rc == 0 && (data == NULL || llmc_read_exact(fp, data, (size_t)size) != 0)) rc = -1;
    fclose(fp);
    if (rc != 0) {
        if (size > max_bytes)
            llmc_set_error(err, err_len, "%s '%s': larger than %lld MiB", what, path, (long long)(max_bytes >> 20));
        else
            llmc_set_error(err, err_len, "%s '%s': cannot read it", what, path);
        free(data);
        return NULL;
    }
    data[size] = 0;
    *len = (size_t)size;
    return data;
}

// a * b without wrapping; 0 on success, -1 if the product does not fit 64 bits
static inline int llmc_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    if (a != 0 && b > UINT64_MAX / a) return -1;
    *out = a * b;
    return 0;
}

static inline void llmc_put_u32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v & 0xFF);
    p[1] = (unsigned char)((v >> 8) & 0xFF);
    p[2] = (unsigned char)((v >> 16) & 0xFF);
    p[3] = (unsigned char)((v >> 24) & 0xFF);
}

static inline uint32_t llmc_get_u32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

// ----------------------------------------------------------------------------
// atomic writer: <path>.tmp, checked writes, flush (+ fsync), close, rename

typedef struct {
    FILE *fp;
    char *path;      // final path (a copy)
    char *tmp_path;  // path + ".tmp"
    int sync;        // fsync the file before the rename and its directory after it
    int failed;      // sticky: after the first failure every write is a no-op
    char err[512];   // what went wrong, naming the file
} AtomicFile;

static inline void atomic_file_release_(AtomicFile *af) {
    free(af->path);
    free(af->tmp_path);
    af->path = af->tmp_path = NULL;
    af->fp = NULL;
}

// Creates <path>.tmp. sync != 0 makes the commit durable (fsync) at some cost in time.
static inline int atomic_file_open(AtomicFile *af, const char *path, int sync) {
    memset(af, 0, sizeof(*af));
    af->sync = sync;
    size_t n = strlen(path);
    af->path = (char *)malloc(n + 1);
    af->tmp_path = (char *)malloc(n + 5);
    if (af->path == NULL || af->tmp_path == NULL) {
        llmc_set_error(af->err, sizeof(af->err), "out of memory opening '%s' for writing", path);
        atomic_file_release_(af);
        af->failed = 1;
        return -1;
    }
    memcpy(af->path, path, n + 1);
    memcpy(af->tmp_path, path, n);
    memcpy(af->tmp_path + n, ".tmp", 5);
    af->fp = fopen(af->tmp_path, "wb");
    if (af->fp == NULL) {
        llmc_set_error(af->err, sizeof(af->err), "cannot create '%s': %s", af->tmp_path, strerror(errno));
        atomic_file_release_(af);
        af->failed = 1;
        return -1;
    }
    return 0;
}

static inline void atomic_file_write(AtomicFile *af, const void *data, size_t n) {
    if (af->failed || af->fp == NULL || n == 0) return;
    if (fwrite(data, 1, n, af->fp) != n) {
        llmc_set_error(af->err, sizeof(af->err), "writing '%s' failed: %s", af->tmp_path, strerror(errno));
        af->failed = 1;
    }
}

// Discards the temporary file (after a failure, or when the caller gives up).
static inline void atomic_file_abort(AtomicFile *af) {
    if (af->fp != NULL) {
        fclose(af->fp);
        remove(af->tmp_path);
    }
    atomic_file_release_(af);
    af->failed = 1;
}

// fsyncs a directory, so that renames and removals in it survive a crash; 0 or -1
static inline int llmc_fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

// fsyncs the directory holding path, so the rename itself survives a crash
static inline int atomic_file_sync_dir_(const char *path) {
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (slash == NULL) {
        snprintf(dir, sizeof(dir), ".");
    } else {
        size_t n = (size_t)(slash - path);
        if (n == 0) n = 1;  // "/file"
        if (n >= sizeof(dir)) return -1;
        memcpy(dir, path, n);
        dir[n] = 0;
    }
    return llmc_fsync_dir(dir);
}

// Finishes the file; 0 on success, -1 (message in af->err) after removing the temporary.
static inline int atomic_file_commit(AtomicFile *af) {
    if (af->fp == NULL) return -1;
    if (!af->failed && (fflush(af->fp) != 0 || ferror(af->fp))) {
        llmc_set_error(af->err, sizeof(af->err), "writing '%s' failed: %s", af->tmp_path, strerror(errno));
        af->failed = 1;
    }
    if (!af->failed && af->sync && fsync(fileno(af->fp)) != 0) {
        llmc_set_error(af->err, sizeof(af->err), "fsync of '%s' failed: %s", af->tmp_path, strerror(errno));
        af->failed = 1;
    }
    if (af->failed) {
        atomic_file_abort(af);
        return -1;
    }
    int close_rc = fclose(af->fp);
    af->fp = NULL;
    if (close_rc != 0) {
        llmc_set_error(af->err, sizeof(af->err), "closing '%s' failed: %s", af->tmp_path, strerror(errno));
        remove(af->tmp_path);
        atomic_file_release_(af);
        af->failed = 1;
        return -1;
    }
    if (rename(af->tmp_path, af->path) != 0) {
        llmc_set_error(af->err, sizeof(af->err), "renaming '%s' to '%s' failed: %s", af->tmp_path,
                 af->path, strerror(errno));
        remove(af->tmp_path);
        atomic_file_release_(af);
        af->failed = 1;
        return -1;
    }
    if (af->sync && atomic_file_sync_dir_(af->path) != 0) {
        llmc_set_error(af->err, sizeof(af->err), "fsync of the directory of '%s' failed: %s", af->path,
                 strerror(errno));
        atomic_file_release_(af);
        af->failed = 1;
        return -1;  // the file is in place; only its durability is in doubt
    }
    atomic_file_release_(af);
    return 0;
}

// Writes a whole buffer to path atomically (an empty buffer makes an empty file).
static inline int atomic_write_file(const char *path, const void *data, size_t n, int sync,
                                    char *err, size_t err_len) {
    AtomicFile af;
    if (atomic_file_open(&af, path, sync) != 0) {
        llmc_set_error(err, err_len, "%s", af.err);
        return -1;
    }
    atomic_file_write(&af, data, n);
    if (atomic_file_commit(&af) != 0) {
        llmc_set_error(err, err_len, "%s", af.err);
        return -1;
    }
    return 0;
}

// A whole buffer to path through the temporary tmp, in async-signal-safe calls only (open,
// write, close, rename, unlink: no stdio, no malloc), so that an exit path or a signal handler
// may write a file. tmp is the caller's, made beforehand: one per process where several may
// write path at once (a shared directory). No fsync. 0, or -1 after removing the temporary.
static inline int atomic_write_signal_safe(const char *path, const char *tmp, const void *data, size_t n) {
    const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return -1;
    size_t done = 0;
    while (done < n) {
        const ssize_t w = write(fd, (const char *)data + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        done += (size_t)w;
    }
    if (close(fd) != 0 || done != n || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

#endif // LLMC_UTILS_H
