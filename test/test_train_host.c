/*
test_train_host.c - CPU tests of the trainer's host logic: train_config.h (strict flags, their
checks against each other, the processes and the model), gpt2.h (the parameter table's named
pointers, descriptors, initialisation, config comparison), schedulers.h, sampler.h, mfu.h,
and metrics_log.h (main.jsonl's lines), checkpoint.h's protocol: a crash injected after every stage of a checkpoint write, stale
DONE_ markers of an older run, a state without master weights (llm.c -w 0), a checkpoint of
another model; zero.h (ZeRO-1's slices, each rank's share of every tensor, the gradient
buckets) and ZeRO-1's per-rank state files, with the refusal to resume a checkpoint of another
process count or ZeRO stage; bf16 AdamW moments (-bm 1) in the state file (marked in
header[7], bitwise round trips, a corrupt mark refused) and resumed in the other precision.
launch_plan.h: the -p flags and the launchers' environment (launch_plan), fault.h's TRAIN_FAULT;
rendezvous.h: the fs and tcp link between processes (forked here, no GPU): joining, NCCL's id (never an
earlier run's under fs), a failure or a kill of one process ending the others within seconds
with its message, timeouts. Then ./train_gpt itself (given as the first argument) with a table
of bad command lines: each must exit non-zero with its own message before touching a GPU, so
the table runs on a machine without one; and, when it was built with NCCL, two trainer
processes of which one fails (the other must stop with its message).

    build/test_train_host [./train_gpt]     (from the repository root: it reads data/)
The last line is "N passed, M failed". Temporary files go to /tmp/test_train_host_XXXXXX.
*/
#define _GNU_SOURCE  // rendezvous.h's tee on stderr (fopencookie), as in the trainer (g++ defines it)
#include "../llmc/checkpoint.h"
#include "../llmc/dataloader.h"
#include "../llmc/gpt2.h"
#include "../llmc/metrics_log.h"
#include "../llmc/mfu.h"
#include "../llmc/multi_gpu.h"
#include "../llmc/sampler.h"
#include "../llmc/schedulers.h"
#include "../llmc/train_config.h"
#include "../llmc/utils.h"
#include "../llmc/zero.h"
#include "test_util.h"
#include "test_files.h"

#include <arpa/inet.h>
#include <signal.h>
#include <sys/wait.h>

// The trainer's view of a GPT-2 configuration (a few live at once: one call's arguments).
static const ModelSpec *spec_of(const GPT2Config *c) {
    static ModelSpec specs[4];
    static int next = 0;
    ModelSpec *s = &specs[next++ % 4];
    gpt2_spec(c, s);
    return s;
}

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

// a stand-in environment for launch_plan: "NAME=value" strings, NULL-terminated
static const char *const *test_env = NULL;
static const char *test_getenv(const char *name) {
    const size_t n = strlen(name);
    for (int i = 0; test_env != NULL && test_env[i] != NULL; i++)
        if (strncmp(test_env[i], name, n) == 0 && test_env[i][n] == '=') return test_env[i] + n + 1;
    return NULL;
}

// train_config_parse, launch_plan (in the environment env, NULL: an empty one) and
// train_config_check as main() calls them; 0, or -1 with err
static int parse_plan_check(const char *line, const char *const *env, int nproc, TrainConfig *c, LaunchPlan *plan,
                            char *err, size_t err_len) {
    char buf[8192], *argv[64];
    const int argc = split_args(line, buf, sizeof(buf), argv, 64);
    const int rc = train_config_parse(c, argc, argv, err, err_len);
    if (rc != 0) return rc > 0 ? 1 : -1;
    test_env = env;
    if (launch_plan(plan, c->proc_num, c->proc_rank, c->proc_gpus, c->proc_init, c->proc_server, c->proc_fs,
                    test_getenv, err, err_len) != 0)
        return -1;
    return train_config_check(c, nproc, err, err_len);
}

static int parse_and_check(const char *line, int nproc, TrainConfig *c, char *err, size_t err_len) {
    LaunchPlan plan;
    return parse_plan_check(line, NULL, nproc, c, &plan, err, err_len);
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
    {"-fh 2", "-fh 2: out of range [0, 1]", 0},
    {"-f 0", "-f 0: out of range [1, 1048576]", 0},
    {"-m -2", "-m -2: out of range [-1, 2147483647]", 0},
    {"-k cosin", "-k cosin: unknown schedule", 0},
    {"-z 2", "-z 2: out of range [0, 1]", 0},
    {"-z -1", "-z -1: out of range [0, 1]", 0},
    {"-z one", "-z one: not an integer", 0},
    {"-ov 2", "-ov 2: out of range [0, 1]", 0},
    {"-ov -1", "-ov -1: out of range [0, 1]", 0},
    {"-ov yes", "-ov yes: not an integer", 0},
    {"-bm 2", "-bm 2: out of range [0, 1]", 0},
    {"-bm -1", "-bm -1: out of range [0, 1]", 0},
    {"-bm bf16", "-bm bf16: not an integer", 0},
    {"-sp 2", "-sp 2: out of range [0, 1]", 0},
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
    // -tp: 0 or 1, and 1 only with several processes
    {"-tp 2", "-tp 2: out of range [0, 1]", 0},
    {"-tp -1", "-tp -1: out of range [0, 1]", 0},
    {"-tp 1", "-tp 1 splits the LM head's vocabulary over several processes, and this run has 1", 0},
    {"-tp 1 -pn 1", "-tp 1 splits the LM head's vocabulary over several processes, and this run has 1", 0},
    // -hf: 0 or 1, and 1 only with -o
    {"-hf 2", "-hf 2: out of range [0, 1]", 0},
    {"-hs 0", "-hs 0: out of range [1, 1073741824]", 0},
    {"-hf 1", "-hf 1 writes Hugging Face directories into -o <dir>, and no -o is given", 0},
    // a directory is a Hugging Face model: without config.json it is an error, never a GPT-2 file
    {"-e test", "model directory 'test' has no config.json", 1},
    // a path that starts like a descriptor is a path (defect 1)
    {"-e d12/model_00005000.bin", "cannot open model file 'd12/model_00005000.bin'", 1},
    {"-e d7", "unknown depth descriptor 'd7'", 1},
    {"-e d12 -t 2048", "-t 2048 exceeds the model's max_seq_len 1024", 1},
    // the Llama / Qwen2.5 descriptors (llmc/llama.h): checked against the flags and the data
    {"-e qwen-test -t 65536", "-t 65536 exceeds the model's max_seq_len 32768", 1},
    {"-e qwen-test -V 1000", "token 5 has id 50256, outside the model's vocabulary of 1000 tokens", 1},
    {"-e qwen2.5-0.5B", "cannot open model file 'qwen2.5-0.5B'", 1},
    // token ids against the vocabulary (defect 5), a directory as data (defect 10)
    {"-e d6 -V 1000", "token 5 has id 50256, outside the model's vocabulary of 1000 tokens", 1},
    {"-e d6 -i data", "cannot open shard 'data': Is a directory", 1},
    {"-e d6 -j data/no_such_*.bin", "no files match 'data/no_such_*.bin'", 1},
    // the processes (-p flags; launch_plan), wrong in every build
    {"-pi foo", "-pi foo: unknown init method (mpi, fs or tcp)", 0},
    {"-pi", "flag -pi needs a value", 0},
    {"-pn 0", "-pn 0: out of range [1, 65536]", 0},
    {"-pn 65537", "-pn 65537: out of range [1, 65536]", 0},
    {"-pr -1", "-pr -1: out of range [0, 65535]", 0},
    {"-pg 0", "-pg 0: out of range [1, 1024]", 0},
    {"-pn 2", "-pn 2: several processes need -pi fs -pf <dir> or -pi tcp -ps <host> (or mpirun)", 0},
    {"-pr 1", "-pr 1 needs -pn <the number of processes>", 0},
    {"-pn 2 -pr 2 -pi tcp -ps 127.0.0.1", "-pr 2: the ranks of -pn 2 processes are 0..1", 0},
    {"-pn 2 -pi tcp -ps 127.0.0.1", "-pn 2 needs -pr <this process's rank, 0..1>", 0},
    {"-pi tcp -pn 2 -pr 0", "-pi tcp needs -ps <address of rank 0's host>[:port]", 0},
    {"-pi tcp -ps 127.0.0.1:0", "-ps 127.0.0.1:0: the port must be in [1, 65535]", 0},
    {"-pi tcp -ps 127.0.0.1:65536", "-ps 127.0.0.1:65536: the port must be in [1, 65535]", 0},
    {"-pi tcp -ps 127.0.0.1:80x", "-ps 127.0.0.1:80x: the port must be in [1, 65535]", 0},
    {"-pi tcp -ps :12345", "-ps :12345: expected host, host:port or [IPv6]:port", 0},
    {"-pi tcp -ps [::1", "-ps [::1: expected host, host:port or [IPv6]:port", 0},
    {"-pi tcp -ps 127.0.0.1", "-pi tcp needs -pn <processes> and -pr <rank>", 0},
    {"-pi fs -pn 2 -pr 0", "-pi fs needs -pf <a directory every process shares>", 0},
    {"-pi fs -pf data/no_such_dir -pn 2 -pr 0", "-pf data/no_such_dir: No such file or directory", 0},
    {"-pi fs -pf README.md -pn 2 -pr 0", "-pf README.md: not a directory", 0},
    {"-ps 127.0.0.1", "-ps 127.0.0.1: only -pi tcp has a server address", 0},
    {"-pi fs -pf data -ps 127.0.0.1", "-ps 127.0.0.1: only -pi tcp has a server address", 0},
    {"-pf data", "-pf data: only -pi fs has a shared directory", 0},
    {"-pi mpi -pn 2", "-pn 2: under -pi mpi the ranks and GPUs come from MPI", 0},
    {"-pi mpi -pg 8", "-pg 8: under -pi mpi the ranks and GPUs come from MPI", 0},
};

// ----------------------------------------------------------------------------
// launch_plan.h: the plan (flags and environment), fault.h

static int plan_of(const char *line, const char *const *env, LaunchPlan *p, char *err, size_t err_len) {
    TrainConfig c;
    return parse_plan_check(line, env, 1, &c, p, err, err_len);
}

