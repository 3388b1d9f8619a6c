/*
test_train_host.c - CPU tests of the trainer's host logic: train_config.h (strict flags, their
checks against each other, the processes and the model), gpt2.h (the parameter table's named
pointers, descriptors, initialisation, config comparison), schedulers.h, sampler.h, mfu.h,
and checkpoint.h's protocol: a crash injected after every stage of a checkpoint write, stale
DONE_ markers of an older run, a state without master weights (llm.c -w 0), a checkpoint of
another model. Then ./train_gpt itself (given as the first argument) with a table of bad
command lines: each must exit non-zero with its own message before touching a GPU, so the
table runs on a machine without one.

    build/test_train_host [./train_gpt]     (from the repository root: it reads data/)
The last line is "N passed, M failed". Temporary files go to /tmp/test_train_host_XXXXXX.
*/
#define _POSIX_C_SOURCE 200809L
#include "../llmc/checkpoint.h"
#include "../llmc/dataloader.h"
#include "../llmc/gpt2.h"
#include "../llmc/mfu.h"
#include "../llmc/multi_gpu.h"
#include "../llmc/sampler.h"
#include "../llmc/schedulers.h"
#include "../llmc/train_config.h"
#include "../llmc/utils.h"
#include "test_util.h"

#include <sys/wait.h>

static char tmp_dir[64];

static void tmp_path(char *buf, size_t len, const char *name) { snprintf(buf, len, "%s/%s", tmp_dir, name); }

