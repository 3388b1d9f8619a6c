/*
driver.c - the built-in mutation loop, for a machine without clang's libFuzzer: linked with a
fuzz_<reader>.c (gcc -fsanitize=address,undefined), it runs every file of the regression
directory, then for the given seconds mutates the corpus files (bit flips, byte sets, interesting
integers, truncations, extensions, splices of two inputs, chunk copies) and calls the same
LLVMFuzzerTestOneInput. A sanitizer report or abort ends the process (the input is saved first
as crash-<n> in the artifact directory); a run longer than -timeout seconds is killed by alarm().

    driver -seconds=N -timeout=S -artifact_prefix=DIR/ corpus_dir... [-regressions=DIR]
The last line is "executions: N".
*/
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE
#endif
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);

typedef struct {
    uint8_t *data;
    size_t size;
} Input;

static Input *inputs;
static size_t num_inputs, cap_inputs;
static const char *artifact_prefix = "./";
static unsigned long long executions;
static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void add_input(uint8_t *data, size_t size) {
    if (num_inputs == cap_inputs) {
        cap_inputs = cap_inputs ? 2 * cap_inputs : 64;
        inputs = (Input *)realloc(inputs, cap_inputs * sizeof(Input));
    }
    inputs[num_inputs].data = data;
    inputs[num_inputs].size = size;
    num_inputs++;
}

static uint8_t *read_all(const char *path, size_t *size) {
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *buf = (uint8_t *)malloc(n > 0 ? (size_t)n : 1);
    *size = n > 0 && fread(buf, 1, (size_t)n, fp) == (size_t)n ? (size_t)n : 0;
    fclose(fp);
    return buf;
}

// the current input, saved when the target dies
static const uint8_t *cur_data;
static size_t cur_size;

static void save_current(const char *why) {
    char path[4096];
    snprintf(path, sizeof(path), "%s%s-%llu", artifact_prefix, why, executions);
    FILE *fp = fopen(path, "wb");
    if (fp != NULL) {
        if (cur_size > 0) fwrite(cur_data, 1, cur_size, fp);
        fclose(fp);
        fprintf(stderr, "driver: the input is saved as %s\n", path);
    }
}

static void on_abort(int sig) {
    (void)sig;
    save_current("crash");
    fprintf(stderr, "driver: a finding after %llu executions\nexecutions: %llu\n", executions, executions);
    signal(SIGABRT, SIG_DFL);
    abort();
}

static void on_alarm(int sig) {
    (void)sig;
    save_current("timeout");
    fprintf(stderr, "driver: a run took longer than the timeout\nexecutions: %llu\n", executions);
    _exit(77);
}

static unsigned timeout_s = 2;

static void run_one(const uint8_t *data, size_t size) {
    uint8_t *copy = (uint8_t *)malloc(size ? size : 1);  // exactly size bytes: ASan sees overreads
    memcpy(copy, data, size);
    cur_data = copy;
    cur_size = size;
    alarm(timeout_s);
    LLVMFuzzerTestOneInput(copy, size);
    alarm(0);
    executions++;
    free(copy);
}

static void load_dir(const char *dir, int run_each) {
    DIR *d = opendir(dir);
    if (d == NULL) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        size_t size = 0;
        uint8_t *data = read_all(path, &size);
        if (data == NULL) continue;
        if (run_each) {
            fprintf(stderr, "driver: replaying %s\n", path);
            run_one(data, size);
        }
        add_input(data, size);
    }
    closedir(d);
}