static void test_launch_plan(void) {
    printf("-- launch_plan.h: the -p flags and the launchers' environment\n");
    LaunchPlan p;
    char err[1024] = "";
    int rc = plan_of("", NULL, &p, err, sizeof(err));
    test_check(rc == 0 && p.method == LAUNCH_SINGLE && p.nproc == 1 && p.rank == 0 && p.local_rank == 0 &&
               p.timeout_s == LAUNCH_DEFAULT_TIMEOUT_S && p.fault.step == 0, "no flags: one process, no MPI%s", err);
    rc = plan_of("-pn 4 -pr 3 -pi tcp -ps 10.0.0.1:23456 -pg 2", NULL, &p, err, sizeof(err));
    test_check(rc == 0 && p.method == LAUNCH_TCP && p.nproc == 4 && p.rank == 3 && p.local_rank == 1 &&
               strcmp(p.host, "10.0.0.1") == 0 && p.port == 23456, "-pi tcp -ps host:port, GPU = rank %% -pg%s", err);
    int ok = plan_of("-pn 2 -pr 0 -pi tcp -ps [::1]:999", NULL, &p, err, sizeof(err)) == 0 &&
             strcmp(p.host, "::1") == 0 && p.port == 999;
    ok = ok && plan_of("-pn 2 -pr 0 -pi tcp -ps ::1", NULL, &p, err, sizeof(err)) == 0 && strcmp(p.host, "::1") == 0 &&
         p.port == LAUNCH_DEFAULT_PORT;
    ok = ok && plan_of("-pn 2 -pr 1 -pi tcp -ps node7", NULL, &p, err, sizeof(err)) == 0 &&
         strcmp(p.host, "node7") == 0 && p.port == 12345 && p.local_rank == 1;
    test_check(ok, "-ps [v6]:port, a bare IPv6 address, a host name (port 12345, llm.c's)%s", err);
    rc = plan_of("-pn 2 -pr 1 -pi fs -pf data", NULL, &p, err, sizeof(err));
    test_check(rc == 0 && p.method == LAUNCH_FS && strcmp(p.fs_dir, "data") == 0 && p.rank == 1,
               "-pi fs -pf dir%s", err);
    rc = plan_of("-pn 1 -pi tcp -ps 127.0.0.1", NULL, &p, err, sizeof(err));
    test_check(rc == 0 && p.method == LAUNCH_SINGLE && p.nproc == 1, "-pn 1: one process whatever -pi says");

    // srun: the ranks from Slurm (under -pi fs|tcp), a guard without -pi
    const char *slurm[] = {"SLURM_NTASKS=8", "SLURM_PROCID=5", "SLURM_LOCALID=1", "SLURM_STEP_NUM_TASKS=8", NULL};
    rc = plan_of("-pi tcp -ps h", slurm, &p, err, sizeof(err));
    test_check(rc == 0 && p.method == LAUNCH_TCP && p.nproc == 8 && p.rank == 5 && p.local_rank == 1,
               "srun: -pn, -pr and the GPU from SLURM_NTASKS, SLURM_PROCID, SLURM_LOCALID%s", err);
    rc = plan_of("-pi tcp -ps h -pg 3", slurm, &p, err, sizeof(err));
    test_check(rc == 0 && p.local_rank == 2, "srun with -pg 3: the GPU is rank %% 3 = 2 (%d)", p.local_rank);
    rc = plan_of("-pi fs -pf data -pn 2 -pr 0", slurm, &p, err, sizeof(err));
    test_check(rc == 0 && p.nproc == 2 && p.rank == 0 && p.local_rank == 0, "-pn/-pr win over Slurm's");
    rc = plan_of("", slurm, &p, err, sizeof(err));
    test_check(rc < 0 && contains(err, "one of 8 Slurm tasks") && contains(err, "-pi tcp"),
               "8 srun tasks without -pi: an error, not 8 separate runs: %s", err);
    const char *batch[] = {"SLURM_NTASKS=8", "SLURM_PROCID=0", NULL};
    test_check(plan_of("", batch, &p, err, sizeof(err)) == 0 && p.method == LAUNCH_SINGLE,
               "a batch script's own process (SLURM_NTASKS, no job step): one process");
    const char *bad_slurm[] = {"SLURM_NTASKS=4", "SLURM_PROCID=9", NULL};
    rc = plan_of("-pi tcp -ps h", bad_slurm, &p, err, sizeof(err));
    test_check(rc < 0 && contains(err, "SLURM_PROCID=9 and SLURM_NTASKS=4"), "a rank past the count: %s", err);

    // mpirun: MPI by default; only a launcher with -pi fs|tcp
    const char *ompi[] = {"OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_LOCAL_RANK=1", NULL};
    rc = plan_of("", ompi, &p, err, sizeof(err));
    test_check(rc == 0 && p.method == LAUNCH_MPI && contains(p.why_mpi, "OMPI_COMM_WORLD_SIZE=2"),
               "under mpirun: -pi mpi by default (%s)%s", p.why_mpi, err);
    rc = launch_plan_check_build(&p, err, sizeof(err));
    test_check(rc < 0 && contains(err, "started by mpirun (OMPI_COMM_WORLD_SIZE=2): this trainer was built for one GPU"),
               "and a build without NCCL says so (this test's build has none): %s", err);
    rc = plan_of("-pi fs -pf data", ompi, &p, err, sizeof(err));
    test_check(rc == 0 && p.method == LAUNCH_FS && p.nproc == 2 && p.rank == 1 && p.local_rank == 1,
               "mpirun as a launcher only (-pi fs): its OMPI_COMM_WORLD_* ranks%s", err);
    rc = plan_of("-pn 2 -pr 1", ompi, &p, err, sizeof(err));
    test_check(rc < 0 && contains(err, "-pn 2: under mpirun the ranks and GPUs come from MPI"), "%s", err);
    const char *ompi1[] = {"OMPI_COMM_WORLD_SIZE=1", "OMPI_COMM_WORLD_RANK=0", NULL};
    test_check(plan_of("", ompi1, &p, err, sizeof(err)) == 0 && p.method == LAUNCH_SINGLE,
               "mpirun -np 1: one process, no MPI needed");
    rc = plan_of("-pn 2 -pr 0 -pi tcp -ps 127.0.0.1", NULL, &p, err, sizeof(err)) == 0 ? 
         launch_plan_check_build(&p, err, sizeof(err)) : 0;
    test_check(rc < 0 && contains(err, "2 processes: this trainer was built for one GPU"), "%s", err);

    // the environment's own values
    const char *t_bad[] = {"TRAIN_COMM_TIMEOUT=abc", NULL}, *t_zero[] = {"TRAIN_COMM_TIMEOUT=0", NULL},
               *t_five[] = {"TRAIN_COMM_TIMEOUT=5", NULL};
    test_check(plan_of("", t_bad, &p, err, sizeof(err)) < 0 && contains(err, "TRAIN_COMM_TIMEOUT=abc: not an integer"),
               "%s", err);
    test_check(plan_of("", t_zero, &p, err, sizeof(err)) < 0 && plan_of("", t_five, &p, err, sizeof(err)) == 0 &&
               p.timeout_s == 5, "TRAIN_COMM_TIMEOUT in [1, 604800] seconds");
    Fault f;
    const int max = LAUNCH_MAX_PROCS;
    ok = fault_parse("1:3", max, &f, err, sizeof(err)) == 0 && f.rank == 1 && f.step == 3 && f.mode == FAULT_EXIT;
    ok = ok && fault_parse("0:12:kill", max, &f, err, sizeof(err)) == 0 && f.rank == 0 && f.step == 12 &&
         f.mode == FAULT_KILL;
    ok = ok && fault_parse("2:1:cuda", max, &f, err, sizeof(err)) == 0 && f.mode == FAULT_CUDA;
    ok = ok && fault_parse(NULL, max, &f, err, sizeof(err)) == 0 && f.step == 0;
    const char *bad_faults[] = {"1", "1:0", "x:3", "1:3:boom", "-1:3", "1:3x", ":3", "1:", "1:3:exit:4", "65536:1"};
    for (size_t i = 0; i < sizeof(bad_faults) / sizeof(bad_faults[0]); i++)
        ok = ok && fault_parse(bad_faults[i], max, &f, err, sizeof(err)) < 0 &&
             contains(err, "expected rank:step[:exit|cuda|kill]");
    test_check(ok, "TRAIN_FAULT=rank:step[:exit|cuda|kill], strict: %s", err);
    fault_parse("1:3:cuda", max, &f, err, sizeof(err));
    test_check(fault_due(&f, 1, 3) == FAULT_CUDA && fault_due(&f, 0, 3) == FAULT_NONE &&
               fault_due(&f, 1, 2) == FAULT_NONE && fault_parse(NULL, max, &f, err, sizeof(err)) == 0 &&
               fault_due(&f, 0, 1) == FAULT_NONE, "a fault is due on its rank at its step only, none when unset");
    const char *f1[] = {"TRAIN_FAULT=1:3", NULL};
    test_check(plan_of("", f1, &p, err, sizeof(err)) < 0 && contains(err, "rank 1, and the run has 1 process"),
               "a fault for a rank the run lacks: %s", err);
    test_check(plan_of("-pn 2 -pr 0 -pi tcp -ps 127.0.0.1", f1, &p, err, sizeof(err)) == 0 && p.fault.rank == 1 &&
               p.fault.step == 3, "a fault for rank 1 of 2");
}

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
               c.out_dir == NULL && c.sample_every == 20 && c.flce_mib == 1024 && c.zero_stage == 0 && c.overlap == 1 &&
               c.bf16_moments == 0 && c.step_profile == 0 && c.flce_hopper == 1,
               "defaults: llm.c's (B 4, T 1024, total batch B*T, one epoch, lr 3e-4, cosine, d12, -z 0), -ov 1, "
               "-bm 0, -sp 0%s", err);
    rc = parse_and_check("-b 8 -t 256 -d 8192 -x 50 -k wsd -l 1e-3 -q 0.1 -c 0.1 -u 5 -o out -y 1 -n 10 -fl 1 "
                         "-fa 1 -fh 0 -f 160 -V 151936 -e d24 -m -1 -z 1 -ov 0 -bm 1 -sp 1", 2, &c, err, sizeof(err));
    test_check(rc == 0 && c.B == 8 && c.T == 256 && c.total_batch == 8192 && c.grad_accum == 2 && c.max_steps == 50 &&
               c.schedule == LR_WSD && c.lr == 1e-3f && c.final_frac == 0.1f && c.weight_decay == 0.1f &&
               c.warmup == 5 && strcmp(c.out_dir, "out") == 0 && c.resume == 1 && c.ckpt_every == 10 &&
               c.flce_fp32_logits == 1 && c.flce_autotune == 1 && c.flce_mib == 160 && c.vocab == 151936 &&
               c.val_max == -1 && c.zero_stage == 1 && c.overlap == 0 && c.bf16_moments == 1 && c.step_profile == 1 &&
               c.flce_hopper == 0,
               "every flag parsed; -d 8192 over B*T = 2048 on 2 processes: 2 accumulation steps%s", err);
    rc = parse_and_check("-b 4 -t 64", 3, &c, err, sizeof(err));
    test_check(rc == 0 && c.total_batch == 768, "-d -1: B*T*processes (3 processes: 768)");
    rc = parse_and_check("-b 1024 -t 1024", 4096, &c, err, sizeof(err));
    test_check(rc < 0 && contains(err, "4096 processes: 4294967296 tokens per micro-step"),
               "B*T*processes >= 2^32 is an error, not a wrap to 0: %s", err);
    test_check(parse_and_check("-x 5 -h", 1, &c, err, sizeof(err)) == 1, "-h anywhere asks for the usage");
    err[0] = 0;
    rc = parse_and_check("-tp 1 -b 2 -t 64", 2, &c, err, sizeof(err));
    test_check(rc == 0 && c.tp == 1 && c.total_batch == 256 && c.grad_accum == 1, "-tp 1 on 2 processes%s", err);
    rc = parse_and_check("", 1, &c, err, sizeof(err));
    test_check(rc == 0 && c.tp == 0, "-tp: 0 by default (data parallel)");
    rc = parse_and_check("-tp 0", 1, &c, err, sizeof(err));
    test_check(rc == 0 && c.tp == 0, "-tp 0 on one process%s", err);
    // with ZeRO-1 and the bucketed reduction (their collectives come after the head's, in the
    // same order on every rank)
    rc = parse_and_check("-tp 1 -z 1 -b 2 -t 64", 2, &c, err, sizeof(err));
    test_check(rc == 0 && c.tp == 1 && c.zero_stage == 1 && c.overlap == 1, "-tp 1 -z 1 (-ov 1) on 2 processes%s",
               err);
    rc = parse_and_check("-tp 1 -z 0 -ov 0 -b 2 -t 64", 2, &c, err, sizeof(err));
    test_check(rc == 0 && c.tp == 1 && c.zero_stage == 0 && c.overlap == 0, "-tp 1 -z 0 -ov 0 on 2 processes%s",
               err);
    // -bm 1 (bf16 moments) goes with any ZeRO stage and process count: ZeRO-1 slices them as fp32 ones
    rc = parse_and_check("-bm 1 -z 1 -b 2 -t 64", 4, &c, err, sizeof(err));
    test_check(rc == 0 && c.bf16_moments == 1 && c.zero_stage == 1, "-bm 1 -z 1 on 4 processes%s", err);
    rc = parse_and_check("-bm 0", 1, &c, err, sizeof(err));
    test_check(rc == 0 && c.bf16_moments == 0, "-bm 0 on one process%s", err);

    // -tp 1's shards of the vocabulary: every row once, in order, cut at multiples of 128 (the
    // last rank takes any rest), the real classes V over the ranks, no rank all padding
    {
        int v0 = -1, rows = -1, real = -1;
        int ok = train_tp_shard(50257, 50304, 2, 0, &v0, &rows, &real, err, sizeof(err)) == 0 && v0 == 0 &&
                 rows == 25088 && real == 25088;
        ok = ok && train_tp_shard(50257, 50304, 2, 1, &v0, &rows, &real, err, sizeof(err)) == 0 && v0 == 25088 &&
             rows == 25216 && real == 25169;
        test_check(ok, "GPT-2 on 2 ranks: rows [0, 25088) and [25088, 50304), 25169 real on rank 1%s", err);
        const int cases[][3] = {{50257, 50304, 3}, {50257, 50304, 8}, {151936, 151936, 8}, {176245, 176256, 7},
                                {290, 300, 2}, {128, 128, 1}, {1000, 1024, 8}, {176245, 176256, 64}};
        ok = 1;
        for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
            const int V = cases[k][0], Vp = cases[k][1], P = cases[k][2];
            int next = 0, real_sum = 0, min_rows = Vp, max_rows = 0;
            for (int r = 0; r < P && ok; r++) {
                ok = train_tp_shard(V, Vp, P, r, &v0, &rows, &real, err, sizeof(err)) == 0 && v0 == next &&
                     v0 % 128 == 0 && rows >= 128 && real >= 1 && real <= rows && (r == P - 1 || rows % 128 == 0);
                next = v0 + rows;
                real_sum += real;
                if (r < P - 1 && rows < min_rows) min_rows = rows;
                if (r < P - 1 && rows > max_rows) max_rows = rows;
            }
            ok = ok && next == Vp && real_sum == V && (P < 3 || max_rows - min_rows <= 128);
            if (!ok) printf("  (V %d, Vp %d, P %d: rank shard wrong: %s)\n", V, Vp, P, err);
        }
        test_check(ok, "shards of V = 50257 .. 176245 over 1 .. 64 ranks: contiguous, whole, 128-aligned, nearly equal");
        test_check(train_tp_shard(100, 128, 2, 0, &v0, &rows, &real, err, sizeof(err)) < 0 &&
                   contains(err, "fewer than 128 rows for each of 2 processes"), "Vp 128 on 2 ranks: refused: %s", err);
        test_check(train_tp_shard(100, 384, 3, 2, &v0, &rows, &real, err, sizeof(err)) < 0 &&
                   contains(err, "rank 2's rows [256, 384) of the vocabulary are all padding"),
                   "a rank whose rows are all padding: refused: %s", err);
    }

    // against the model
    GPT2Config d12, odd = {64, 397, 448, 2, 4, 72};
    gpt2_config_from_descriptor("d12", 0, &d12, err, sizeof(err));
    parse_and_check("-t 1024", 1, &c, err, sizeof(err));
    test_check(train_config_check_model(&c, spec_of(&d12), err, sizeof(err)) == 0, "d12 at T = 1024 passes");
    parse_and_check("-t 64", 1, &c, err, sizeof(err));
    test_check(train_config_check_model(&c, spec_of(&odd), err, sizeof(err)) != 0 && contains(err, "head size of 16, 32, 64 or 128"),
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
    ParameterTensor t[GPT2_NUM_TENSORS];
    gpt2_parameter_tensors(&c, t);
    const size_t n = gpt2_num_parameters(&c);
    float *buf = (float *)malloc(n * sizeof(float));
    GPT2FloatTensors p;
    gpt2_point_floats(&p, buf, t);
    const size_t C = 4, L = 2;
    test_check(GPT2_NUM_TENSORS == 16 && p.wte == buf && p.wpe == buf + 16 * C && p.ln1w == p.wpe + 8 * C &&
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
// metrics_log.h: main.jsonl's lines, exactly; null for what is unknown or not finite; a buffer
// too small refused; the file appended line by line (a resumed run continues it)

static void test_metrics_log(void) {
    printf("metrics_log.h (main.jsonl)\n");
    char line[METRICS_LINE_MAX];
    const TrainMetrics m = {10, 720896, 5.861, 3e-4, 1.47, 106.8, 613568.0, 51.4, 19013.0};
    const char *want = "{\"step\": 10, \"tokens\": 720896, \"loss\": 5.861, \"lr\": 0.0003, \"norm\": 1.47, "
                       "\"ms\": 106.8, \"tok_per_s\": 613568, \"mfu\": 51.4, \"mem_mib\": 19013}\n";
    int n = metrics_format_train(line, sizeof(line), &m);
    test_check(n == (int)strlen(want) && strcmp(line, want) == 0, "a step's line: %.*s", n > 0 ? n - 1 : 9,
               n > 0 ? line : "(refused)");
    TrainMetrics u = m;
    u.mfu = -1.0;
    u.mem_mib = -1.0;
    u.norm = INFINITY;
    u.tokens = 12345678901234LL;  // past 2^32 and past 9 significant digits: printed whole
    n = metrics_format_train(line, sizeof(line), &u);
    test_check(n > 0 && strstr(line, "\"tokens\": 12345678901234,") && strstr(line, "\"norm\": null") &&
                   strstr(line, "\"mfu\": null") && strstr(line, "\"mem_mib\": null}\n"),
               "unknown MFU and memory, an infinite norm: null; tokens an integer: %.*s", n > 0 ? n - 1 : 9,
               n > 0 ? line : "(refused)");
    n = metrics_format_val(line, sizeof(line), 10, 655360, 5.902);
    test_check(n > 0 && strcmp(line, "{\"step\": 10, \"tokens\": 655360, \"val_loss\": 5.902}\n") == 0,
               "a validation's line: %.*s", n > 0 ? n - 1 : 9, n > 0 ? line : "(refused)");
    n = metrics_format_val(line, sizeof(line), 0, 0, NAN);
    test_check(n > 0 && strstr(line, "\"val_loss\": null}"), "a NaN val loss: null");
    int refused = 1;
    for (size_t cap = 0; cap < strlen(want) + 1; cap++) refused &= metrics_format_train(line, cap, &m) == -1;
    test_check(refused && metrics_format_train(line, strlen(want) + 1, &m) == (int)strlen(want),
               "every buffer shorter than the line is refused, one byte more than its length takes it");
    // written, then a resumed run appends
    FILE *f = metrics_log_open(tmp_dir, 0);
    metrics_log_val(f, 0, 0, 10.5);
    metrics_log_train(f, &m);
    fclose_check(f);
    f = metrics_log_open(tmp_dir, 1);
    metrics_log_val(f, 10, 655360, 5.902);
    fclose_check(f);
    char path[600];
    snprintf(path, sizeof(path), "%s/%s", tmp_dir, METRICS_LOG_NAME);
    f = fopen_check(path, "r");
    char got[3][METRICS_LINE_MAX];
    int lines = 0;
    while (lines < 3 && fgets(got[lines], sizeof(got[lines]), f)) lines++;
    const int more = fgetc(f) != EOF;
    fclose_check(f);
    test_check(lines == 3 && !more && strcmp(got[0], "{\"step\": 0, \"tokens\": 0, \"val_loss\": 10.5}\n") == 0 &&
                   strcmp(got[1], want) == 0 && strstr(got[2], "\"val_loss\": 5.902"),
               "%s: 3 lines, the third appended by the resumed run (%d lines)", METRICS_LOG_NAME, lines);
    remove(path);
}

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
    w.model = spec_of(&k->config);
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
    const int rc = checkpoint_load_checked(dir, spec_of(config), 0, 1, 0, NULL, &ck, err, err_len);
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
    int rc = checkpoint_load_checked(dir, spec_of(&c), 0, 1, 0, NULL, &ck, err, sizeof(err));
    int same = rc == 1 && ck.master != NULL;
    for (size_t i = 0; same && i < ck.num_parameters; i++) same = ck.master[i] == float_from_bf16(w0.params[i]);
    test_check(same && ck.master[5] == -1.5f, "a state without master weights: the fp32 master copy is the loaded "
               "parameters widened, so AdamW continues from them%s", rc < 0 ? err : "");
    if (rc == 1) checkpoint_free(&ck);
    ckpt_write(&a10, dir, 0);
    rc = checkpoint_load_checked(dir, spec_of(&c), 0, 1, 0, NULL, &ck, err, sizeof(err));
    test_check(rc == 1 && ck.step == 40 && ck.master[0] == mark(3, 40), "(the latest step is still 40)");
    if (rc == 1) checkpoint_free(&ck);
    ckpt_write(&a20, dir, 0);
    clear_dir(dir);
    make_dir(dir, sizeof(dir), "master");
    ckpt_write(&a20, dir, 0);
    rc = checkpoint_load_checked(dir, spec_of(&c), 0, 1, 0, NULL, &ck, err, sizeof(err));
    test_check(rc == 1 && ck.master[0] == mark(1, 20) + 0.25f, "with master weights: the state file's");
    if (rc == 1) checkpoint_free(&ck);
    clear_dir(dir);
    ckpt_free(&w0);

    // a checkpoint of another model with the same parameter count (defect 10: -V 50300 vs 50257)
    make_dir(dir, sizeof(dir), "mismatch");
    ckpt_write(&a20, dir, 0);
    GPT2Config other = c;
    other.vocab_size = 12;
    rc = checkpoint_load_checked(dir, spec_of(&other), 0, 1, 0, NULL, &ck, err, sizeof(err));
    test_check(rc < 0 && contains(err, "another model") && contains(err, "vocab_size 10 vs 12") &&
               gpt2_num_parameters(&other) == gpt2_num_parameters(&c),
               "a checkpoint of V 10 for a run of V 12 (same parameter count): %s", err);
    other = c;
    other.max_seq_len = 16;
    rc = checkpoint_load_checked(dir, spec_of(&other), 0, 1, 0, NULL, &ck, err, sizeof(err));
    test_check(rc < 0 && contains(err, "max_seq_len 8 vs 16"), "maxT differs: %s", err);
    rc = checkpoint_load_checked(dir, spec_of(&c), 0, 2, 0, NULL, &ck, err, sizeof(err));
    test_check(rc < 0 && contains(err, "written by 1 process, this run has 2"),
               "a checkpoint of 1 process for a run of 2: an error naming both, not a fresh start: %s", err);
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
    w.model = spec_of(&c);
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
// zero.h: slices, each rank's share of the tensors, the gradient buckets

// The bucket of flat element i by the rule, written out here (layer l's slices: bucket l; wte,
// wpe, lnfw, lnfb: L).
static int expected_bucket(const ParameterTensor *t, int L, size_t i) {
    for (int k = 0; k < GPT2_NUM_TENSORS; k++) {
        if (i < t[k].offset || i >= t[k].offset + t[k].numel) continue;
        const char *n = t[k].name;
        if (!strcmp(n, "wte") || !strcmp(n, "wpe") || !strcmp(n, "lnfw") || !strcmp(n, "lnfb")) return L;
        return (int)((i - t[k].offset) / (t[k].numel / (size_t)L));
    }
    return -1;
}

// Every check of one model at nproc processes and ZeRO stage; with `full`, element by element.
static int zero_layout_ok(const GPT2Config *c, int nproc, int stage, int full, char *why, size_t why_len) {
    ParameterTensor t[GPT2_NUM_TENSORS];
    gpt2_parameter_tensors(c, t);
    const size_t n = gpt2_num_parameters(c);
    const int L = c->num_layers;
    char err[256];
    unsigned char *seen = full ? (unsigned char *)calloc(n, 1) : NULL;
    size_t covered = 0, expect_lo = 0;
    int ok = 1;
#define ZFAIL_(...) do { llmc_set_error(why, why_len, __VA_ARGS__); ok = 0; goto done; } while (0)
    for (int r = 0; r < nproc; r++) {
        ZeroLayout z;
        if (zero_layout(&z, n, nproc, r, stage, err, sizeof(err)) != 0) ZFAIL_("rank %d: %s", r, err);
        if (z.slice % ZERO_ALIGN != 0 || z.padded != z.slice * (size_t)nproc || z.padded < n ||
            z.padded - n >= (size_t)nproc * ZERO_ALIGN || z.lo != (size_t)r * z.slice || z.count > z.slice)
            ZFAIL_("rank %d: slice %zu padded %zu lo %zu count %zu for n %zu", r, z.slice, z.padded, z.lo, z.count, n);
        if (z.count > 0 && z.lo != expect_lo) ZFAIL_("rank %d's slice starts at %zu, not %zu", r, z.lo, expect_lo);
        expect_lo += z.count;
        if (stage == 1 ? z.opt_lo != z.lo || z.opt_count != z.count : z.opt_lo != 0 || z.opt_count != n)
            ZFAIL_("rank %d: the optimizer's share [%zu, +%zu)", r, z.opt_lo, z.opt_count);
        // the optimizer's share of each tensor: contiguous over [opt_lo, opt_lo + opt_count)
        ZeroRange rg[GPT2_NUM_TENSORS];
        const int nr = zero_optimizer_ranges(&z, t, GPT2_NUM_TENSORS, rg);
        size_t at = z.opt_lo;
        for (int k = 0; k < nr; k++) {
            const ParameterTensor *pt = &t[rg[k].tensor];
            if (rg[k].offset != at || rg[k].numel == 0 || rg[k].state_offset != at - z.opt_lo ||
                rg[k].index0 != at - pt->offset || rg[k].offset + rg[k].numel > pt->offset + pt->numel)
                ZFAIL_("rank %d range %d (%s): offset %zu numel %zu state %zu index0 %zu", r, k, pt->name,
                       rg[k].offset, rg[k].numel, rg[k].state_offset, rg[k].index0);
            at += rg[k].numel;
            if (stage == 1) covered += rg[k].numel;
        }
        if (at != z.opt_lo + z.opt_count) ZFAIL_("rank %d: the ranges end at %zu", r, at);
        // buckets, seen from this rank (the same on every rank: checked on rank 0's)
        if (r > 0) continue;
        ZeroPiece *pc = (ZeroPiece *)malloc((size_t)zero_bucket_pieces_max(&z, spec_of(c)) * sizeof(ZeroPiece));
        size_t in_buckets = 0;
        for (int b = 0; b <= L && ok; b++) {
            const int np = zero_bucket_pieces(&z, spec_of(c), b, pc);
            for (int k = 0; k < np && ok; k++) {
                const ZeroPiece *q = &pc[k];
                in_buckets += q->count;
                if (q->count == 0 || q->offset + q->count > n || (k > 0 && q->offset < pc[k - 1].offset + pc[k - 1].count))
                    { llmc_set_error(why, why_len, "bucket %d piece %d: [%zu, +%zu)", b, k, q->offset, q->count); ok = 0; }
                else if (stage == 0 ? q->owner != -1
                         : q->owner != (int)(q->offset / z.slice) || q->offset + q->count > (size_t)(q->owner + 1) * z.slice)
                    { llmc_set_error(why, why_len, "bucket %d piece %d: owner %d of [%zu, +%zu)", b, k, q->owner, q->offset,
                                     q->count); ok = 0; }
                for (size_t i = q->offset; full && ok && i < q->offset + q->count; i++) {
                    if (seen[i] != 0 || expected_bucket(t, L, i) != b) {
                        llmc_set_error(why, why_len, "element %zu: in bucket %d (again: %d), belongs in %d", i, b, seen[i],
                                       expected_bucket(t, L, i));
                        ok = 0;
                    }
                    seen[i] = 1;
                }
            }
        }
        free(pc);
        if (ok && in_buckets != n) { llmc_set_error(why, why_len, "the buckets hold %zu of %zu", in_buckets, n); ok = 0; }
        if (!ok) goto done;
    }
    if (expect_lo != n) ZFAIL_("the slices hold %zu of %zu parameters", expect_lo, n);
    if (stage == 1 && covered != n) ZFAIL_("the ranks' optimizer shares hold %zu of %zu", covered, n);
#undef ZFAIL_
done:
    free(seen);
    return ok;
}

static void test_zero_layout(void) {
    printf("-- zero.h: ZeRO-1's slices, the optimizer's shares, the gradient buckets\n");
    char err[256] = "";
    ZeroLayout z;
    test_check(zero_layout(&z, 1000, 2, 0, 2, err, sizeof(err)) < 0 && contains(err, "ZeRO stage 2"),
               "stage 2: an error: %s", err);
    test_check(zero_layout(&z, 1000, 2, 2, 1, err, sizeof(err)) < 0, "rank 2 of 2: an error");
    // d12 over 2: the slices are halves, rounded up to the alignment
    GPT2Config d12;
    gpt2_config_from_descriptor("d12", 0, &d12, err, sizeof(err));
    const size_t n12 = gpt2_num_parameters(&d12);
    zero_layout(&z, n12, 2, 1, 1, err, sizeof(err));
    test_check(z.slice == (n12 / 2 + ZERO_ALIGN - 1) / ZERO_ALIGN * ZERO_ALIGN && z.lo == z.slice &&
               z.count == n12 - z.slice && z.opt_count == z.count,
               "d12 (%zu parameters) over 2: slices of %zu, rank 1 holds %zu", n12, z.slice, z.count);
    // small models element by element, d12 by ranges; one to 8 processes, both stages
    const GPT2Config smalls[] = {small_config(), {64, 100, 128, 2, 2, 16}, {16, 50, 128, 1, 2, 32}};
    const int procs[] = {1, 2, 3, 4, 8};
    int all = 1;
    char why[512] = "";
    for (size_t m = 0; m < sizeof(smalls) / sizeof(smalls[0]) + 1 && all; m++)
        for (size_t p = 0; p < sizeof(procs) / sizeof(procs[0]) && all; p++)
            for (int stage = 0; stage <= 1 && all; stage++) {
                const int small = m < sizeof(smalls) / sizeof(smalls[0]);
                all = zero_layout_ok(small ? &smalls[m] : &d12, procs[p], stage, small, why, sizeof(why));
                if (!all) printf("      model %zu, %d processes, -z %d: %s\n", m, procs[p], stage, why);
            }
    test_check(all, "4 models (L 1, 2, 12) on 1, 2, 3, 4, 8 processes at -z 0 and 1: equal aligned slices that hold "
               "the parameters once; each rank's ranges tile its share with state offsets and tensor indices; the "
               "buckets hold every gradient once, each in its layer's bucket (wte, wpe, lnf: the last), ZeRO-1 "
               "pieces within their owner's slice");
    // d12's buckets at 2 processes: 12 pieces a layer, 13 in the one whose attprojw holds the
    // slice boundary; the last bucket 2 (wte+wpe and lnfw+lnfb, merged)
    ParameterTensor t[GPT2_NUM_TENSORS];
    gpt2_parameter_tensors(&d12, t);
    zero_layout(&z, n12, 2, 0, 1, err, sizeof(err));
    ZeroPiece pc[GPT2_NUM_TENSORS + 2];
    int total = 0, twelve = 0, thirteen = 0;
    for (int b = 0; b < 12; b++) {
        const int k = zero_bucket_pieces(&z, spec_of(&d12), b, pc);
        total += k;
        twelve += k == 12;
        thirteen += k == 13;
    }
    const int last = zero_bucket_pieces(&z, spec_of(&d12), 12, pc);
    total += last;
    test_check(twelve == 11 && thirteen == 1 && last == 2 && pc[0].offset == 0 && pc[0].count == t[0].numel + t[1].numel &&
               pc[0].owner == 0 && pc[1].offset == t[14].offset && pc[1].count == 2 * 768 && pc[1].owner == 1,
               "d12 -z 1 over 2: 12 pieces a layer (13 where the slice boundary falls), the last bucket wte+wpe on rank "
               "0 and lnfw+lnfb on rank 1: %d pieces in all", total);
}

// ----------------------------------------------------------------------------
// ZeRO-1's state files: one per rank with its slice; resume refuses another shape

// A checkpoint of step written by nproc processes at ZeRO stage `zero` into dir (ranks written
// last to first, as their barrier would order them): each rank's m holds the flat indices of
// its share, v their negatives, master those + 0.5; the bf16 parameters (i % 64). A rank in
// bad_rank writes a state one float too long. bf16_moments (-bm 1): m and v those values
// rounded to bf16, and marked so.
static int zero_ckpt_write_moments(const char *dir, const GPT2Config *c, int step, int nproc, int zero, int use_master,
                                   int bad_rank, int bf16_moments) {
    const size_t n = gpt2_num_parameters(c);
    uint16_t *params = (uint16_t *)malloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) params[i] = bf16_from_float((float)(i % 64));
    int rc = 0;
    char err[1024];
    for (int r = nproc - 1; r >= 0 && rc == 0; r--) {
        ZeroLayout z;
        zero_layout(&z, n, nproc, r, zero, err, sizeof(err));
        TrainingState st;
        memset(&st, 0, sizeof(st));
        st.num_processes = nproc;
        st.process_rank = r;
        st.use_master_weights = use_master;
        st.zero_stage = zero;
        st.bf16_moments = bf16_moments;
        st.step = step;
        st.num_parameters = z.opt_count + (r == bad_rank);
        st.m = (float *)malloc((st.num_parameters + 1) * sizeof(float));
        st.v = (float *)malloc((st.num_parameters + 1) * sizeof(float));
        st.master_weights = (float *)malloc((st.num_parameters + 1) * sizeof(float));
        for (size_t i = 0; i < st.num_parameters; i++) {
            st.m[i] = (float)(z.opt_lo + i);
            st.v[i] = -(float)(z.opt_lo + i);
            st.master_weights[i] = (float)(z.opt_lo + i) + 0.5f;
            if (bf16_moments) {
                st.m[i] = float_from_bf16(bf16_from_float(st.m[i]));
                st.v[i] = float_from_bf16(bf16_from_float(st.v[i]));
            }
        }
        CheckpointWrite w;
        memset(&w, 0, sizeof(w));
        w.dir = dir;
        w.model = spec_of(c);
        w.params = params;
        w.state = &st;
        rc = checkpoint_write_checked(&w, err, sizeof(err));
        if (rc != 0) printf("      write failed: %s\n", err);
        state_free(&st);
    }
    free(params);
    return rc;
}

// The Llama family's table through ZeRO's arithmetic: every element in exactly one bucket,
// layer l's slices of the stacked tensors in bucket l, embed, lnfw and lm_head in the last,
// ZeRO-1 pieces within their owner's slice.
static void test_zero_llama(void) {
    const char *models[] = {"qwen-test", "llama-test"};
    for (int mi = 0; mi < 2; mi++) {
        char err[512] = "";
        ModelSpec spec;
        if (model_load_checked(models[mi], 0, &spec, NULL, err, sizeof(err)) != 0) {
            test_check(0, "load %s: %s", models[mi], err);
            continue;
        }
        const size_t n = spec.num_parameters;
        const int L = spec.num_layers;
        int ok = 1;
        for (int nproc = 1; nproc <= 3 && ok; nproc++)
            for (int stage = 0; stage <= 1 && ok; stage++) {
                ZeroLayout z;
                ok &= zero_layout(&z, n, nproc, 0, stage, err, sizeof(err)) == 0;
                unsigned char *seen = (unsigned char *)calloc(n, 1);
                ZeroPiece *pc = (ZeroPiece *)malloc((size_t)zero_bucket_pieces_max(&z, &spec) * sizeof(ZeroPiece));
                for (int b = 0; b < zero_num_buckets(&spec) && ok; b++) {
                    const int np = zero_bucket_pieces(&z, &spec, b, pc);
                    for (int k = 0; k < np && ok; k++)
                        for (size_t i = pc[k].offset; i < pc[k].offset + pc[k].count && ok; i++) {
                            // the tensor of element i, and the bucket it belongs in
                            int ti = 0;
                            while (ti + 1 < spec.num_tensors && spec.tensors[ti + 1].offset <= i) ti++;
                            const ParameterTensor *t = &spec.tensors[ti];
                            const int want = t->layered ? (int)((i - t->offset) / (t->numel / (size_t)L)) : L;
                            ok &= seen[i] == 0 && want == b &&
                                  (stage == 0 ? pc[k].owner == -1 : pc[k].owner == zero_owner(&z, i));
                            seen[i] = 1;
                        }
                }
                for (size_t i = 0; i < n && ok; i++) ok &= seen[i] == 1;
                free(seen);
                free(pc);
            }
        test_check(ok, "%s (%d tensors, %s head): on 1-3 processes at -z 0 and 1 every parameter in exactly one "
                   "bucket, its layer's or the last (embed, lnfw, lm_head), ZeRO-1 pieces owned by their slice's rank",
                   models[mi], spec.num_tensors, spec.head == 0 ? "tied" : "untied");
    }
}

static int zero_ckpt_write(const char *dir, const GPT2Config *c, int step, int nproc, int zero, int use_master,
                           int bad_rank) {
    return zero_ckpt_write_moments(dir, c, step, nproc, zero, use_master, bad_rank, 0);
}

static void test_zero_checkpoints(void) {
    printf("-- checkpoint.h with ZeRO-1: per-rank state files, resume of another shape refused\n");
    char err[1024] = "", dir[256], path[CHECKPOINT_PATH_MAX];
    const GPT2Config c = {64, 100, 128, 2, 2, 16};
    const size_t n = gpt2_num_parameters(&c);
    ZeroLayout z0, z1;
    zero_layout(&z0, n, 2, 0, 1, err, sizeof(err));
    zero_layout(&z1, n, 2, 1, 1, err, sizeof(err));
    make_dir(dir, sizeof(dir), "zero");
    test_check(zero_ckpt_write(dir, &c, 20, 2, 1, 1, -1) == 0, "a -z 1 checkpoint of 2 processes written");
    // llm.c's names: one state file per rank, the model and marker once
    int names = 1;
    const char *files[] = {"model_00000020.bin", "state_00000020_00000.bin", "state_00000020_00001.bin", "DONE_00000020"};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
        names = names && file_exists(path);
    }
    checkpoint_state_path(path, sizeof(path), dir, 20, 1);
    struct stat sb;
    const int sized = stat(path, &sb) == 0 && (size_t)sb.st_size == STATE_HEADER_BYTES + 3 * z1.count * sizeof(float);
    TrainingState head;
    const int peeked = state_peek_checked(path, &head, err, sizeof(err)) == 0 && head.zero_stage == 1 &&
                       head.num_processes == 2 && head.process_rank == 1 && head.step == 20;
    test_check(names && sized && peeked && z1.count < z0.count,
               "files model_00000020.bin, state_00000020_0000{0,1}.bin, DONE_00000020; rank 1's state holds its "
               "slice alone (%zu of %zu parameters: %lld bytes), its header -z 1 (header[6])", z1.count, n,
               (long long)sb.st_size);
    // each rank loads its slice
    Checkpoint ck;
    int ok = 1;
    for (int r = 0; r < 2; r++) {
        const ZeroLayout *z = r == 0 ? &z0 : &z1;
        const int rc = checkpoint_load_checked(dir, spec_of(&c), r, 2, 1, NULL, &ck, err, sizeof(err));
        ok = ok && rc == 1 && ck.zero.opt_lo == z->lo && ck.zero.opt_count == z->count && ck.num_parameters == n &&
             ck.state.num_parameters == z->count && ck.state.m[0] == (float)z->lo &&
             ck.state.v[z->count - 1] == -(float)(z->lo + z->count - 1) && ck.master[1] == (float)(z->lo + 1) + 0.5f &&
             float_from_bf16(ck.params[n - 1]) == (float)((n - 1) % 64);
        if (rc == 1) checkpoint_free(&ck);
    }
    test_check(ok, "rank r of 2 at -z 1 loads its slice's master, m, v (and every parameter)%s%s", ok ? "" : ": ",
               ok ? "" : err);
    // another shape: an error that names both values, never a fresh start
    struct { int rank, nproc, zero; const char *message; } bad[] = {
        {0, 1, 1, "written by 2 processes, this run has 1 (each process resumes its own state file: run 2)"},
        {0, 3, 1, "written by 2 processes, this run has 3"},
        {2, 3, 1, "written by 2 processes, this run has 3"},
        {0, 2, 0, "written with -z 1 (ZeRO stage 1), this run has -z 0 (the optimizer state's layout differs: "
                  "resume with -z 1)"},
        {0, 1, 0, "written by 2 processes, this run has 1 (each process resumes its own state file: run 2); written "
                  "with -z 1 (ZeRO stage 1), this run has -z 0"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const int rc = checkpoint_load_checked(dir, spec_of(&c), bad[i].rank, bad[i].nproc, bad[i].zero, NULL, &ck, err,
                                               sizeof(err));
        test_check(rc < 0 && contains(err, bad[i].message) && contains(err, "cannot resume checkpoint 20"),
                   "rank %d of %d at -z %d: %s", bad[i].rank, bad[i].nproc, bad[i].zero, err);
        if (rc == 1) checkpoint_free(&ck);
    }
    // an older complete checkpoint of this run's shape does not hide a newer one of another shape
    clear_dir(dir);
    make_dir(dir, sizeof(dir), "zero");
    zero_ckpt_write(dir, &c, 10, 1, 0, 1, -1);
    zero_ckpt_write(dir, &c, 20, 2, 1, 1, -1);
    int rc = checkpoint_load_checked(dir, spec_of(&c), 0, 1, 0, NULL, &ck, err, sizeof(err));
    test_check(rc < 0 && contains(err, "checkpoint 20") && contains(err, "written by 2 processes, this run has 1"),
               "a -z 0 checkpoint of step 10 and a newer -z 1 one of 2 processes: a 1-process run refuses: %s", err);
    if (rc == 1) checkpoint_free(&ck);
    // a newer step that only rank 0 finished (no marker: not a checkpoint) is passed over
    clear_dir(dir);
    make_dir(dir, sizeof(dir), "zero");
    zero_ckpt_write(dir, &c, 10, 2, 1, 1, -1);
    zero_ckpt_write(dir, &c, 20, 2, 1, 1, -1);
    checkpoint_state_path(path, sizeof(path), dir, 20, 1);
    remove(path);
    rc = checkpoint_load_checked(dir, spec_of(&c), 1, 2, 1, NULL, &ck, err, sizeof(err));
    test_check(rc == 1 && ck.step == 10 && ck.state.m[0] == (float)z1.lo,
               "step 20 without rank 1's state: rank 1 resumes step 10 (the same shape)%s", rc < 0 ? err : "");
    if (rc == 1) checkpoint_free(&ck);
    // a state without master weights (llm.c -w 0): the master slice is the rank's parameters widened
    clear_dir(dir);
    make_dir(dir, sizeof(dir), "zero");
    zero_ckpt_write(dir, &c, 30, 2, 1, 0, -1);
    rc = checkpoint_load_checked(dir, spec_of(&c), 1, 2, 1, NULL, &ck, err, sizeof(err));
    ok = rc == 1;
    for (size_t i = 0; ok && i < z1.count; i++) ok = ck.master[i] == (float)((z1.lo + i) % 64);
    test_check(ok, "-z 1 without master weights: rank 1's master is its slice of the parameters widened%s",
               rc < 0 ? err : "");
    if (rc == 1) checkpoint_free(&ck);
    // a state file of the wrong share size is refused
    clear_dir(dir);
    make_dir(dir, sizeof(dir), "zero");
    zero_ckpt_write(dir, &c, 40, 2, 1, 1, 1);
    rc = checkpoint_load_checked(dir, spec_of(&c), 1, 2, 1, NULL, &ck, err, sizeof(err));
    test_check(rc < 0 && contains(err, "trailing bytes"), "rank 1's state one float longer than its slice: %s", err);
    if (rc == 1) checkpoint_free(&ck);
    // a bad ZeRO stage in the header
    checkpoint_state_path(path, sizeof(path), dir, 40, 0);
    FILE *f = fopen(path, "r+b");
    const int32_t two = 2;
    if (f != NULL) {
        fseek(f, 6 * 4, SEEK_SET);
        fwrite(&two, 4, 1, f);
        fclose(f);
    }
    rc = checkpoint_load_checked(dir, spec_of(&c), 0, 2, 1, NULL, &ck, err, sizeof(err));
    test_check(rc < 0 && contains(err, "bad ZeRO stage 2 (0 or 1)"), "a state whose header says ZeRO stage 2: %s", err);
    if (rc == 1) checkpoint_free(&ck);
    clear_dir(dir);
}

// ----------------------------------------------------------------------------
// bf16 AdamW moments (-bm 1) in llm.c's state file: fp32 there, marked in header[7]

// Sets header field k (an int32) of the state file at path.
static void state_poke(const char *path, int k, int32_t value) {
    FILE *f = fopen(path, "r+b");
    if (f == NULL) return;
    fseek(f, k * 4, SEEK_SET);
    fwrite(&value, 4, 1, f);
    fclose(f);
}

static void test_bf16_moment_states(void) {
    printf("-- checkpoint.h: bf16 AdamW moments (-bm 1) in the state file, resumed either way\n");
    char err[1024] = "", note[1024] = "", dir[256], path[CHECKPOINT_PATH_MAX];
    const GPT2Config c = small_config();
    const size_t n = gpt2_num_parameters(&c);
    // bf16 values of every kind: zeros of both signs, subnormals, the largest finite, spread
    // exponents; and a master that is not bf16
    uint64_t rng = 0x5eedbf16ULL;
    TestCkpt k;
    ckpt_make(&k, &c, 1, 20, 1, NULL);
    for (size_t i = 0; i < n; i++) {
        rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
        const uint16_t bits = (uint16_t)(rng >> 40);
        const uint16_t special[] = {0x0000, 0x8000, 0x0001, 0x807f, 0x7f7f, 0x3f80};
        const uint16_t mb = i < 6 ? special[i] : (uint16_t)(bits & 0xff7f);  // finite (an even exponent), both signs
        k.st.m[i] = float_from_bf16(mb);
        k.st.v[i] = float_from_bf16((uint16_t)(mb & 0x7fff));  // v >= 0
        k.st.master_weights[i] = (float)i * 1.0001f + 0.3f;
    }
    k.st.bf16_moments = 1;
    float *m_bf = (float *)malloc(n * sizeof(float)), *v_bf = (float *)malloc(n * sizeof(float));
    memcpy(m_bf, k.st.m, n * sizeof(float));
    memcpy(v_bf, k.st.v, n * sizeof(float));

    // the round trip: header[7] = 1, m and v bitwise as written, the file fp32 (llm.c's size)
    make_dir(dir, sizeof(dir), "bm");
    test_check(ckpt_write(&k, dir, 0) == 0, "a state with bf16 moments written");
    checkpoint_state_path(path, sizeof(path), dir, 20, 0);
    TrainingState head;
    struct stat sb;
    memset(&sb, 0, sizeof(sb));
    int32_t h7 = -1;
    FILE *f = fopen(path, "rb");
    if (f != NULL) {
        if (fseek(f, 7 * 4, SEEK_SET) != 0 || fread(&h7, 4, 1, f) != 1) h7 = -1;
        fclose(f);
    }
    const int sized = stat(path, &sb) == 0 && (size_t)sb.st_size == STATE_HEADER_BYTES + 3 * n * sizeof(float);
    test_check(state_peek_checked(path, &head, err, sizeof(err)) == 0 && head.bf16_moments == 1 && h7 == 1 && sized,
               "its header says bf16 moments (header[7] = %d), its buffers are llm.c's fp32 (%lld bytes)", (int)h7,
               (long long)sb.st_size);
    Checkpoint ck;
    int rc = checkpoint_load_checked(dir, spec_of(&c), 0, 1, 0, NULL, &ck, err, sizeof(err));
    int ok = rc == 1 && ck.state.bf16_moments == 1 && memcmp(ck.state.m, m_bf, n * 4) == 0 &&
             memcmp(ck.state.v, v_bf, n * 4) == 0;
    const int noted = rc == 1 ? checkpoint_moments_for_run(&ck, 1, note, sizeof(note)) : -1;
    ok = ok && noted == 0 && note[0] == 0 && ck.state.bf16_moments == 1 && memcmp(ck.state.m, m_bf, n * 4) == 0 &&
         memcmp(ck.state.v, v_bf, n * 4) == 0;
    test_check(ok, "resumed with -bm 1: m, v bitwise as written (zeros, subnormals, the largest bf16 included), no "
               "note%s%s", rc < 0 ? ": " : "", rc < 0 ? err : note);
    if (rc == 1) checkpoint_free(&ck);
    // resumed with -bm 0: the same values, now fp32 moments, and a note
    rc = checkpoint_load_checked(dir, spec_of(&c), 0, 1, 0, NULL, &ck, err, sizeof(err));
    ok = rc == 1 && checkpoint_moments_for_run(&ck, 0, note, sizeof(note)) == 1 && ck.state.bf16_moments == 0 &&
         memcmp(ck.state.m, m_bf, n * 4) == 0 && memcmp(ck.state.v, v_bf, n * 4) == 0 &&
         contains(note, "checkpoint 20's AdamW m, v were kept in bf16 (written with -bm 1): this run (-bm 0) goes on "
                        "with them in fp32 (exact)");
    test_check(ok, "resumed with -bm 0: the same values as fp32 moments, with a note: %s", rc < 0 ? err : note);
    if (rc == 1) checkpoint_free(&ck);

    // fp32 moments resumed with -bm 1: rounded to nearest (ties to even), the note counts the changes
    TestCkpt f32;
    ckpt_make(&f32, &c, 1, 30, 1, NULL);
    size_t want_changed = 0;
    for (size_t i = 0; i < n; i++) {
        f32.st.m[i] = i % 3 == 0 ? m_bf[i] : (float)i * 0.001f + 1e-3f;  // a third already bf16 values
        f32.st.v[i] = i % 5 == 0 ? v_bf[i] : (float)i * 3.3e-5f;
        for (int b = 0; b < 2; b++) {
            const float x = b == 0 ? f32.st.m[i] : f32.st.v[i], r = float_from_bf16(bf16_from_float(x));
            want_changed += memcmp(&x, &r, 4) != 0;
        }
    }
    ckpt_write(&f32, dir, 0);
    rc = checkpoint_load_checked(dir, spec_of(&c), 0, 1, 0, NULL, &ck, err, sizeof(err));
    ok = rc == 1 && ck.step == 30 && ck.state.bf16_moments == 0 &&
         checkpoint_moments_for_run(&ck, 1, note, sizeof(note)) == 1 && ck.state.bf16_moments == 1;
    for (size_t i = 0; ok && i < n; i++)
        ok = ck.state.m[i] == float_from_bf16(bf16_from_float(f32.st.m[i])) &&
             ck.state.v[i] == float_from_bf16(bf16_from_float(f32.st.v[i]));
    char counted[128];
    snprintf(counted, sizeof(counted), "(%zu of this rank's %zu values changed)", want_changed, 2 * n);
    const char *rounded = "checkpoint 30's AdamW m, v are fp32 (written without -bm 1): rounded to the nearest bf16 "
                          "for -bm 1";
    test_check(ok && want_changed > n && contains(note, rounded) && contains(note, counted),
               "fp32 moments resumed with -bm 1: each rounded to the nearest bf16, with a note: %s",
               rc < 0 ? err : note);
    if (rc == 1) checkpoint_free(&ck);
    rc = checkpoint_load_checked(dir, spec_of(&c), 0, 1, 0, NULL, &ck, err, sizeof(err));
    ok = rc == 1 && checkpoint_moments_for_run(&ck, 0, note, sizeof(note)) == 0 && note[0] == 0 &&
         memcmp(ck.state.m, f32.st.m, n * 4) == 0;
    test_check(ok, "fp32 moments resumed with -bm 0: as written, no note%s%s", rc < 0 ? ": " : "", rc < 0 ? err : note);
    if (rc == 1) checkpoint_free(&ck);

    // a file that says bf16 and holds another value is corrupt: refused, naming the element
    checkpoint_state_path(path, sizeof(path), dir, 30, 0);
    state_poke(path, 7, 1);
    rc = checkpoint_load_checked(dir, spec_of(&c), 0, 1, 0, NULL, &ck, err, sizeof(err));
    test_check(rc < 0 && contains(err, "the moments are marked bf16 (header[7] = 1), and m[1] = ") &&
               contains(err, "is not a bf16 value (a corrupt file?)") && contains(err, "state_00000030_00000.bin"),
               "a state marked bf16 holding an fp32 m: refused: %s", err);
    if (rc == 1) checkpoint_free(&ck);
    state_poke(path, 7, 2);
    rc = checkpoint_load_checked(dir, spec_of(&c), 0, 1, 0, NULL, &ck, err, sizeof(err));
    test_check(rc < 0 && contains(err, "bad moment precision 2 in header[7] (0 fp32, 1 bf16)"),
               "header[7] = 2: refused: %s", err);
    if (rc == 1) checkpoint_free(&ck);
    // the writer refuses to mark bf16 what is not
    f32.st.bf16_moments = 1;
    checkpoint_state_path(path, sizeof(path), dir, 40, 0);
    f32.st.step = 40;
    rc = state_write_checked(path, &f32.st, 0, err, sizeof(err));
    test_check(rc < 0 && contains(err, "m[1] = ") && contains(err, "is not a bf16 value (not written)") &&
               !file_exists(path), "writing fp32 moments marked bf16: refused, no file: %s", err);
    clear_dir(dir);

    // ZeRO-1: each rank's slice of bf16 moments round trips (2 processes, boundaries inside tensors)
    const GPT2Config zc = {64, 100, 128, 2, 2, 16};
    const size_t zn = gpt2_num_parameters(&zc);
    make_dir(dir, sizeof(dir), "bmzero");
    ok = zero_ckpt_write_moments(dir, &zc, 20, 2, 1, 1, -1, 1) == 0;
    for (int r = 0; r < 2 && ok; r++) {
        ZeroLayout z;
        zero_layout(&z, zn, 2, r, 1, err, sizeof(err));
        rc = checkpoint_load_checked(dir, spec_of(&zc), r, 2, 1, NULL, &ck, err, sizeof(err));
        ok = rc == 1 && ck.state.bf16_moments == 1 && checkpoint_moments_for_run(&ck, 1, note, sizeof(note)) == 0 &&
             ck.state.num_parameters == z.count;
        for (size_t i = 0; ok && i < z.count; i++)
            ok = ck.state.m[i] == float_from_bf16(bf16_from_float((float)(z.lo + i))) &&
                 ck.state.v[i] == float_from_bf16(bf16_from_float(-(float)(z.lo + i)));
        if (rc == 1) checkpoint_free(&ck);
    }
    test_check(ok, "-z 1 -bm 1 over 2 processes: each rank resumes its slice's bf16 m, v bitwise%s%s", ok ? "" : ": ",
               ok ? "" : err);
    clear_dir(dir);
    ckpt_free(&k);
    ckpt_free(&f32);
    free(m_bf);
    free(v_bf);
}

// ----------------------------------------------------------------------------
// rendezvous.h: the fs and tcp link, between forked processes (no NCCL: a made-up id)

typedef struct {
    int rank;
    int nproc_claim;  // the -pn this process says (0: the run's)
    int delay_ms;     // before it starts
    int fail;         // 1: exit(1) after the join, 2: after the id
    int kill;         // SIGKILL after the id
    int work_ms;      // "training" after the id
} LinkRole;

static int free_port(void) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    int port = 0;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port > 0 ? port : 20000 + (int)(getpid() % 20000);
}