static int contains(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

static int file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

// Splits a command line on spaces into argv (argv[0] = "train_gpt"); the strings live in buf.
static int split_args(const char *line, char *buf, size_t len, char **argv, int max) {
    int argc = 0;
    argv[argc++] = (char *)"train_gpt";
    snprintf(buf, len, "%s", line);
    for (char *tok = strtok(buf, " "); tok != NULL && argc < max; tok = strtok(NULL, " ")) argv[argc++] = tok;
    return argc;
}

// train_config_parse + train_config_check as main() calls them; 0, or -1 with err
static int parse_and_check(const char *line, int nproc, TrainConfig *c, char *err, size_t err_len) {
    char buf[8192], *argv[64];
    const int argc = split_args(line, buf, sizeof(buf), argv, 64);
    const int rc = train_config_parse(c, argc, argv, err, err_len);
    if (rc != 0) return rc > 0 ? 1 : -1;
    return train_config_check(c, nproc, err, err_len);
}

// ----------------------------------------------------------------------------
// the bad command lines: each with the message it must give. Used twice: through the
// parser (rows that need no files) and through ./train_gpt (every row).

typedef struct {
    const char *args;
    const char *message;
    int needs_files;  // 1: only ./train_gpt sees it (the model, the data, a checkpoint)
} BadLine;

static const BadLine bad_lines[] = {
    // strict numbers: the whole string, in range, finite (defect 6)
    {"-x 1e4", "-x 1e4: not an integer", 0},
    {"-x abc", "-x abc: not an integer", 0},
    {"-x 10abc", "-x 10abc: not an integer", 0},
    {"-b 99999999999", "-b 99999999999: out of range [1, 1048576]", 0},
    {"-t 0", "-t 0: out of range [1, 16777216]", 0},
    {"-l nan", "-l nan: not a finite float", 0},
    {"-l inf", "-l inf: not a finite float", 0},
    {"-l 1e39", "-l 1e39: not a finite float", 0},
    {"-l -0.1", "-l -0.1: out of range", 0},
    {"-l 3e-4x", "-l 3e-4x: not a number", 0},
    {"-q nan", "-q nan: not a finite float", 0},
    {"-q 1.5", "-q 1.5: out of range [0, 1]", 0},
    {"-c nan", "-c nan: not a finite float", 0},
    {"-y 2", "-y 2: out of range [0, 1]", 0},
    {"-fl 2", "-fl 2: out of range [0, 1]", 0},
    {"-fa -1", "-fa -1: out of range [0, 1]", 0},
    {"-f 0", "-f 0: out of range [1, 1048576]", 0},
    {"-m -2", "-m -2: out of range [-1, 2147483647]", 0},
    {"-k cosin", "-k cosin: unknown schedule", 0},
    {"-z 1", "unknown flag -z", 0},
    {"-x", "flag -x needs a value", 0},
    {"stray", "unexpected argument 'stray'", 0},
    // the batch: no zero, no wrap-around, no silent default (defect 4)
    {"-d 0", "-d 0: the total batch must be >= 1", 0},
    {"-d 0 -x 2", "-d 0: the total batch must be >= 1", 0},
    {"-d -2", "-d -2: out of range [-1, 2147483647]", 0},
    {"-b 4194304", "-b 4194304: out of range [1, 1048576]", 0},
    {"-b 1048576 -t 1024", "-b 1048576 -t 1024: 1073741824 tokens per micro-batch", 0},
    {"-d 5000", "-d 5000: the total batch must be a multiple of B*T*processes = 4096", 0},
    {"-x 0", "-x 0: the number of steps must be >= 1", 0},
    // -V: range (defect 10) and only for a fresh model
    {"-V 2147483521", "-V 2147483521: out of range [0, 2147483520]", 0},
    {"-V -1", "-V -1: out of range", 0},
    {"-V 50300 -e test/fixtures/gpt2_debug.bin", "-V 50300 sets the vocabulary of a fresh model", 0},
    // flags that need others
    {"-y 1", "-y 1 resumes from the checkpoints in -o <dir>, and no -o is given", 0},
    {"-n 10", "-n 10 writes checkpoints into -o <dir>, and no -o is given", 0},
    {"-w 0", "-w 0: this trainer always keeps fp32 master weights", 0},
    // a path that starts like a descriptor is a path (defect 1)
    {"-e d12/model_00005000.bin", "cannot open model file 'd12/model_00005000.bin'", 1},
    {"-e d7", "unknown depth descriptor 'd7'", 1},
    {"-e d12 -t 2048", "-t 2048 exceeds the model's max_seq_len 1024", 1},
    // token ids against the vocabulary (defect 5), a directory as data (defect 10)
    {"-e d6 -V 1000", "token 5 has id 50256, outside the model's vocabulary of 1000 tokens", 1},
    {"-e d6 -i data", "cannot open shard 'data': Is a directory", 1},
    {"-e d6 -j data/no_such_*.bin", "no files match 'data/no_such_*.bin'", 1},
};

static void test_bad_lines_parsed(void) {
    printf("-- train_config.h: the bad command lines, parsed\n");
    for (size_t k = 0; k < sizeof(bad_lines) / sizeof(bad_lines[0]); k++) {
        if (bad_lines[k].needs_files) continue;
        TrainConfig c;
        char err[1024] = "";
        const int rc = parse_and_check(bad_lines[k].args, 1, &c, err, sizeof(err));
        test_check(rc < 0 && contains(err, bad_lines[k].message), "'%s': %s", bad_lines[k].args, err);
    }
}

static void test_train_config(void) {
    printf("-- train_config.h\n");
    TrainConfig c;
    char err[1024] = "";
    int rc = parse_and_check("", 1, &c, err, sizeof(err));
    test_check(rc == 0 && c.B == 4 && c.T == 1024 && c.total_batch == 4096 && c.grad_accum == 1 &&
               c.max_steps == -1 && c.lr == 3e-4f && c.schedule == LR_COSINE && strcmp(c.model, "d12") == 0 &&
               c.out_dir == NULL && c.sample_every == 20 && c.flce_mib == 1024,
               "defaults: llm.c's (B 4, T 1024, total batch B*T, one epoch, lr 3e-4, cosine, d12)%s", err);
    rc = parse_and_check("-b 8 -t 256 -d 8192 -x 50 -k wsd -l 1e-3 -q 0.1 -c 0.1 -u 5 -o out -y 1 -n 10 -fl 1 "
                         "-fa 1 -f 160 -V 151936 -e d24 -m -1", 2, &c, err, sizeof(err));
    test_check(rc == 0 && c.B == 8 && c.T == 256 && c.total_batch == 8192 && c.grad_accum == 2 && c.max_steps == 50 &&
               c.schedule == LR_WSD && c.lr == 1e-3f && c.final_frac == 0.1f && c.weight_decay == 0.1f &&
               c.warmup == 5 && strcmp(c.out_dir, "out") == 0 && c.resume == 1 && c.ckpt_every == 10 &&
               c.flce_fp32_logits == 1 && c.flce_autotune == 1 && c.flce_mib == 160 && c.vocab == 151936 &&
               c.val_max == -1,
               "every flag parsed; -d 8192 over B*T = 2048 on 2 processes: 2 accumulation steps%s", err);
    rc = parse_and_check("-b 4 -t 64", 3, &c, err, sizeof(err));
    test_check(rc == 0 && c.total_batch == 768, "-d -1: B*T*processes (3 processes: 768)");
    rc = parse_and_check("-b 1024 -t 1024", 4096, &c, err, sizeof(err));
    test_check(rc < 0 && contains(err, "4096 processes: 4294967296 tokens per micro-step"),
               "B*T*processes >= 2^32 is an error, not a wrap to 0: %s", err);
    test_check(parse_and_check("-x 5 -h", 1, &c, err, sizeof(err)) == 1, "-h anywhere asks for the usage");

    // against the model
    GPT2Config d12, odd = {64, 397, 448, 2, 4, 72};
    gpt2_config_from_descriptor("d12", 0, &d12, err, sizeof(err));
    parse_and_check("-t 1024", 1, &c, err, sizeof(err));
    test_check(train_config_check_model(&c, &d12, err, sizeof(err)) == 0, "d12 at T = 1024 passes");
    parse_and_check("-t 64", 1, &c, err, sizeof(err));
    test_check(train_config_check_model(&c, &odd, err, sizeof(err)) != 0 && contains(err, "head size of 16, 32, 64 or 128"),
               "a model whose head size (72 / 4 = 18) the kernels lack: %s", err);

    // steps: -x -1 is one epoch; a checkpoint at or past -x is an error, not a silent exit 0
    parse_and_check("-b 4 -t 64", 1, &c, err, sizeof(err));
    rc = train_config_steps(&c, 305260, 0, err, sizeof(err));
    test_check(rc == 0 && c.max_steps == 305260 / 256, "-x -1: one epoch of 305260 tokens is %d steps of 256",
               c.max_steps);
    parse_and_check("-b 4 -t 64 -x 10", 1, &c, err, sizeof(err));
    test_check(train_config_steps(&c, 305260, 20, err, sizeof(err)) != 0 && contains(err, "nothing left to train"),
               "resuming at step 20 with -x 10: %s", err);
    test_check(train_config_steps(&c, 305260, 10, err, sizeof(err)) != 0, "resuming at step 10 with -x 10: error too");
    test_check(train_config_steps(&c, 305260, 9, err, sizeof(err)) == 0, "resuming at step 9 with -x 10: one step left");
    parse_and_check("-b 4 -t 64", 1, &c, err, sizeof(err));
    test_check(train_config_steps(&c, 200, 0, err, sizeof(err)) != 0 && contains(err, "less than one step"),
               "an epoch shorter than one step: %s", err);

    // the usage text comes from the same table as the parser
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    train_usage(mem);
    fclose(mem);
    int all = 1;
    for (int k = 0; k < TRAIN_NUM_FLAGS; k++) {
        char line[16];
        snprintf(line, sizeof(line), "\n  %s <", train_flags[k].flag);
        all = all && contains(buf, line);
    }
    test_check(all && contains(buf, "  -b <int>    micro-batch size B (default 4)") &&
               contains(buf, "  -fl <int>   flce's logits"), "usage lists every flag of the table, aligned");
    free(buf);
}

// ----------------------------------------------------------------------------
// gpt2.h

static GPT2Config small_config(void) {
    GPT2Config c = {8, 10, 16, 2, 2, 4};  // maxT, V, Vp, L, NH, C
    return c;
}

static void test_gpt2(void) {
    printf("-- gpt2.h\n");
    char err[1024] = "";
    GPT2Config c = small_config();
    ParameterTensor t[NUM_PARAMETER_TENSORS];
    gpt2_parameter_tensors(&c, t);
    const size_t n = gpt2_num_parameters(&c);
    float *buf = (float *)malloc(n * sizeof(float));
    GPT2FloatTensors p;
    gpt2_point_floats(&p, buf, t);
    const size_t C = 4, L = 2;
    test_check(NUM_PARAMETER_TENSORS == 16 && p.wte == buf && p.wpe == buf + 16 * C && p.ln1w == p.wpe + 8 * C &&
               p.qkvw == p.ln1b + L * C && p.qkvb == p.qkvw + L * 3 * C * C && p.fcprojw == p.fcb + L * 4 * C &&
               p.lnfb == buf + n - C && p.lnfw == p.lnfb - C,
               "named pointers: each tensor where the table puts it (wte at 0, qkvw after ln1b, lnfb last)");
    test_check(gpt2_is_descriptor("d12") && gpt2_is_descriptor("d6") && !gpt2_is_descriptor("d12/model.bin") &&
               !gpt2_is_descriptor("d") && !gpt2_is_descriptor("d12x") && !gpt2_is_descriptor("model.bin"),
               "descriptors: the whole string d<digits>, so d12/model.bin is a path");
    GPT2Config d;
    test_check(gpt2_config_from_descriptor("d12", 0, &d, err, sizeof(err)) == 0 && d.vocab_size == 50257 &&
               d.padded_vocab_size == 50304 && d.channels == 768 && gpt2_num_parameters(&d) == 124475904,
               "d12: GPT-2 124M, V 50257 padded to 50304");
    const int rc = gpt2_config_from_descriptor("d6", GPT2_MAX_VOCAB, &d, err, sizeof(err));
    test_check(rc == 0 && d.padded_vocab_size == GPT2_MAX_VOCAB, "the largest vocabulary pads without overflow (%d)",
               d.padded_vocab_size);
    test_check(gpt2_config_from_descriptor("d7", 0, &d, err, sizeof(err)) != 0 && contains(err, "'d7'") &&
               gpt2_config_from_descriptor("d99999999999", 0, &d, err, sizeof(err)) != 0,
               "unknown depths are errors: %s", err);
    GPT2Config a = small_config(), b = small_config();
    b.vocab_size = 12;
    b.num_heads = 1;
    test_check(gpt2_config_compare(&a, &a, err, sizeof(err)) == 0 &&
               gpt2_config_compare(&a, &b, err, sizeof(err)) != 0 &&
               strcmp(err, "vocab_size 10 vs 12, num_heads 2 vs 1") == 0 && gpt2_num_parameters(&a) == gpt2_num_parameters(&b),
               "config comparison names every differing field, even at the same parameter count: %s", err);
    // PyTorch's init: deterministic, ones and zeros where GPT-2 has them
    float *again = (float *)malloc(n * sizeof(float));
    gpt2_init_random(&c, buf);
    gpt2_init_random(&c, again);
    int ok = memcmp(buf, again, n * sizeof(float)) == 0;
    for (size_t i = 10 * C; i < 16 * C; i++) ok = ok && p.wte[i] == 0.0f;  // padding rows
    for (size_t i = 0; i < L * C; i++) ok = ok && p.ln1w[i] == 1.0f && p.ln2w[i] == 1.0f && p.ln1b[i] == 0.0f;
    for (size_t i = 0; i < C; i++) ok = ok && p.lnfw[i] == 1.0f && p.lnfb[i] == 0.0f && p.attprojb[i] == 0.0f;
    ok = ok && p.wte[0] != 0.0f && fabsf(p.wte[0]) < 0.2f && p.qkvw[0] != 0.0f;
    test_check(ok, "init: the same bits twice; wte padding rows 0, layernorm weights 1, biases 0");
    free(again);
    free(buf);
}

// ----------------------------------------------------------------------------
// schedulers.h, sampler.h, mfu.h

static void test_schedules_sampler_mfu(void) {
    printf("-- schedulers.h, sampler.h, mfu.h\n");
    LRSchedule k;
    test_check(lr_schedule_parse("cosine", &k) == 0 && k == LR_COSINE && lr_schedule_parse("wsd", &k) == 0 &&
               k == LR_WSD && lr_schedule_parse("Cosine", &k) != 0 && strcmp(lr_schedule_names[LR_LINEAR], "linear") == 0,
               "schedule names: cosine linear constant wsd, exact");
    const float lr = 1.0f;
    test_check(learning_rate(LR_COSINE, 0, 100, 10, lr, 0.1f) == 0.1f && learning_rate(LR_COSINE, 9, 100, 10, lr, 0.1f) == 1.0f &&
               learning_rate(LR_COSINE, 10, 100, 10, lr, 0.1f) == 1.0f &&
               fabsf(learning_rate(LR_COSINE, 55, 100, 10, lr, 0.1f) - 0.55f) < 1e-6f &&
               fabsf(learning_rate(LR_LINEAR, 55, 100, 10, lr, 0.0f) - 0.5f) < 1e-6f &&
               learning_rate(LR_CONSTANT, 99, 100, 10, lr, 0.0f) == 1.0f && learning_rate(LR_WSD, 79, 100, 0, lr, 0.0f) == 1.0f &&
               fabsf(learning_rate(LR_WSD, 85, 100, 0, lr, 0.0f) - (1.0f - sqrtf(0.25f))) < 1e-6f &&
               learning_rate(LR_COSINE, 3, 2, 5, lr, 0.0f) == 4.0f / 5.0f,
               "warm-up, cosine midpoint, linear, constant, wsd's stable phase and sqrt decay");
    uint64_t st = 1337;
    int in_range = 1;
    for (int i = 0; i < 100000; i++) {
        const float f = random_f32(&st);
        in_range = in_range && f >= 0.0f && f < 1.0f;
    }
    const float logits[4] = {0.0f, 50.0f, 0.0f, -1e30f};
    test_check(in_range && sample_softmax(logits, 4, 0.5f) == 1 && sample_softmax(logits, 3, 0.999999f) == 1 &&
               sample_softmax(logits, 1, 0.9f) == 0,
               "coins in [0, 1); a peaked softmax samples its peak; only the first n logits count");
    test_check(sampler_start_token(50256, 50257) == 50256 && sampler_start_token(50256, 1000) == -1 &&
               sampler_start_token(-1, 10) == -1,
               "samples start from EOT only when the model has it (-V 1000: no start token)");
    const GpuPeak *h200 = mfu_gpu_peak("NVIDIA H200"), *pcie = mfu_gpu_peak("NVIDIA H100 PCIe"),
                  *sxm = mfu_gpu_peak("NVIDIA H100 80GB HBM3"), *none = mfu_gpu_peak("NVIDIA GeForce GTX 1080");
    test_check(h200 && h200->bf16_flops == 989e12 && pcie && pcie->bf16_flops == 756e12 && sxm &&
               sxm->bf16_flops == 989e12 && none == NULL,
               "MFU peaks by device name: H200 989, H100 PCIe 756 (not the SXM row), unknown GPU: none");
    test_check(mfu_flops_per_token(124475904, 12, 1024, 768) == 6.0 * 124475904 + 12.0 * 12 * 1024 * 768 &&
               fabs(mfu_percent(1e9, 989e3, h200, 1) - 100.0) < 1e-9,
               "flops per token 6N + 12 L T C; MFU in percent of the peak");
}

// ----------------------------------------------------------------------------
// checkpoint.h: the protocol

// Fills a checkpoint's buffers with one value that names the write (generation and step), so
// that a load can tell whether its model and state files come from the same write; small
// integers, exact in bf16.
static float mark(int gen, int step) { return (float)(gen * 16 + step / 10); }

typedef struct {
    GPT2Config config;
    size_t n;
    uint16_t *params;
    TrainingState st;
} TestCkpt;

static void ckpt_make(TestCkpt *k, const GPT2Config *config, int gen, int step, int use_master, const DataLoader *loader) {
    memset(k, 0, sizeof(*k));
    k->config = *config;
    k->n = gpt2_num_parameters(config);
    k->params = (uint16_t *)malloc(k->n * sizeof(uint16_t));
    for (size_t i = 0; i < k->n; i++) k->params[i] = bf16_from_float(mark(gen, step));
    k->st.num_processes = 1;
    k->st.step = step;
    k->st.use_master_weights = use_master;
    k->st.num_parameters = k->n;
    k->st.m = (float *)malloc(k->n * sizeof(float));
    k->st.v = (float *)malloc(k->n * sizeof(float));
    if (use_master) k->st.master_weights = (float *)malloc(k->n * sizeof(float));
    for (size_t i = 0; i < k->n; i++) {
        k->st.m[i] = k->st.v[i] = mark(gen, step);
        if (use_master) k->st.master_weights[i] = mark(gen, step) + 0.25f;
    }
    if (loader != NULL) dataloader_get_state(loader, &k->st.loader);
}

// Writes k into dir, stopping after stage stop (0: the whole write). The write's return code.
static int ckpt_write(const TestCkpt *k, const char *dir, int stop) {
    char err[1024];
    CheckpointWrite w;
    memset(&w, 0, sizeof(w));
    w.dir = dir;
    w.config = &k->config;
    w.params = k->params;
    w.state = &k->st;
    w.stop_after = stop;
    const int rc = checkpoint_write_checked(&w, err, sizeof(err));
    if (rc < 0) printf("      write failed: %s\n", err);
    return rc;
}

static void ckpt_free(TestCkpt *k) {
    free(k->params);
    state_free(&k->st);
}

// Loads the latest checkpoint of dir: its step (-1: none, -2: an error) and the write it
// belongs to (-1 when its model and state files come from different writes).
static int ckpt_load(const char *dir, const GPT2Config *config, int *gen, char *err, size_t err_len) {
    Checkpoint ck;
    const int rc = checkpoint_load_checked(dir, config, 0, 1, NULL, &ck, err, err_len);
    if (rc <= 0) return rc == 0 ? -1 : -2;
    const float p = float_from_bf16(ck.params[0]), m = ck.state.m[0];
    *gen = p == m ? (int)p / 16 : -1;
    const int step = ck.step;
    checkpoint_free(&ck);
    return step;
}

static void make_dir(char *dir, size_t len, const char *name) {
    tmp_path(dir, len, name);
    mkdir(dir, 0755);
}

static void clear_dir(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[CHECKPOINT_PATH_MAX];
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        remove(p);
    }
    if (d != NULL) closedir(d);
    rmdir(dir);
}

