/*
metrics_log.h - the trainer's machine-readable log: main.jsonl beside llm.c's main.log in the
output directory (-o), one JSON object a line, flushed as it is written, for plotting
(scripts/plot_log.py) or any JSON-lines reader:

  {"step": 10, "tokens": 720896, "loss": 5.861, "lr": 0.0003, "norm": 1.47, "ms": 106.8,
   "tok_per_s": 613568, "mfu": 51.4, "mem_mib": 19013}                    a training step
  {"step": 10, "tokens": 655360, "val_loss": 5.902}                        a validation

"step" is main.log's s: field (the updates done before the value was taken: a step's loss is
the one of the batch that makes update step + 1), so a step's train and val lines pair as in
llm.c's log; "tokens" counts the training tokens that went into the model up to the value
(train: through this step's batch, (step + 1) x the tokens a step; val: step x that). "mfu" is
null where the GPU's peak is unknown, "mem_mib" the device memory in use on rank 0 (the CUDA
context included). Step and tokens are integers, the other numbers printed with 9 significant
digits (a float's round trip); a value that is not finite is written as null (JSON has no NaN). A line is formatted whole and
written by one checked fwrite, then flushed, so a crash leaves at most a last line cut short,
which readers skip.
*/
#ifndef LLMC_METRICS_LOG_H
#define LLMC_METRICS_LOG_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "utils.h"

#define METRICS_LOG_NAME "main.jsonl"
#define METRICS_LINE_MAX 512

typedef struct {
    int step;            // updates done before the step (main.log's s:)
    long long tokens;    // training tokens through this step's batch
    double loss, lr, norm;
    double ms;           // the step's time
    double tok_per_s;    // the trainer's shown tokens/s (its running average)
    double mfu;          // percent; < 0: unknown (null)
    double mem_mib;      // device memory in use; < 0: unknown (null)
} TrainMetrics;

// ", "key": value (or null) appended at buf + *len; returns 0, or -1 if it does not fit
static inline int metrics_put_(char *buf, size_t cap, size_t *len, const char *key, double v, int first) {
    const int n = isfinite(v) ? snprintf(buf + *len, cap - *len, "%s\"%s\": %.9g", first ? "" : ", ", key, v)
                              : snprintf(buf + *len, cap - *len, "%s\"%s\": null", first ? "" : ", ", key);
    if (n < 0 || (size_t)n >= cap - *len) return -1;
    *len += (size_t)n;
    return 0;
}

// ", "key": integer appended at buf + *len; returns 0, or -1 if it does not fit
static inline int metrics_put_int_(char *buf, size_t cap, size_t *len, const char *key, long long v, int first) {
    const int n = snprintf(buf + *len, cap - *len, "%s\"%s\": %lld", first ? "" : ", ", key, v);
    if (n < 0 || (size_t)n >= cap - *len) return -1;
    *len += (size_t)n;
    return 0;
}

// A training step's line (with its '\n') into buf; returns its length, or -1 if cap is too small.
static inline int metrics_format_train(char *buf, size_t cap, const TrainMetrics *m) {
    size_t len = 0;
    if (cap < 2) return -1;
    buf[len++] = '{';
    buf[len] = '\0';
    if (metrics_put_int_(buf, cap, &len, "step", m->step, 1) || metrics_put_int_(buf, cap, &len, "tokens", m->tokens, 0) ||
        metrics_put_(buf, cap, &len, "loss", m->loss, 0) || metrics_put_(buf, cap, &len, "lr", m->lr, 0) ||
        metrics_put_(buf, cap, &len, "norm", m->norm, 0) || metrics_put_(buf, cap, &len, "ms", m->ms, 0) ||
        metrics_put_(buf, cap, &len, "tok_per_s", m->tok_per_s, 0) ||
        metrics_put_(buf, cap, &len, "mfu", m->mfu >= 0 ? m->mfu : NAN, 0) ||
        metrics_put_(buf, cap, &len, "mem_mib", m->mem_mib >= 0 ? m->mem_mib : NAN, 0) || len + 3 > cap)
        return -1;
    memcpy(buf + len, "}\n", 3);
    return (int)(len + 2);
}

// A validation's line (with its '\n') into buf; returns its length, or -1 if cap is too small.
static inline int metrics_format_val(char *buf, size_t cap, int step, long long tokens, double val_loss) {
    size_t len = 0;
    if (cap < 2) return -1;
    buf[len++] = '{';
    buf[len] = '\0';
    if (metrics_put_int_(buf, cap, &len, "step", step, 1) || metrics_put_int_(buf, cap, &len, "tokens", tokens, 0) ||
        metrics_put_(buf, cap, &len, "val_loss", val_loss, 0) || len + 3 > cap)
        return -1;
    memcpy(buf + len, "}\n", 3);
    return (int)(len + 2);
}

// dir/main.jsonl for writing ("a": a resumed run continues the file, as main.log)
static inline FILE *metrics_log_open(const char *dir, int append) {
    char path[4096];
    const int n = snprintf(path, sizeof(path), "%s/" METRICS_LOG_NAME, dir);
    if (n < 0 || (size_t)n >= sizeof(path)) {
        fprintf(stderr, "Error: the output directory's path is too long for %s: %s\n", METRICS_LOG_NAME, dir);
        exit(1);
    }
    return fopen_check(path, append ? "a" : "w");
}

static inline void metrics_write_line_(FILE *f, const char *line, int len) {
    if (len < 0) {
        fprintf(stderr, "Error: a %s line does not fit its %d-byte buffer\n", METRICS_LOG_NAME, METRICS_LINE_MAX);
        exit(1);
    }
    fwrite_check(line, 1, (size_t)len, f);
    fflush_check(f);
}

static inline void metrics_log_train(FILE *f, const TrainMetrics *m) {
    char line[METRICS_LINE_MAX];
    metrics_write_line_(f, line, metrics_format_train(line, sizeof(line), m));
}

static inline void metrics_log_val(FILE *f, int step, long long tokens, double val_loss) {
    char line[METRICS_LINE_MAX];
    metrics_write_line_(f, line, metrics_format_val(line, sizeof(line), step, tokens, val_loss));
}

#endif // LLMC_METRICS_LOG_H