static void make_id(unsigned char *id, int tag) {
    for (int i = 0; i < RV_ID_BYTES; i++) id[i] = (unsigned char)(i * 7 + tag);
}

// One process of a link test (a child): its output in log; exit 0 done, 1 failed (its own or
// another's failure), 3 no join, 4 no id, 5 a wrong id.
static void link_child(int method, int nproc, int port, const char *dir, int timeout_s, int tag, const LinkRole *r,
                       const char *log) {
    const int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
    if (r->delay_ms > 0) rv_sleep_us(r->delay_ms * 1000L);
    LaunchPlan p;
    memset(&p, 0, sizeof(p));
    p.method = method;
    p.nproc = r->nproc_claim > 0 ? r->nproc_claim : nproc;
    p.rank = r->rank;
    p.timeout_s = timeout_s;
    snprintf(p.host, sizeof(p.host), "127.0.0.1");
    p.port = port;
    snprintf(p.fs_dir, sizeof(p.fs_dir), "%s", dir ? dir : "");
    char err[1024];
    Rendezvous rv;  // this child's: it ends in exit, never returns
    if (rv_init(&rv, &p, err, sizeof(err)) != 0 || rv_join(&rv, &p, err, sizeof(err)) != 0) {
        fprintf(stderr, "join failed: %s\n", err);
        _exit(3);
    }
    if (r->fail == 1) {
        fprintf(stderr, "Error: link test: rank %d fails after the join\n", r->rank);
        exit(1);
    }
    unsigned char id[RV_ID_BYTES], want[RV_ID_BYTES];
    make_id(want, tag);
    memset(id, 0, sizeof(id));
    if (r->rank == 0) memcpy(id, want, RV_ID_BYTES);
    if (rv_share_id(&rv, id, err, sizeof(err)) != 0) {  // as the trainer's comm_init: rank 0's id to every rank
        fprintf(stderr, "Error: %s\n", err);
        exit(4);
    }
    if (memcmp(id, want, RV_ID_BYTES) != 0) {
        fprintf(stderr, "a wrong id (tag %d)\n", id[0]);
        rv_finish(&rv);
        _exit(5);
    }
    if (r->fail == 2) {
        fprintf(stderr, "Error: link test: rank %d fails after the id\n", r->rank);
        exit(1);
    }
    if (r->kill) raise(SIGKILL);
    rv_sleep_us(r->work_ms * 1000L);
    rv_finish(&rv);
    printf("done\n");
    exit(0);
}