static void test_checkpoint_protocol(void) {
    printf("-- checkpoint.h: the write protocol, stale directories, resume\n");
    char err[1024] = "", dir[256], path[CHECKPOINT_PATH_MAX];
    const GPT2Config c = small_config();
    TestCkpt a10, a20, b20, b30;
    ckpt_make(&a10, &c, 1, 10, 1, NULL);
    ckpt_make(&a20, &c, 1, 20, 1, NULL);
    ckpt_make(&b20, &c, 2, 20, 1, NULL);
    ckpt_make(&b30, &c, 2, 30, 1, NULL);

    // a crash after every stage of rewriting step 20 (a resumed run passing it again), and of
    // writing a new step 30: resume takes a checkpoint whose files come from one write
    const char *stage_names[] = {"complete", "marker removed", "model written", "state written", "marker written"};
    for (int stop = 0; stop <= CHECKPOINT_MARKED; stop++) {
        make_dir(dir, sizeof(dir), "crash");
        ckpt_write(&a10, dir, 0);
        ckpt_write(&a20, dir, 0);
        const int rc = ckpt_write(&b20, dir, stop);
        int gen = 0;
        const int step = ckpt_load(dir, &c, &gen, err, sizeof(err));
        const int complete = stop == 0 || stop == CHECKPOINT_MARKED;
        test_check(rc == (stop ? 1 : 0) && (complete ? step == 20 && gen == 2 : step == 10 && gen == 1),
                   "rewriting step 20, stopped after '%s': resume takes step %d of write %d (a mixed pair is write -1)",
                   stage_names[stop], step, gen);
        ckpt_write(&b30, dir, stop);
        const int step30 = ckpt_load(dir, &c, &gen, err, sizeof(err));
        test_check(complete ? step30 == 30 && gen == 2 : step30 == 10 && gen == 1,
                   "then a new step 30, stopped after '%s': resume takes step %d of write %d", stage_names[stop], step30,
                   gen);
        clear_dir(dir);
    }

    // a leftover temporary from a write that died mid-file is ignored, then cleared
    make_dir(dir, sizeof(dir), "tmpfiles");
    ckpt_write(&a10, dir, 0);
    const char *junk[] = {"model_00000020.bin.tmp", "state_00000020_00000.bin.tmp", "DONE_00000020.tmp", "notes.tmp"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, junk[i]);
        atomic_write_file(path, "x", 1, 0, err, sizeof(err));
    }
    int gen = 0;
    int step = ckpt_load(dir, &c, &gen, err, sizeof(err));
    const int removed = checkpoint_clear_stale(dir, 10, err, sizeof(err));
    int tmp_gone = 1;
    for (size_t i = 0; i < 3; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, junk[i]);
        tmp_gone = tmp_gone && !file_exists(path);
    }
    snprintf(path, sizeof(path), "%s/notes.tmp", dir);
    test_check(step == 10 && removed == 0 && tmp_gone && file_exists(path),
               "left-over .tmp files of a checkpoint write: ignored by resume, removed at start (others kept)");
    clear_dir(dir);

    // a fresh run into a directory holding an older run's complete checkpoints (defect 2)
    make_dir(dir, sizeof(dir), "stale");
    ckpt_write(&a10, dir, 0);
    ckpt_write(&a20, dir, 0);
    const int cleared = checkpoint_clear_stale(dir, -1, err, sizeof(err));
    step = ckpt_load(dir, &c, &gen, err, sizeof(err));
    checkpoint_model_path(path, sizeof(path), dir, 20);
    test_check(cleared == 2 && step == -1 && file_exists(path),
               "a fresh run clears the older run's 2 DONE_ markers: nothing to resume (its files stay)");
    TestCkpt b10;  // the new run's first checkpoint
    ckpt_make(&b10, &c, 2, 10, 1, NULL);
    ckpt_write(&b10, dir, 0);
    step = ckpt_load(dir, &c, &gen, err, sizeof(err));
    test_check(step == 10 && gen == 2, "after the new run's step 10, -y 1 resumes it (step %d of write %d), not the "
               "older run's step 20", step, gen);
    // a resumed run clears the markers after its start: an incomplete newer step cannot
    // become complete later
    checkpoint_state_path(path, sizeof(path), dir, 30, 0);
    ckpt_write(&b30, dir, 0);
    remove(path);
    step = ckpt_load(dir, &c, &gen, err, sizeof(err));
    const int cleared_after = checkpoint_clear_stale(dir, step, err, sizeof(err));
    checkpoint_done_path(path, sizeof(path), dir, 30);
    test_check(step == 10 && cleared_after == 1 && !file_exists(path),
               "resumed at 10 past an incomplete step 30: the marker of 30 is removed");
    clear_dir(dir);
    ckpt_free(&b10);

    // a state written without master weights (llm.c -w 0): the master copy is the loaded model (defect 3)
    make_dir(dir, sizeof(dir), "nomaster");
    TestCkpt w0;
    ckpt_make(&w0, &c, 3, 40, 0, NULL);
    w0.params[5] = bf16_from_float(-1.5f);
    ckpt_write(&w0, dir, 0);
    Checkpoint ck;
    int rc = checkpoint_load_checked(dir, &c, 0, 1, NULL, &ck, err, sizeof(err));
    int same = rc == 1 && ck.master != NULL;
    for (size_t i = 0; same && i < ck.num_parameters; i++) same = ck.master[i] == float_from_bf16(w0.params[i]);
    test_check(same && ck.master[5] == -1.5f, "a state without master weights: the fp32 master copy is the loaded "
               "parameters widened, so AdamW continues from them%s", rc < 0 ? err : "");
    if (rc == 1) checkpoint_free(&ck);
    ckpt_write(&a10, dir, 0);
    rc = checkpoint_load_checked(dir, &c, 0, 1, NULL, &ck, err, sizeof(err));
    test_check(rc == 1 && ck.step == 40 && ck.master[0] == mark(3, 40), "(the latest step is still 40)");
    if (rc == 1) checkpoint_free(&ck);
    ckpt_write(&a20, dir, 0);
    clear_dir(dir);
    make_dir(dir, sizeof(dir), "master");
    ckpt_write(&a20, dir, 0);
    rc = checkpoint_load_checked(dir, &c, 0, 1, NULL, &ck, err, sizeof(err));
    test_check(rc == 1 && ck.master[0] == mark(1, 20) + 0.25f, "with master weights: the state file's");
    if (rc == 1) checkpoint_free(&ck);
    clear_dir(dir);
    ckpt_free(&w0);

    // a checkpoint of another model with the same parameter count (defect 10: -V 50300 vs 50257)
    make_dir(dir, sizeof(dir), "mismatch");
    ckpt_write(&a20, dir, 0);
    GPT2Config other = c;
    other.vocab_size = 12;
    rc = checkpoint_load_checked(dir, &other, 0, 1, NULL, &ck, err, sizeof(err));
    test_check(rc < 0 && contains(err, "another model") && contains(err, "vocab_size 10 vs 12") &&
               gpt2_num_parameters(&other) == gpt2_num_parameters(&c),
               "a checkpoint of V 10 for a run of V 12 (same parameter count): %s", err);
    other = c;
    other.max_seq_len = 16;
    rc = checkpoint_load_checked(dir, &other, 0, 1, NULL, &ck, err, sizeof(err));
    test_check(rc < 0 && contains(err, "max_seq_len 8 vs 16"), "maxT differs: %s", err);
    rc = checkpoint_load_checked(dir, &c, 0, 2, NULL, &ck, err, sizeof(err));
    test_check(rc == 0, "2 processes: rank 1's state is missing, so there is no complete checkpoint");
    clear_dir(dir);

    // a long -o: found up front, not after training (defect 7)
    char longdir[CHECKPOINT_PATH_MAX + 64];
    memset(longdir, 'a', sizeof(longdir) - 1);
    longdir[sizeof(longdir) - 1] = 0;
    longdir[CHECKPOINT_PATH_MAX - 20] = 0;
    test_check(checkpoint_dir_check(longdir, 1, err, sizeof(err)) != 0 && contains(err, "would not fit") &&
               checkpoint_dir_prepare(longdir, 1, err, sizeof(err)) != 0 && checkpoint_dir_check("out", 1, err, sizeof(err)) == 0,
               "an output directory whose checkpoint names do not fit: %.100s", err);
    TestCkpt big = a10;
    CheckpointWrite w;
    memset(&w, 0, sizeof(w));
    w.dir = longdir;
    w.config = &c;
    w.params = a10.params;
    w.state = &big.st;
    test_check(checkpoint_write_checked(&w, err, sizeof(err)) < 0 && contains(err, "would not fit"),
               "and the writer refuses it instead of truncating the names");
    // a file where the directory should be
    tmp_path(path, sizeof(path), "plainfile");
    atomic_write_file(path, "x", 1, 0, err, sizeof(err));
    test_check(checkpoint_dir_prepare(path, 1, err, sizeof(err)) != 0 && contains(err, "not a directory"),
               "an output directory that is a file: %s", err);
    remove(path);
    ckpt_free(&a10);
    ckpt_free(&a20);
    ckpt_free(&b20);
    ckpt_free(&b30);
}