static size_t mutate(uint8_t **buf, size_t size, size_t max_len) {
    uint8_t *b = *buf;
    static const int64_t interesting[] = {0, 1, -1, 2, 7, 8, 16, 127, 128, 255, 256, 1024, 32767, 65535, 0x7fffffff,
                                          -0x7fffffff - 1, 0x80000000ll, 0x100000000ll, 0x7fffffffffffffffll};
    int n = 1 + (int)(next_rand() % 4);
    for (int k = 0; k < n; k++) {
        switch (next_rand() % 8) {
        case 0:  // bit flip
            if (size) b[next_rand() % size] ^= (uint8_t)(1u << (next_rand() % 8));
            break;
        case 1:  // byte set
            if (size) b[next_rand() % size] = (uint8_t)next_rand();
            break;
        case 2:  // interesting integer (4 or 8 bytes), often at a header word
            if (size >= 8) {
                size_t at = next_rand() % 2 ? 4 * (next_rand() % 16) : next_rand() % (size - 7);
                if (at + 8 > size) at = size - 8;
                int64_t v = interesting[next_rand() % (sizeof(interesting) / sizeof(interesting[0]))];
                memcpy(b + at, &v, next_rand() % 2 ? 4 : 8);
            }
            break;
        case 3:  // truncation
            if (size) size = next_rand() % size;
            break;
        case 4: {  // extension with random bytes
            size_t add = 1 + next_rand() % 64;
            if (size + add > max_len) break;
            b = (uint8_t *)realloc(b, size + add);
            for (size_t i = 0; i < add; i++) b[size + i] = (uint8_t)next_rand();
            size += add;
            break;
        }
        case 5: {  // splice: our prefix, another input's suffix
            const Input *o = &inputs[next_rand() % num_inputs];
            size_t cut = size ? next_rand() % (size + 1) : 0, from = o->size ? next_rand() % o->size : 0;
            size_t add = o->size - from;
            if (cut + add > max_len) add = max_len > cut ? max_len - cut : 0;
            b = (uint8_t *)realloc(b, cut + add + 1);
            memcpy(b + cut, o->data + from, add);
            size = cut + add;
            break;
        }
        case 6:  // copy a chunk within
            if (size >= 2) {
                size_t len = 1 + next_rand() % (size / 2), from = next_rand() % (size - len + 1),
                       to = next_rand() % (size - len + 1);
                memmove(b + to, b + from, len);
            }
            break;
        default:  // ASCII digit or JSON-ish byte
            if (size) {
                static const char chars[] = "0123456789-+.eE\"{}[]:,\\ntruefalsenull ";
                b[next_rand() % size] = (uint8_t)chars[next_rand() % (sizeof(chars) - 1)];
            }
            break;
        }
    }
    *buf = b;
    return size;
}

int main(int argc, char **argv) {
    double seconds = 10;
    size_t max_len = 1 << 20;
    const char *regressions = NULL;
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "-seconds=", 9) == 0) seconds = atof(argv[i] + 9);
        else if (strncmp(argv[i], "-timeout=", 9) == 0) timeout_s = (unsigned)atoi(argv[i] + 9);
        else if (strncmp(argv[i], "-artifact_prefix=", 17) == 0) artifact_prefix = argv[i] + 17;
        else if (strncmp(argv[i], "-regressions=", 13) == 0) regressions = argv[i] + 13;
        else if (strncmp(argv[i], "-seed=", 6) == 0) rng = strtoull(argv[i] + 6, NULL, 0) | 1;
        else if (argv[i][0] == '-') continue;
    }
    signal(SIGABRT, on_abort);
    signal(SIGALRM, on_alarm);
    if (regressions != NULL) load_dir(regressions, 1);
    for (int i = 1; i < argc; i++)
        if (argv[i][0] != '-') load_dir(argv[i], 1);
    if (num_inputs == 0) add_input((uint8_t *)calloc(1, 1), 0);
    const time_t end = time(NULL) + (time_t)seconds;
    while (time(NULL) < end) {
        for (int k = 0; k < 64; k++) {
            const Input *in = &inputs[next_rand() % num_inputs];
            uint8_t *b = (uint8_t *)malloc(in->size ? in->size : 1);
            memcpy(b, in->data, in->size);
            size_t n = mutate(&b, in->size, max_len);
            run_one(b, n);
            free(b);
        }
    }
    printf("executions: %llu\n", executions);
    return 0;
}