// Runs the roles, one child each; their exit codes and outputs; the seconds until the last ended.
static double run_link(int method, int port, const char *dir, int timeout_s, int tag, const LinkRole *roles, int n,
                       int *codes, char (*outs)[2048]) {
    pid_t pids[8];
    char log[8][300];
    const double t0 = rv_now();
    for (int i = 0; i < n; i++) {
        snprintf(log[i], sizeof(log[i]), "%s/link_%d.log", tmp_dir, i);
        fflush(stdout);
        fflush(stderr);
        pids[i] = fork();
        if (pids[i] == 0) link_child(method, n, port, dir, timeout_s, tag, &roles[i], log[i]);
    }
    for (int i = 0; i < n; i++) {
        int status = 0;
        waitpid(pids[i], &status, 0);
        codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    }
    const double secs = rv_now() - t0;
    for (int i = 0; i < n; i++) {
        outs[i][0] = 0;
        FILE *f = fopen(log[i], "rb");
        if (f != NULL) {
            const size_t k = fread(outs[i], 1, 2047, f);
            outs[i][k] = 0;
            fclose(f);
        }
        for (char *c = outs[i]; *c; c++)
            if (*c == '\n') *c = '|';
        remove(log[i]);
    }
    return secs;
}

static void test_link_tcp(void) {
    printf("-- rendezvous.h: the tcp link (forked processes on 127.0.0.1)\n");
    int codes[4];
    char outs[4][2048];
    LinkRole ok3[3] = {{0, 0, 0, 0, 0, 200}, {1, 0, 0, 0, 0, 100}, {2, 0, 300, 0, 0, 0}};
    double t = run_link(LAUNCH_TCP, free_port(), NULL, 20, 11, ok3, 3, codes, outs);
    test_check(codes[0] == 0 && codes[1] == 0 && codes[2] == 0 && contains(outs[0], "done") && contains(outs[2], "done"),
               "3 processes join (rank 2 late), every one gets rank 0's id, all end cleanly (%.1f s): %d %d %d | %.200s",
               t, codes[0], codes[1], codes[2], outs[2]);

    LinkRole fail2[3] = {{0, 0, 0, 0, 0, 20000}, {1, 0, 0, 0, 0, 20000}, {2, 0, 0, 2, 0, 0}};
    t = run_link(LAUNCH_TCP, free_port(), NULL, 20, 12, fail2, 3, codes, outs);
    test_check(codes[0] == 1 && codes[1] == 1 && codes[2] == 1 && t < 5 &&
               contains(outs[0], "rank 2 of 3 stopped the run") && contains(outs[0], "rank 2 fails after the id") &&
               contains(outs[1], "rank 2 of 3 stopped the run") && contains(outs[1], "rank 2 fails after the id"),
               "rank 2 exits 1 mid-run: ranks 0 and 1 (busy for 20 s) exit 1 with its message in %.1f s | %.300s", t,
               outs[1]);

    LinkRole fail0[3] = {{0, 0, 0, 1, 0, 0}, {1, 0, 0, 0, 0, 20000}, {2, 0, 0, 0, 0, 20000}};
    t = run_link(LAUNCH_TCP, free_port(), NULL, 20, 13, fail0, 3, codes, outs);
    test_check(codes[0] == 1 && codes[1] == 1 && codes[2] == 1 && t < 5 && contains(outs[2], "rank 0 of 3") &&
               contains(outs[2], "rank 0 fails after the join"),
               "rank 0 fails before sending the id: the others (waiting for it) exit 1 with its message in %.1f s | %.300s",
               t, outs[2]);

    LinkRole kill1[3] = {{0, 0, 0, 0, 0, 20000}, {1, 0, 0, 0, 1, 0}, {2, 0, 0, 0, 0, 20000}};
    t = run_link(LAUNCH_TCP, free_port(), NULL, 20, 14, kill1, 3, codes, outs);
    test_check(codes[0] == 1 && codes[1] == 128 + SIGKILL && codes[2] == 1 && t < 5 &&
               contains(outs[0], "rank 1 of 3 stopped the run") && contains(outs[0], "without a message") &&
               contains(outs[2], "rank 1 of 3 stopped the run"),
               "rank 1 killed (SIGKILL, no message): the others exit 1 in %.1f s | %.300s", t, outs[2]);

    LinkRole lonely[1] = {{1, 2, 0, 0, 0, 0}};
    t = run_link(LAUNCH_TCP, free_port(), NULL, 1, 15, lonely, 1, codes, outs);
    test_check(codes[0] == 3 && t < 5 && contains(outs[0], "rank 0 did not answer at 127.0.0.1") &&
               contains(outs[0], "within 1 s"), "no rank 0: rank 1 gives up after TRAIN_COMM_TIMEOUT | %.300s", outs[0]);
    LinkRole alone0[1] = {{0, 3, 0, 0, 0, 0}};
    t = run_link(LAUNCH_TCP, free_port(), NULL, 1, 15, alone0, 1, codes, outs);
    test_check(codes[0] == 3 && t < 5 && contains(outs[0], "1 of 3 processes came") && contains(outs[0], "missing ranks 1, 2"),
               "nobody else comes: rank 0 gives up and names the missing ranks | %.300s", outs[0]);
    LinkRole mismatch[2] = {{0, 0, 0, 0, 0, 0}, {1, 3, 0, 0, 0, 0}};
    t = run_link(LAUNCH_TCP, free_port(), NULL, 5, 16, mismatch, 2, codes, outs);
    test_check(codes[0] == 3 && codes[1] == 3 && contains(outs[0], "rank 1 has -pn 3, and rank 0 has -pn 2") &&
               contains(outs[1], "rank 0 refused it: rank 1 has -pn 3"),
               "different -pn: both stop, saying so | %.200s", outs[1]);
    LinkRole twice[3] = {{0, 0, 0, 0, 0, 0}, {1, 0, 0, 0, 0, 0}, {1, 0, 200, 0, 0, 0}};
    t = run_link(LAUNCH_TCP, free_port(), NULL, 5, 17, twice, 3, codes, outs);
    test_check(codes[0] == 3 && contains(outs[0], "two processes say they are rank 1"),
               "-pr 1 twice: rank 0 says so | %.200s", outs[0]);
}

