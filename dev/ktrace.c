/*
ktrace.c - every kernel, copy and memset a CUDA program runs, with its start and end on the
GPU's clock, written to a file: a timeline of a training step at the clocks the step itself
runs at (Nsight Compute replays kernels one at a time, each at its own clock; Nsight Systems
is not on every machine). Loaded into any program, ours or a peer's, with LD_PRELOAD; CUPTI's
activity API does the recording, so the program is not changed.

    make build/libktrace.so
    KTRACE_OUT=trace.tsv LD_PRELOAD=build/libktrace.so ./train_gpt -e qwen2.5-0.5b -b 32 -x 12
    python3 scripts/ktrace_report.py trace.tsv         # a step's busy time, gaps, kernel families

One line a record, tab-separated: kind (K kernel, C copy, S memset), start and end (ns), stream,
grid (x,y,z), block (x,y,z), name (kernels: as CUPTI gives it, mangled; copies: the kind and
bytes). Without KTRACE_OUT set the library does nothing; with KTRACE_EXE=NAME set too, it traces
only a program of that name (e.g. under `timeout`, or a peer's trainer started by a script).
Records reach the file in buffers of 8 MiB, from CUPTI's thread, and at exit.
*/
#define _DEFAULT_SOURCE  // readlink
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>

#include <cupti.h>

#define KTRACE_BUFFER (8u << 20)

static FILE *ktrace_file;
static pthread_mutex_t ktrace_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long ktrace_records, ktrace_dropped;

static void ktrace_check(CUptiResult r, const char *what) {
    if (r == CUPTI_SUCCESS) return;
    const char *msg = NULL;
    cuptiGetResultString(r, &msg);
    fprintf(stderr, "ktrace: %s failed: %s\n", what, msg ? msg : "unknown CUPTI error");
    exit(EXIT_FAILURE);
}

static void CUPTIAPI ktrace_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = (uint8_t *)aligned_alloc(8, KTRACE_BUFFER);
    *size = *buffer ? KTRACE_BUFFER : 0;
    *max_records = 0;  // as many as fit
}

static const char *ktrace_copy_kind(uint8_t kind) {
    switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "PtoP";
    default: return "other";
    }
}

static void ktrace_write(const CUpti_Activity *rec) {
    FILE *f = ktrace_file;
    if (rec->kind == CUPTI_ACTIVITY_KIND_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
        // CUPTI hands the newest version of each record; the fields read here sit where every
        // version since CUpti_ActivityKernel4 (Memcpy, Memset: since the first) has them, so the
        // oldest type reads them with any CUDA toolkit's CUPTI (11, 12, 13)
        const CUpti_ActivityKernel4 *k = (const CUpti_ActivityKernel4 *)rec;
        fprintf(f, "K\t%llu\t%llu\t%u\t%d,%d,%d\t%d,%d,%d\t%s\n", (unsigned long long)k->start,
                (unsigned long long)k->end, k->streamId, k->gridX, k->gridY, k->gridZ, k->blockX, k->blockY,
                k->blockZ, k->name ? k->name : "?");
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
        const CUpti_ActivityMemcpy *m = (const CUpti_ActivityMemcpy *)rec;
        fprintf(f, "C\t%llu\t%llu\t%u\t-\t-\tcopy %s %llu B\n", (unsigned long long)m->start,
                (unsigned long long)m->end, m->streamId, ktrace_copy_kind(m->copyKind),
                (unsigned long long)m->bytes);
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
        const CUpti_ActivityMemset *m = (const CUpti_ActivityMemset *)rec;
        fprintf(f, "S\t%llu\t%llu\t%u\t-\t-\tmemset %llu B\n", (unsigned long long)m->start,
                (unsigned long long)m->end, m->streamId, (unsigned long long)m->bytes);
    } else {
        return;
    }
    ktrace_records++;
}

static void CUPTIAPI ktrace_buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                             size_t valid) {
    (void)ctx;
    (void)stream;
    (void)size;
    pthread_mutex_lock(&ktrace_lock);
    CUpti_Activity *rec = NULL;
    for (;;) {
        CUptiResult r = cuptiActivityGetNextRecord(buffer, valid, &rec);
        if (r == CUPTI_ERROR_MAX_LIMIT_REACHED) break;
        ktrace_check(r, "cuptiActivityGetNextRecord");
        if (ktrace_file) ktrace_write(rec);
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS) ktrace_dropped += dropped;
    pthread_mutex_unlock(&ktrace_lock);
    free(buffer);
}

static void ktrace_finish(void) {
    cuptiActivityFlushAll(1);
    pthread_mutex_lock(&ktrace_lock);
    if (ktrace_file) {
        int bad = ferror(ktrace_file) | fclose(ktrace_file);
        ktrace_file = NULL;
        fprintf(stderr, "ktrace: %llu records%s%s\n", ktrace_records, bad ? ", WRITE FAILED" : "",
                ktrace_dropped ? " (CUPTI dropped some: the timeline has holes)" : "");
    }
    pthread_mutex_unlock(&ktrace_lock);
}

__attribute__((constructor)) static void ktrace_start(void) {
    const char *path = getenv("KTRACE_OUT");
    if (!path || !*path) return;
    // KTRACE_EXE: trace only the program of that name (LD_PRELOAD also reaches a wrapper such as
    // timeout or a shell, which must neither truncate the file nor start CUPTI)
    const char *only = getenv("KTRACE_EXE");
    if (only && *only) {
        char exe[4096];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (n <= 0) return;
        exe[n] = '\0';
        const char *base = strrchr(exe, '/');
        if (strcmp(base ? base + 1 : exe, only) != 0) return;
    }
    ktrace_file = fopen(path, "w");
    if (!ktrace_file) {
        fprintf(stderr, "ktrace: cannot open KTRACE_OUT=%s for writing\n", path);
        exit(EXIT_FAILURE);
    }
    ktrace_check(cuptiActivityRegisterCallbacks(ktrace_buffer_requested, ktrace_buffer_completed),
                 "cuptiActivityRegisterCallbacks");
    ktrace_check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enabling kernel records");
    ktrace_check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "enabling copy records");
    ktrace_check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "enabling memset records");
    atexit(ktrace_finish);
}