// ----------------------------------------------------------------------------
// ./train_gpt with the bad command lines, and with checkpoints it must refuse to resume

// Runs the trainer with args from the repository root; its exit code, output in out.
static int run_trainer(const char *bin, const char *args, char *out, size_t out_len) {
    char cmd[16384], log[300];
    tmp_path(log, sizeof(log), "trainer.out");
    snprintf(cmd, sizeof(cmd), "%s %s > %s 2>&1", bin, args, log);
    const int status = system(cmd);
    out[0] = 0;
    FILE *fp = fopen(log, "rb");
    if (fp != NULL) {
        const size_t n = fread(out, 1, out_len - 1, fp);
        out[n] = 0;
        fclose(fp);
    }
    remove(log);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

static void expect_trainer_error(const char *bin, const char *args, const char *message) {
    char out[8192];
    const int rc = run_trainer(bin, args, out, sizeof(out));
    for (char *p = out; *p; p++)
        if (*p == '\n') *p = *(p + 1) ? '|' : 0;  // one line in the test log
    // no CUDA call may come first: on a machine without a GPU it would say "no CUDA device"
    test_check(rc == 1 && contains(out, message) && !contains(out, "CUDA"), "./train_gpt %.80s%s: exit %d, %.300s",
               args, strlen(args) > 80 ? "..." : "", rc, out);
}

static void test_trainer_binary(const char *bin) {
    printf("-- %s: bad command lines\n", bin);
    for (size_t k = 0; k < sizeof(bad_lines) / sizeof(bad_lines[0]); k++)
        expect_trainer_error(bin, bad_lines[k].args, bad_lines[k].message);
    char args[CHECKPOINT_PATH_MAX + 256], longdir[CHECKPOINT_PATH_MAX];
    memset(longdir, 'o', sizeof(longdir) - 1);
    longdir[CHECKPOINT_PATH_MAX - 20] = 0;
    snprintf(args, sizeof(args), "-e d6 -o %s", longdir);
    expect_trainer_error(bin, args, "checkpoint file names in it would not fit");

    // a small model, its data and a checkpoint at step 20 (C 16, 1 head of 16: sizes the kernels take)
    char err[1024], model[256], model63[256], shard[256], dir[256];
    GPT2Config c = {8, 64, 128, 1, 1, 16}, c63 = c;
    c63.vocab_size = 63;
    const size_t n = gpt2_num_parameters(&c);
    float *params = (float *)malloc(n * sizeof(float));
    gpt2_init_random(&c, params);
    tmp_path(model, sizeof(model), "small.bin");
    tmp_path(model63, sizeof(model63), "small63.bin");
    tmp_path(shard, sizeof(shard), "small_tokens.bin");
    make_dir(dir, sizeof(dir), "run");
    uint32_t ids[600];
    for (int i = 0; i < 600; i++) ids[i] = (uint32_t)(i * 7 % 63);
    DataLoader loader;
    int ok = model_write_checked(model, &c, MODEL_VERSION_FP32, params, 0, err, sizeof(err)) == 0 &&
             model_write_checked(model63, &c63, MODEL_VERSION_FP32, params, 0, err, sizeof(err)) == 0 &&
             shard_write_checked(shard, ids, 600, SHARD_VERSION, err, sizeof(err)) == 0 &&
             dataloader_init_checked(&loader, shard, 2, 8, 0, 1, 1, 0, err, sizeof(err)) == 0;
    free(params);
    if (!test_check(ok, "a small model, data and checkpoint for the resume lines%s%s", ok ? "" : ": ", ok ? "" : err)) return;
    for (int k = 0; k < 20; k++) dataloader_next_batch(&loader);
    TestCkpt ck;
    ckpt_make(&ck, &c, 1, 20, 1, &loader);
    ckpt_write(&ck, dir, 0);
    ckpt_free(&ck);
    dataloader_free(&loader);
    const char *common = "-b 2 -t 8 -v 0 -s 0 -y 1";
    snprintf(args, sizeof(args), "-e %s -i %s -j %s -o %s %s -x 10", model, shard, shard, dir, common);
    expect_trainer_error(bin, args, "the checkpoint resumed is at step 20 and the run ends at step 10 (-x)");
    snprintf(args, sizeof(args), "-e %s -i %s -j %s -o %s %s -x 30", model63, shard, shard, dir, common);
    expect_trainer_error(bin, args, "vocab_size 64 vs 63");
    snprintf(args, sizeof(args), "-e %s -i %s -j %s -o %s -b 2 -t 4 -s 0 -x 30", model, shard, shard, dir);
    char out[8192];
    run_trainer(bin, args, out, sizeof(out));  // a fresh run (it stops at the GPU, or trains on one)
    int gen = 0;
    test_check(ckpt_load(dir, &c, &gen, err, sizeof(err)) == -1,
               "a fresh run into that directory clears its DONE_ marker: -y 1 can no longer resume the older run");
    clear_dir(dir);
    remove(model);
    remove(model63);
    remove(shard);
}

int main(int argc, char **argv) {
    snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/test_train_host_XXXXXX");
    if (mkdtemp(tmp_dir) == NULL) {
        test_check(0, "create a temporary directory");
        return test_summary();
    }
    test_train_config();
    test_bad_lines_parsed();
    test_gpt2();
    test_schedules_sampler_mfu();
    test_checkpoint_protocol();
    if (argc > 1) test_trainer_binary(argv[1]);
    else printf("  (no trainer binary given: its command lines are not run)\n");
    if (rmdir(tmp_dir) != 0) printf("  (note: %s not empty, left in place)\n", tmp_dir);
    return test_summary();
}