// an earlier run's files in dir: an id of tag 99 for 3 processes, its hellos and acks
static void write_stale_fs(const char *dir) {
    char path[512], text[1024];
    const unsigned long long run = 0x1234567890abcdefULL, n1 = 0x1111, n2 = 0x2222;
    unsigned char id[RV_ID_BYTES];
    make_id(id, 99);
    size_t k = (size_t)snprintf(text, sizeof(text), "train_gpt fs 1\n%016llx 3\n%016llx %016llx\n", run, n1, n2);
    for (int i = 0; i < RV_ID_BYTES; i++) k += (size_t)snprintf(text + k, sizeof(text) - k, "%02x", id[i]);
    snprintf(text + k, sizeof(text) - k, "\n");
    snprintf(path, sizeof(path), "%s/train_gpt_fs.run", dir);
    rv_write_file(path, text);
    for (int r = 1; r <= 2; r++) {
        snprintf(path, sizeof(path), "%s/train_gpt_fs.hello.%d", dir, r);
        snprintf(text, sizeof(text), "%016llx 3\n", r == 1 ? n1 : n2);
        rv_write_file(path, text);
        snprintf(path, sizeof(path), "%s/train_gpt_fs.ack.%d", dir, r);
        snprintf(text, sizeof(text), "%016llx %016llx\n", run, r == 1 ? n1 : n2);
        rv_write_file(path, text);
    }
}

static void test_link_fs(void) {
    printf("-- rendezvous.h: the fs link (forked processes, one directory)\n");
    char dir[256];
    int codes[4];
    char outs[4][2048];
    make_dir(dir, sizeof(dir), "fs");
    write_stale_fs(dir);
    LinkRole late0[3] = {{0, 0, 500, 0, 0, 100}, {1, 0, 0, 0, 0, 100}, {2, 0, 0, 0, 0, 100}};
    double t = run_link(LAUNCH_FS, 0, dir, 20, 21, late0, 3, codes, outs);
    test_check(codes[0] == 0 && codes[1] == 0 && codes[2] == 0,
               "an earlier run's id, hellos and acks in -pf, rank 0 starting 0.5 s after the others: they wait for "
               "this run's id and take it, not the stale one (%.1f s): %d %d %d | %.200s", t, codes[0], codes[1],
               codes[2], outs[1]);
    clear_dir(dir);
    make_dir(dir, sizeof(dir), "fs");
    write_stale_fs(dir);
    LinkRole late2[3] = {{0, 0, 0, 0, 0, 100}, {1, 0, 0, 0, 0, 100}, {2, 0, 600, 0, 0, 100}};
    t = run_link(LAUNCH_FS, 0, dir, 20, 22, late2, 3, codes, outs);
    test_check(codes[0] == 0 && codes[1] == 0 && codes[2] == 0,
               "rank 0 first, reading rank 2's stale hello until rank 2 comes 0.6 s later: all get this run's id "
               "(%.1f s): %d %d %d | %.200s", t, codes[0], codes[1], codes[2], outs[2]);
    clear_dir(dir);
    make_dir(dir, sizeof(dir), "fs");
    LinkRole fail1[3] = {{0, 0, 0, 0, 0, 20000}, {1, 0, 0, 2, 0, 0}, {2, 0, 0, 0, 0, 20000}};
    t = run_link(LAUNCH_FS, 0, dir, 20, 23, fail1, 3, codes, outs);
    test_check(codes[0] == 1 && codes[1] == 1 && codes[2] == 1 && t < 5 &&
               contains(outs[0], "rank 1 of 3 stopped the run") && contains(outs[0], "rank 1 fails after the id") &&
               contains(outs[2], "rank 1 of 3 stopped the run") && contains(outs[2], "rank 1 fails after the id"),
               "rank 1 exits 1 mid-run: ranks 0 and 2 exit 1 with its message in %.1f s | %.300s", t, outs[2]);
    clear_dir(dir);
    make_dir(dir, sizeof(dir), "fs");
    LinkRole alone[1] = {{2, 3, 0, 0, 0, 0}};
    t = run_link(LAUNCH_FS, 0, dir, 1, 24, alone, 1, codes, outs);
    test_check(codes[0] == 3 && t < 5 && contains(outs[0], "no word from rank 0"),
               "no rank 0: rank 2 gives up after TRAIN_COMM_TIMEOUT | %.200s", outs[0]);
    LinkRole alone0[1] = {{0, 3, 0, 0, 0, 0}};
    t = run_link(LAUNCH_FS, 0, dir, 1, 24, alone0, 1, codes, outs);
    test_check(codes[0] == 3 && t < 5 && contains(outs[0], "ranks 1, 2 did not join"),
               "nobody else: rank 0 gives up naming the missing ranks | %.200s", outs[0]);
    clear_dir(dir);
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

// Two trainer processes (-pn 2 -pi <init>, each with its own extra flags), started together;
// their exit codes and outputs.
static void run_trainer_pair(const char *bin, const char *common, const char *args0, const char *args1, int *rc0,
                             int *rc1, char *out0, char *out1, size_t out_len) {
    char cmd[4096], log0[300], log1[300], codes[300];
    tmp_path(log0, sizeof(log0), "pair0.out");
    tmp_path(log1, sizeof(log1), "pair1.out");
    tmp_path(codes, sizeof(codes), "pair.codes");
    snprintf(cmd, sizeof(cmd), "%s %s -pn 2 -pr 1 %s > %s 2>&1 & %s %s -pn 2 -pr 0 %s > %s 2>&1; echo $? > %s; "
             "wait $!; echo $? >> %s", bin, common, args1, log1, bin, common, args0, log0, codes, codes);
    if (system(cmd) == -1) return;
    char text[64] = "";
    FILE *f = fopen(codes, "rb");
    if (f != NULL) {
        text[fread(text, 1, sizeof(text) - 1, f)] = 0;
        fclose(f);
    }
    if (sscanf(text, "%d %d", rc0, rc1) != 2) *rc0 = *rc1 = -1;
    const char *logs[2] = {log0, log1};
    char *outs[2] = {out0, out1};
    for (int i = 0; i < 2; i++) {
        outs[i][0] = 0;
        f = fopen(logs[i], "rb");
        if (f != NULL) {
            outs[i][fread(outs[i], 1, out_len - 1, f)] = 0;
            fclose(f);
        }
        for (char *c = outs[i]; *c; c++)
            if (*c == '\n') *c = '|';
        remove(logs[i]);
    }
    remove(codes);
}

// The -p flags against what the binary was built with (its -h says), and, with NCCL, two
// processes of which one fails on a bad file: the other must stop with that message.
static void test_trainer_processes(const char *bin) {
    char out[8192], out1[8192], args[512];
    run_trainer(bin, "-h", out, sizeof(out));
    const int nccl = contains(out, "This build: several GPUs with NCCL"), mpi = contains(out, "-pi mpi (mpirun)");
    printf("-- %s: processes (%s)\n", bin, mpi ? "NCCL and MPI" : nccl ? "NCCL, no MPI" : "one GPU");
    test_check(contains(out, "This build: "), "-h says what the build runs");
    if (!nccl) {
        expect_trainer_error(bin, "-pn 2 -pr 0 -pi tcp -ps 127.0.0.1", "2 processes: this trainer was built for one GPU");
        expect_trainer_error(bin, "-pi mpi", "-pi mpi: this trainer was built for one GPU");
        return;
    }
    if (!mpi) expect_trainer_error(bin, "-pi mpi", "-pi mpi: this trainer was built without MPI");
    char env_bin[600];
    snprintf(env_bin, sizeof(env_bin), "TRAIN_COMM_TIMEOUT=1 %s", bin);
    snprintf(args, sizeof(args), "-pn 2 -pr 1 -pi tcp -ps 127.0.0.1:%d", free_port());
    expect_trainer_error(env_bin, args, "rank 0 did not answer at 127.0.0.1");
    char dir[256];
    make_dir(dir, sizeof(dir), "trainer_fs");
    snprintf(args, sizeof(args), "-pn 2 -pr 0 -pi fs -pf %s", dir);
    expect_trainer_error(env_bin, args, "ranks 1 did not join through -pf");
    snprintf(env_bin, sizeof(env_bin), "TRAIN_FAULT=0:1:boom %s", bin);
    expect_trainer_error(env_bin, "-x 1", "TRAIN_FAULT=0:1:boom: expected rank:step[:exit|cuda|kill]");

    // rank 1 fails on its data right after the join, while rank 0 (d12: ~1 s of initialisation)
    // is still on the host: rank 0 must stop with rank 1's message, both exit 1
    const char *inits[2] = {"tcp", "fs"};
    for (int i = 0; i < 2; i++) {
        char common[512];
        if (i == 0) snprintf(common, sizeof(common), "-e d12 -x 2 -pi tcp -ps 127.0.0.1:%d", free_port());
        else snprintf(common, sizeof(common), "-e d12 -x 2 -pi fs -pf %s", dir);
        int rc0 = -1, rc1 = -1;
        const double t0 = rv_now();
        run_trainer_pair(bin, common, "", "-j data/no_such_*.bin", &rc0, &rc1, out, out1, sizeof(out));
        const double t = rv_now() - t0;
        test_check(rc0 == 1 && rc1 == 1 && t < 30 && contains(out1, "no files match 'data/no_such_*.bin'") &&
                   contains(out, "rank 1 of 2 stopped the run") && contains(out, "no files match 'data/no_such_*.bin'"),
                   "-pi %s: rank 1's bad -j stops rank 0 too, with rank 1's message (exits %d %d, %.1f s) | %.300s",
                   inits[i], rc0, rc1, t, out);
    }
    clear_dir(dir);
}

static void test_trainer_binary(const char *bin) {
    printf("-- %s: bad command lines\n", bin);
    for (size_t k = 0; k < sizeof(bad_lines) / sizeof(bad_lines[0]); k++)
        expect_trainer_error(bin, bad_lines[k].args, bad_lines[k].message);
    test_trainer_processes(bin);
    char args[CHECKPOINT_PATH_MAX + 256], longdir[CHECKPOINT_PATH_MAX];
    memset(longdir, 'o', sizeof(longdir) - 1);
    longdir[CHECKPOINT_PATH_MAX - 20] = 0;
    snprintf(args, sizeof(args), "-e d6 -o %s", longdir);
    expect_trainer_error(bin, args, "checkpoint file names in it would not fit");
    longdir[CHECKPOINT_PATH_MAX - 60] = 0;  // checkpoint names fit, -hf 1's directories do not
    snprintf(args, sizeof(args), "-e d6 -hf 1 -o %s", longdir);
    expect_trainer_error(bin, args, "the Hugging Face directories in it (-hf 1) would not fit");
    // -tk: a tokenizer named on the command line must be there (the family's default may be missing)
    expect_trainer_error(bin, "-e d6 -tk /nonexistent/tokenizer.json", "/nonexistent/tokenizer.json");
    expect_trainer_error(bin, "-e d6 -tk /nonexistent/tokenizer.bin", "/nonexistent/tokenizer.bin");

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
    // the same model as a Hugging Face directory (-e DIR): read through its config.json
    char hf[256], hf_bad[256], hf_cfg[300];
    tmp_path(hf, sizeof(hf), "small_hf");
    tmp_path(hf_bad, sizeof(hf_bad), "small_hf_bad");
    ModelSpec hs;
    gpt2_spec(&c, &hs);
    uint16_t *bf = (uint16_t *)calloc(hs.num_parameters, sizeof(uint16_t));
    ok = hf_write_dir_checked(hf, &hs, bf, 0, NULL, 0, err, sizeof(err)) == 0 &&
         hf_write_dir_checked(hf_bad, &hs, bf, 0, NULL, 0, err, sizeof(err)) == 0;
    free(bf);
    snprintf(hf_cfg, sizeof(hf_cfg), "%s/config.json", hf_bad);
    FILE *fc = fopen(hf_cfg, "wb");
    if (fc != NULL) {
        fputs("{\"model_type\": \"gpt2\", \"architectures\": [\"GPT2LMHeadModel\"], \"n_layer\": 1}", fc);
        fclose(fc);
    }
    test_check(ok, "a Hugging Face directory of the small model%s%s", ok ? "" : ": ", ok ? "" : err);
    snprintf(args, sizeof(args), "-e %s -i %s -j %s -t 16", hf, shard, shard);
    expect_trainer_error(bin, args, "-t 16 exceeds the model's max_seq_len 8");
    snprintf(args, sizeof(args), "-e %s -i %s -j %s -t 8", hf_bad, shard, shard);
    expect_trainer_error(bin, args, "field 'n_embd' is missing");
    // the directory's tokenizer.json decodes samples (a malformed one: a note, not an error);
    // -hf 1 copies its tokenizer files, read up front: one that cannot be read stops the run
    char side[300], out_hf[256], hf_out[8192];
    snprintf(side, sizeof(side), "%s/tokenizer.json", hf);
    write_bytes(side, "{\"model\": 1", 11);
    snprintf(side, sizeof(side), "%s/merges.txt", hf);
    mkdir(side, 0777);
    make_dir(out_hf, sizeof(out_hf), "out_hf");
    snprintf(args, sizeof(args), "-e %s -i %s -j %s -b 2 -t 8 -hf 1 -o %s", hf, shard, shard, out_hf);
    run_trainer(bin, args, hf_out, sizeof(hf_out));
    test_check(contains(hf_out, "note: ") && contains(hf_out, "tokenizer.json") &&
                   contains(hf_out, "samples are decoded by the family's tokenizer"),
               "-e DIR with a malformed tokenizer.json: a note, the run goes on: %.300s", hf_out);
    expect_trainer_error(bin, args, "cannot open merges.txt");
    rmdir(side);
    hf_remove_flat_dir(hf);
    hf_remove_flat_dir(hf_bad);
    const char *common = "-b 2 -t 8 -v 0 -s 0 -y 1";
    snprintf(args, sizeof(args), "-e %s -i %s -j %s -o %s %s -x 10", model, shard, shard, dir, common);
    expect_trainer_error(bin, args, "the checkpoint resumed is at step 20 and the run ends at step 10 (-x)");
    snprintf(args, sizeof(args), "-e %s -i %s -j %s -o %s %s -x 30", model63, shard, shard, dir, common);
    expect_trainer_error(bin, args, "vocab_size 64 vs 63");
    // another ZeRO stage or process count: refused on the host, naming both values
    snprintf(args, sizeof(args), "-e %s -i %s -j %s -o %s %s -x 30 -z 1", model, shard, shard, dir, common);
    expect_trainer_error(bin, args, "written with -z 0 (ZeRO stage 0), this run has -z 1");
    char dir2[256];
    make_dir(dir2, sizeof(dir2), "run2");
    zero_ckpt_write(dir2, &c, 20, 2, 1, 1, -1);
    snprintf(args, sizeof(args), "-e %s -i %s -j %s -o %s %s -x 30 -z 1", model, shard, shard, dir2, common);
    expect_trainer_error(bin, args, "cannot resume checkpoint 20 in '/tmp/test_train_host_");
    expect_trainer_error(bin, args, "written by 2 processes, this run has 1 (each process resumes its own state file: run 2)");
    clear_dir(dir2);
    // the checkpoint's fp32 moments resumed with -bm 1: a note, once, before the GPU (then it
    // stops there, or trains on one)
    char out[8192];
    snprintf(args, sizeof(args), "-e %s -i %s -j %s -o %s %s -x 30 -bm 1", model, shard, shard, dir, common);
    run_trainer(bin, args, out, sizeof(out));
    for (char *p = out; *p; p++)
        if (*p == '\n') *p = '|';  // one line in the test log
    const char *bm_note = "note: checkpoint 20's AdamW m, v are fp32 (written without -bm 1): rounded to the nearest "
                          "bf16 for -bm 1 (0 of this rank's";
    const char *first = strstr(out, bm_note);
    test_check(first != NULL && strstr(first + 1, bm_note) == NULL && contains(out, "resumed from step 20"),
               "-y 1 -bm 1 on a checkpoint of fp32 moments: the note once (%.260s)", first != NULL ? first : out);
    snprintf(args, sizeof(args), "-e %s -i %s -j %s -o %s -b 2 -t 4 -s 0 -x 30", model, shard, shard, dir);
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
    test_launch_plan();
    test_bad_lines_parsed();
    test_gpt2();
    test_schedules_sampler_mfu();
    test_metrics_log();
    test_checkpoint_protocol();
    test_zero_layout();
    test_zero_llama();
    test_zero_checkpoints();
    test_bf16_moment_states();
    test_link_tcp();
    test_link_fs();
    if (argc > 1) test_trainer_binary(argv[1]);
    else printf("  (no trainer binary given: its command lines are not run)\n");
    if (rmdir(tmp_dir) != 0) printf("  (note: %s not empty, left in place)\n", tmp_dir);
    return test_summary();
}
