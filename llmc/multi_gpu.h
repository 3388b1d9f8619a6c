/*
multi_gpu.h - the processes of a run, one per GPU: how they find each other, the NCCL
communicator they share, and how one that fails stops them all. Every call is a no-op or the
identity for a single process, so the trainer's code is the same either way.

Launch (llm.c's -p flags):
  mpirun -np N ./train_gpt                    -pi mpi, the default under mpirun: MPI gives the
                                              ranks and broadcasts NCCL's id (a USE_MPI build)
  ./train_gpt -pn N -pr R -pi fs -pf DIR      rank 0 publishes the id in a file of DIR, a
                                              directory every process sees
  ./train_gpt -pn N -pr R -pi tcp -ps HOST    rank 0 listens on HOST:12345 (-ps HOST:PORT for
                                              another port) and sends the id to each rank
  srun ./train_gpt -pi tcp -ps HOST           -pn, -pr and the GPU from SLURM_NTASKS,
                                              SLURM_PROCID, SLURM_LOCALID (mpirun's OMPI_COMM_WORLD_*
                                              likewise when it only launches)
  -pg G: GPUs per host, the GPU being rank % G (default: the launcher's local id, else the rank).
Builds: MULTI_GPU (NCCL) runs several processes; USE_MPI (with it) adds -pi mpi. Without
MULTI_GPU the trainer runs one process, and a request for more is an error that says so.

Order in main(): multi_gpu_plan (flags and environment, no side effect), multi_gpu_init_processes
(MPI_Init under mpi), train_config_check, multi_gpu_join (fs, tcp: every process present, a
watcher thread started), the host's checks of files, then multi_gpu_device_checked and
cudaSetDevice, multi_gpu_init_comm (NCCL), training, multi_gpu_finish. Host sums and barriers
go through NCCL (a small device buffer), so they need no MPI. The gradients' and parameters'
collectives (all-reduce, reduce-scatter, all-gather, and a bucket's group of all-reduces or
reduces, llmc/zero.h), and those of the vocab-parallel LM head under -tp 1 (the all-gathers of
lnf and the targets, flce's all-reduces through multi_gpu_flce_comm, the reduce-scatter of
d(lnf)), are enqueued on the caller's stream without waiting; multi_gpu_wait waits.

fs without stale ids: rank 0 may find files of an earlier run in DIR. Each other rank writes a
fresh random nonce (train_gpt_fs.hello.<rank>), and takes rank 0's file (train_gpt_fs.run) only
when it lists that nonce, so an id written for an earlier run is never used; every file is
written to a temporary and renamed; rank 0 removes the id once the communicator exists. One run
per directory at a time. (On NFS a file can take the attribute cache's time, up to about a
minute, to be seen by another host: tcp learns of a failure at once.)

Failures, never a hang: every wait on another process polls (NCCL's asynchronous error and a
deadline, TRAIN_COMM_TIMEOUT seconds, default 300) instead of blocking; the communicator is
nonblocking. A process that exits before multi_gpu_finish (a bad file, a CUDA or NCCL error, a
non-finite loss, TRAIN_FAULT) tells the others on its way out (atexit): under tcp a message over
its connection to rank 0, which forwards it; under fs a file train_gpt_fs.abort.<run>; then
ncclCommAbort, and MPI_Abort under mpi (mpirun stops the others). The message carries the last
lines the process wrote to stderr (a tee on stderr from the join on). Each process's watcher
thread prints it and exits 1 as soon as it arrives; under tcp also when a connection closes
without a goodbye (a process killed or crashed); under fs a crash signal writes the abort file
too, and only a SIGKILL is left to the deadline.

TRAIN_FAULT=rank:step[:exit|cuda|kill] (a testing aid): that rank stops at the start of that
training step (1-based, as printed): exit(1) with a message (the default), a CUDA error through
the trainer's cudaCheck, or SIGKILL (no message at all).
*/
#ifndef LLMC_MULTI_GPU_H
#define LLMC_MULTI_GPU_H

#include "utils.h"  // first: it sets the POSIX feature macros

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../flce/flce.h"  // flce_comm: the LM head's collectives under -tp 1

#if defined(USE_MPI) && !defined(MULTI_GPU)
#error "USE_MPI (mpirun's ranks) needs MULTI_GPU (NCCL)"
#endif
#ifdef MULTI_GPU
#include <cuda_runtime.h>
#include <nccl.h>
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "the trainer needs NCCL 2.14 or later (nonblocking communicators)"
#endif
#endif
#ifdef USE_MPI
#include <mpi.h>
#endif

#include "zero.h"  // the gradient buckets' pieces

#define MG_MAX_PROCS 65536
#define MG_DEFAULT_PORT 12345
#define MG_DEFAULT_TIMEOUT_S 300
#define MG_ID_BYTES 128  // NCCL_UNIQUE_ID_BYTES
#define MG_MSG_MAX 1500  // a forwarded error message

enum { MG_SINGLE = 0, MG_MPI = 1, MG_FS = 2, MG_TCP = 3 };
enum { MG_FAULT_NONE = 0, MG_FAULT_EXIT = 1, MG_FAULT_CUDA = 2, MG_FAULT_KILL = 3 };

typedef struct {
    int rank, nproc, local_rank;  // local_rank: this process's GPU index on its host
    int method;                   // MG_SINGLE (0: what memset gives), MG_MPI, MG_FS, MG_TCP
    int timeout_s;                // the longest wait on another process (0: the default)
    int fault_rank, fault_step, fault_mode;  // TRAIN_FAULT (fault_step 0: none)
#ifdef MULTI_GPU
    int comm_ready;
    ncclComm_t comm;
    cudaStream_t stream;  // the host sums' (a small device buffer)
    cudaEvent_t done;
    double *dev_value, *host_value;
#endif
} MultiGpu;

// What the flags and the environment ask for; multi_gpu_plan fills it, touching nothing.
typedef struct {
    int method;               // MG_*; MG_SINGLE when there is one process
    int nproc, rank;          // fs, tcp: known now; mpi: from MPI_Init
    int local_rank;           // fs, tcp: the GPU index on this host
    int timeout_s;            // TRAIN_COMM_TIMEOUT
    int fault_rank, fault_step, fault_mode;  // TRAIN_FAULT
    char host[256];           // tcp: rank 0's address
    int port;
    char fs_dir[PATH_MAX];    // fs
    char why_mpi[96];         // mpi: what asked for it (for messages)
} MultiGpuPlan;

typedef const char *(*MultiGpuEnv)(const char *name);
static inline const char *multi_gpu_getenv(const char *name) { return getenv(name); }

// ----------------------------------------------------------------------------------------
// the plan: flags and environment, checked before anything else happens

// NAME from env as an integer in [min, max]: 1 and *out, 0 when unset, -1 with a message.
static inline int mg_env_int(MultiGpuEnv env, const char *name, long long min, long long max, int *out, char *err,
                             size_t err_len) {
    const char *v = env(name);
    if (v == NULL || v[0] == 0) return 0;
    char *end = NULL;
    errno = 0;
    const long long x = strtoll(v, &end, 10);
    if (end == NULL || *end != 0 || errno != 0 || x < min || x > max || v[0] == ' ') {
        llmc_set_error(err, err_len, "%s=%s: not an integer in [%lld, %lld]", name, v, min, max);
        return -1;
    }
    *out = (int)x;
    return 1;
}

// TRAIN_FAULT=rank:step[:exit|cuda|kill]: 0 (also when unset), or -1 with a message
static inline int multi_gpu_parse_fault(const char *v, int *rank, int *step, int *mode, char *err, size_t err_len) {
    *rank = *step = 0;
    *mode = MG_FAULT_NONE;
    if (v == NULL || v[0] == 0) return 0;
    char buf[64];
    const char *bad = "TRAIN_FAULT=%s: expected rank:step[:exit|cuda|kill] (rank >= 0, step >= 1; a testing aid)";
    if (strlen(v) >= sizeof(buf)) {
        llmc_set_error(err, err_len, bad, v);
        return -1;
    }
    snprintf(buf, sizeof(buf), "%s", v);
    char *colon1 = strchr(buf, ':');
    if (colon1 == NULL) {
        llmc_set_error(err, err_len, bad, v);
        return -1;
    }
    *colon1 = 0;
    char *s_step = colon1 + 1, *colon2 = strchr(s_step, ':');
    const char *s_mode = "exit";
    if (colon2 != NULL) {
        *colon2 = 0;
        s_mode = colon2 + 1;
    }
    char *end1 = NULL, *end2 = NULL;
    errno = 0;
    const long r = strtol(buf, &end1, 10), st = strtol(s_step, &end2, 10);
    const int m = strcmp(s_mode, "exit") == 0 ? MG_FAULT_EXIT : strcmp(s_mode, "cuda") == 0 ? MG_FAULT_CUDA
                : strcmp(s_mode, "kill") == 0 ? MG_FAULT_KILL : MG_FAULT_NONE;
    if (buf[0] == 0 || s_step[0] == 0 || *end1 != 0 || *end2 != 0 || errno != 0 || r < 0 || r >= MG_MAX_PROCS ||
        st < 1 || st > INT_MAX || m == MG_FAULT_NONE || buf[0] == '+' || s_step[0] == '+') {
        llmc_set_error(err, err_len, bad, v);
        return -1;
    }
    *rank = (int)r;
    *step = (int)st;
    *mode = m;
    return 0;
}

// -ps host[:port], [v6]:port: 0, or -1 with a message
static inline int mg_parse_server(const char *ps, char *host, size_t host_len, int *port, char *err, size_t err_len) {
    *port = MG_DEFAULT_PORT;
    const char *colon = NULL, *h = ps;
    size_t hl = strlen(ps);
    if (ps[0] == '[') {  // [v6 literal] or [v6]:port
        const char *close = strchr(ps, ']');
        if (close == NULL || (close[1] != 0 && close[1] != ':')) {
            llmc_set_error(err, err_len, "-ps %s: expected host, host:port or [IPv6]:port", ps);
            return -1;
        }
        h = ps + 1;
        hl = (size_t)(close - h);
        if (close[1] == ':') colon = close + 1;
    } else {
        colon = strchr(ps, ':');
        if (colon != NULL && strchr(colon + 1, ':') != NULL) colon = NULL;  // a bare IPv6 literal
        if (colon != NULL) hl = (size_t)(colon - ps);
    }
    if (hl == 0 || hl >= host_len) {
        llmc_set_error(err, err_len, "-ps %s: expected host, host:port or [IPv6]:port", ps);
        return -1;
    }
    memcpy(host, h, hl);
    host[hl] = 0;
    if (colon != NULL) {
        char *end = NULL;
        errno = 0;
        const long v = strtol(colon + 1, &end, 10);
        if (colon[1] == 0 || *end != 0 || errno != 0 || v < 1 || v > 65535 || colon[1] == '+' || colon[1] == '-') {
            llmc_set_error(err, err_len, "-ps %s: the port must be in [1, 65535]", ps);
            return -1;
        }
        *port = (int)v;
    }
    return 0;
}

// The size of the job an MPI launcher started this process in (0: none seen).
static inline int mg_launcher_size(MultiGpuEnv env, const char **name) {
    const char *names[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    for (int i = 0; i < 2; i++) {
        const char *v = env(names[i]);
        if (v != NULL && v[0] != 0) {
            *name = names[i];
            return atoi(v) > 0 ? atoi(v) : 1;
        }
    }
    const char *pmix = env("PMIX_RANK"), *ntasks = env("SLURM_NTASKS");
    if (pmix != NULL && pmix[0] != 0) {  // PMIx (srun --mpi=pmix, OpenMPI 5)
        *name = "PMIX_RANK";
        return ntasks != NULL && atoi(ntasks) > 0 ? atoi(ntasks) : 2;
    }
    return 0;
}

// This process's rank as its launcher numbers it (0 without one): who prints -h.
static inline int multi_gpu_env_rank(void) {
    const char *names[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"};
    for (int i = 0; i < 4; i++) {
        const char *v = getenv(names[i]);
        if (v != NULL && v[0] != 0) return atoi(v);
    }
    return 0;
}

// The flags -pn -pr -pg -pi -ps -pf (pn, pr: -1 unset; pg: 0 unset; strings: NULL unset) and
// the environment (env: NULL for getenv) as a plan. Checks every flag, their combinations and
// the environment's values, touching nothing beyond a stat of -pf. 0, or -1 with a message.
static inline int multi_gpu_plan(MultiGpuPlan *p, int pn, int pr, int pg, const char *pi, const char *ps,
                                 const char *pf, MultiGpuEnv env, char *err, size_t err_len) {
    memset(p, 0, sizeof(*p));
    if (env == NULL) env = multi_gpu_getenv;
    p->method = MG_SINGLE;
    p->nproc = 1;
    p->port = MG_DEFAULT_PORT;
    p->timeout_s = MG_DEFAULT_TIMEOUT_S;
    int method = -1;
    if (pi != NULL) {
        method = strcmp(pi, "mpi") == 0 ? MG_MPI : strcmp(pi, "fs") == 0 ? MG_FS : strcmp(pi, "tcp") == 0 ? MG_TCP : -2;
        if (method == -2) {
            llmc_set_error(err, err_len, "-pi %s: unknown init method (mpi, fs or tcp)", pi);
            return -1;
        }
    }
    if (ps != NULL && method != MG_TCP) {
        llmc_set_error(err, err_len, "-ps %s: only -pi tcp has a server address (-pi tcp -ps host[:port])", ps);
        return -1;
    }
    if (pf != NULL && method != MG_FS) {
        llmc_set_error(err, err_len, "-pf %s: only -pi fs has a shared directory (-pi fs -pf dir)", pf);
        return -1;
    }
    if (method == MG_TCP) {
        if (ps == NULL) {
            llmc_set_error(err, err_len, "-pi tcp needs -ps <address of rank 0's host>[:port]");
            return -1;
        }
        if (mg_parse_server(ps, p->host, sizeof(p->host), &p->port, err, err_len) != 0) return -1;
    }
    if (method == MG_FS) {
        struct stat sb;
        if (pf == NULL) {
            llmc_set_error(err, err_len, "-pi fs needs -pf <a directory every process shares>");
            return -1;
        }
        if (strlen(pf) > PATH_MAX - 64) {
            llmc_set_error(err, err_len, "-pf: a path of %zu characters is too long", strlen(pf));
            return -1;
        }
        if (stat(pf, &sb) != 0 || !S_ISDIR(sb.st_mode) || access(pf, W_OK | X_OK) != 0) {
            llmc_set_error(err, err_len, "-pf %s: %s", pf, stat(pf, &sb) != 0 ? strerror(errno)
                           : !S_ISDIR(sb.st_mode) ? "not a directory" : "not a directory this process can write to");
            return -1;
        }
        snprintf(p->fs_dir, sizeof(p->fs_dir), "%s", pf);
    }
    if (pr >= 0 && pn < 0) {
        llmc_set_error(err, err_len, "-pr %d needs -pn <the number of processes>", pr);
        return -1;
    }
    if (pn >= 0 && pr >= pn) {
        llmc_set_error(err, err_len, "-pr %d: the ranks of -pn %d processes are 0..%d", pr, pn, pn - 1);
        return -1;
    }
    if (mg_env_int(env, "TRAIN_COMM_TIMEOUT", 1, 604800, &p->timeout_s, err, err_len) < 0) return -1;
    if (multi_gpu_parse_fault(env("TRAIN_FAULT"), &p->fault_rank, &p->fault_step, &p->fault_mode, err, err_len) != 0)
        return -1;

    const char *lname = NULL;
    const int lsize = mg_launcher_size(env, &lname);
    int ntasks = 0;  // srun's tasks of this job step (a batch script's own environment has none)
    if (mg_env_int(env, "SLURM_STEP_NUM_TASKS", 1, MG_MAX_PROCS, &ntasks, err, err_len) < 0) return -1;
    if (method == MG_MPI || (method < 0 && lsize > 1)) {
        if (pn >= 0 || pr >= 0 || pg > 0) {
            const char *flag = pn >= 0 ? "-pn" : pr >= 0 ? "-pr" : "-pg";
            const int value = pn >= 0 ? pn : pr >= 0 ? pr : pg;
            llmc_set_error(err, err_len, "%s %d: under %s the ranks and GPUs come from MPI (drop -pn, -pr and -pg, or "
                           "give -pi fs or -pi tcp to use the launcher only to start the processes)", flag, value,
                           method == MG_MPI ? "-pi mpi" : "mpirun");
            return -1;
        }
        p->method = MG_MPI;
        p->nproc = lsize > 0 ? lsize : 1;
        if (method == MG_MPI) snprintf(p->why_mpi, sizeof(p->why_mpi), "-pi mpi");
        else snprintf(p->why_mpi, sizeof(p->why_mpi), "started by mpirun (%s=%s)", lname, env(lname));
    } else if (method < 0) {
        if (pn > 1) {
            llmc_set_error(err, err_len, "-pn %d: several processes need -pi fs -pf <dir> or -pi tcp -ps <host> (or "
                           "mpirun)", pn);
            return -1;
        }
        if (pn < 0 && ntasks > 1) {
            llmc_set_error(err, err_len, "this is one of %d Slurm tasks (SLURM_STEP_NUM_TASKS): give -pi tcp -ps "
                           "<host of task 0> or -pi fs -pf <shared dir> (or srun --mpi=pmix with an MPI build)", ntasks);
            return -1;
        }
    } else {  // fs, tcp: the ranks from the flags, else from the launcher
        int nproc = -1, rank = -1, local = -1;
        if (pn >= 0) {
            if (pn > 1 && pr < 0) {
                llmc_set_error(err, err_len, "-pn %d needs -pr <this process's rank, 0..%d>", pn, pn - 1);
                return -1;
            }
            nproc = pn;
            rank = pr < 0 ? 0 : pr;
        } else {
            const char *sets[3][3] = {{"SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID"},
                                      {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"},
                                      {"PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID"}};
            for (int k = 0; k < 3 && nproc < 0; k++) {
                int n = 0, r = 0, l = -1;
                const int has_n = mg_env_int(env, sets[k][0], 1, MG_MAX_PROCS, &n, err, err_len);
                const int has_r = mg_env_int(env, sets[k][1], 0, MG_MAX_PROCS - 1, &r, err, err_len);
                const int has_l = mg_env_int(env, sets[k][2], 0, MG_MAX_PROCS - 1, &l, err, err_len);
                if (has_n < 0 || has_r < 0 || has_l < 0) return -1;
                if (has_n == 0 || has_r == 0) continue;
                if (r >= n) {
                    llmc_set_error(err, err_len, "%s=%d and %s=%d: the rank is not below the count", sets[k][1], r,
                                   sets[k][0], n);
                    return -1;
                }
                nproc = n;
                rank = r;
                local = has_l ? l : -1;
            }
            if (nproc < 0) {
                llmc_set_error(err, err_len, "-pi %s needs -pn <processes> and -pr <rank> (or a launcher that gives "
                               "them: srun, mpirun)", pi);
                return -1;
            }
        }
        p->nproc = nproc;
        p->rank = rank;
        p->local_rank = pg > 0 ? rank % pg : local >= 0 ? local : rank;
        p->method = nproc > 1 ? method : MG_SINGLE;
    }
    if (p->fault_step > 0 && p->method != MG_MPI && p->fault_rank >= p->nproc) {
        llmc_set_error(err, err_len, "TRAIN_FAULT=%s: rank %d, and the run has %d process%s", env("TRAIN_FAULT"),
                       p->fault_rank, p->nproc, p->nproc > 1 ? "es" : "");
        return -1;
    }
    return 0;
}

// The plan against this build: 0, or -1 with what the build lacks and what to do instead.
static inline int multi_gpu_plan_check_build(const MultiGpuPlan *p, char *err, size_t err_len) {
#ifndef MULTI_GPU
    if (p->method != MG_SINGLE) {
        char what[128];
        if (p->method == MG_MPI) snprintf(what, sizeof(what), "%s", p->why_mpi);
        else snprintf(what, sizeof(what), "%d processes", p->nproc);
        llmc_set_error(err, err_len, "%s: this trainer was built for one GPU (NCCL was not found at build time, or "
                       "NO_MULTI_GPU=1): rebuild with NCCL to run several processes", what);
        return -1;
    }
#elif !defined(USE_MPI)
    if (p->method == MG_MPI) {
        llmc_set_error(err, err_len, "%s: this trainer was built without MPI (no OpenMPI headers at build time; "
                       "NO_USE_MPI=1?): start the processes with -pi tcp -ps <host> or -pi fs -pf <dir> (under mpirun "
                       "or srun the ranks come from its environment)", p->why_mpi);
        return -1;
    }
#endif
    (void)p;
    (void)err;
    (void)err_len;
    return 0;
}

// The build's multi-GPU support, one line for -h (test_train_host reads it).
static inline void multi_gpu_usage(FILE *out) {
#if defined(USE_MPI)
    fprintf(out, "This build: several GPUs with NCCL; -pi mpi (mpirun), fs and tcp.\n");
#elif defined(MULTI_GPU)
    fprintf(out, "This build: several GPUs with NCCL; -pi fs and tcp (no MPI: no -pi mpi).\n");
#else
    fprintf(out, "This build: one GPU (no NCCL): the -p flags can only describe one process.\n");
#endif
    fprintf(out, "Environment: TRAIN_COMM_TIMEOUT=<s> the longest wait on another process (default %d);\n"
                 "  TRAIN_FAULT=rank:step[:exit|cuda|kill] stops that rank at that step (a testing aid).\n",
            MG_DEFAULT_TIMEOUT_S);
}

// ----------------------------------------------------------------------------------------
// the link: how fs and tcp processes meet, exchange NCCL's id and learn of a failure

typedef struct {
    uint32_t magic, type;
    int32_t rank;
    uint32_t len;
} MgFrame;
#define MG_FRAME_MAGIC 0x54475054u  // "TGPT"
enum { MG_HELLO = 1, MG_WELCOME, MG_REJECT, MG_ID, MG_ABORT, MG_BYE };

typedef struct {
    int method, rank, nproc, timeout_s, active;
    int finished;                  // multi_gpu_finish ran: an exit is clean
    int failing;                   // this process is on its way out (atomics): the watcher stays quiet
    pthread_t watcher;
    int watcher_started, stop;     // stop: atomics
    pthread_mutex_t send_lock;
    int *fd, *bye;                 // tcp: rank 0 fd[k] for rank k; others fd[0], rank 0's
    char dir[PATH_MAX];            // fs
    uint64_t run, *nonce;          // fs: rank 0's nonce; nonce[k] of rank k
    char abort_path[PATH_MAX + 64], abort_tmp[PATH_MAX + 96], crash_msg[128];
    int id_ready;                  // atomics
    unsigned char id[MG_ID_BYTES];
    char tail[MG_MSG_MAX];         // the end of what this process wrote to stderr
    size_t tail_len;
    void (*abort_comm)(void);      // ncclCommAbort of the communicator, once there is one
} MgLink;
static MgLink mg_link;

static inline double mg_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline void mg_sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static inline uint64_t mg_random64(void) {
    uint64_t x = 0;
    const int fd = open("/dev/urandom", O_RDONLY);
    if (fd >= 0) {
        if (read(fd, &x, sizeof(x)) != (ssize_t)sizeof(x)) x = 0;
        close(fd);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    x ^= ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40);
    return x != 0 ? x : 1;
}

// the tee on stderr: what the process prints still goes to fd 2, and its end is kept for the
// message an exit sends to the other processes (glibc; elsewhere the message is generic)
#if defined(__GLIBC__) && defined(_GNU_SOURCE)
#define MG_HAVE_TEE 1
static ssize_t mg_tee_write(void *cookie, const char *buf, size_t n) {
    (void)cookie;
    size_t done = 0;
    while (done < n) {
        const ssize_t w = write(2, buf + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        done += (size_t)w;
    }
    const size_t cap = sizeof(mg_link.tail) - 1;
    if (n >= cap) {
        memcpy(mg_link.tail, buf + n - cap, cap);
        mg_link.tail_len = cap;
    } else {
        if (mg_link.tail_len + n > cap) {
            const size_t drop = mg_link.tail_len + n - cap;
            memmove(mg_link.tail, mg_link.tail + drop, mg_link.tail_len - drop);
            mg_link.tail_len -= drop;
        }
        memcpy(mg_link.tail + mg_link.tail_len, buf, n);
        mg_link.tail_len += n;
    }
    mg_link.tail[mg_link.tail_len] = 0;
    return (ssize_t)n;
}

static inline void mg_tee_stderr(void) {
    cookie_io_functions_t io;
    memset(&io, 0, sizeof(io));
    io.write = mg_tee_write;
    FILE *f = fopencookie(NULL, "w", io);
    if (f == NULL) return;
    setvbuf(f, NULL, _IONBF, 0);
    fflush(stderr);
    stderr = f;
}
#else
#define MG_HAVE_TEE 0
static inline void mg_tee_stderr(void) {}
#endif

// The message this process's exit sends: the last (up to 4) lines it wrote to stderr.
static inline void mg_exit_message(char *out, size_t len) {
    const char *t = mg_link.tail;
    size_t n = mg_link.tail_len;
    while (n > 0 && (t[n - 1] == '\n' || t[n - 1] == ' ')) n--;
    if (n == 0) {
        snprintf(out, len, "it exited before the end of the run%s", MG_HAVE_TEE ? " (it printed no error)" : "");
        return;
    }
    size_t start = n;
    for (int lines = 0; start > 0 && lines < 4; start--)
        if (t[start - 1] == '\n' && ++lines == 4) break;
    if (start == 0 && mg_link.tail_len == sizeof(mg_link.tail) - 1) {  // a cut line: from the next one
        const char *nl = (const char *)memchr(t, '\n', n);
        if (nl != NULL) start = (size_t)(nl - t) + 1;
    }
    snprintf(out, len, "%.*s", (int)(n - start), t + start);
}

// Writes data to path through a temporary of this process and a rename (async-signal-safe).
static inline int mg_write_atomic(const char *path, const char *tmp, const char *data, size_t n) {
    const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return -1;
    size_t done = 0;
    while (done < n) {
        const ssize_t w = write(fd, data + done, n - done);
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

static inline int mg_write_file(const char *path, const char *text) {
    char tmp[PATH_MAX + 96];
    snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid());
    return mg_write_atomic(path, tmp, text, strlen(text));
}

// The whole small file path into buf (NUL-terminated): its length, or -1.
static inline long mg_read_file(const char *path, char *buf, size_t cap) {
    const int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    size_t n = 0;
    while (n + 1 < cap) {
        const ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = 0;
    return (long)n;
}

static inline void mg_fs_path(char *out, size_t len, const char *what, uint64_t key) {
    snprintf(out, len, "%s/train_gpt_fs.%s.%016llx", mg_link.dir, what, (unsigned long long)key);
}
static inline void mg_fs_rank_path(char *out, size_t len, const char *what, int rank) {
    snprintf(out, len, "%s/train_gpt_fs.%s.%d", mg_link.dir, what, rank);
}

// --- tcp frames ---

static inline int mg_send_all(int fd, const void *buf, size_t n) {
    size_t done = 0;
    while (done < n) {
        const ssize_t w = send(fd, (const char *)buf + done, n - done, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        done += (size_t)w;
    }
    return 0;
}

static inline int mg_send_frame(int fd, uint32_t type, int rank, const void *payload, size_t len) {
    if (fd < 0) return -1;
    MgFrame f = {MG_FRAME_MAGIC, type, rank, (uint32_t)len};
    pthread_mutex_lock(&mg_link.send_lock);
    const int rc = mg_send_all(fd, &f, sizeof(f)) == 0 && (len == 0 || mg_send_all(fd, payload, len) == 0) ? 0 : -1;
    pthread_mutex_unlock(&mg_link.send_lock);
    return rc;
}

// n bytes before deadline: 0, 1 at a clean end of stream before the first byte, -1 otherwise
static inline int mg_recv_all(int fd, void *buf, size_t n, double deadline) {
    size_t done = 0;
    while (done < n) {
        struct pollfd pfd = {fd, POLLIN, 0};
        const double left = deadline - mg_now();
        if (left <= 0) return -1;
        const int pr = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (pr < 0 && errno == EINTR) continue;
        if (pr <= 0) continue;
        const ssize_t r = recv(fd, (char *)buf + done, n - done, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r == 0) return done == 0 ? 1 : -1;
        if (r < 0) return done == 0 && (errno == ECONNRESET || errno == EPIPE) ? 1 : -1;
        done += (size_t)r;
    }
    return 0;
}

// one frame, its payload NUL-terminated in buf: 0, 1 at the end of the stream, -1 on an error
static inline int mg_recv_frame(int fd, MgFrame *f, char *buf, size_t cap, double deadline) {
    const int rc = mg_recv_all(fd, f, sizeof(*f), deadline);
    if (rc != 0) return rc;
    if (f->magic != MG_FRAME_MAGIC || f->len >= cap) return -1;
    if (f->len > 0 && mg_recv_all(fd, buf, f->len, deadline) != 0) return -1;
    buf[f->len] = 0;
    return 0;
}

// --- a peer's failure, and this process's own ---

// The watcher's end: another process failed (rank, its message); rank 0 forwards it first.
static inline void mg_peer_failed(int rank, const char *msg) {
    if (__atomic_load_n(&mg_link.failing, __ATOMIC_SEQ_CST) || __atomic_load_n(&mg_link.stop, __ATOMIC_SEQ_CST))
        return;
    __atomic_store_n(&mg_link.failing, 1, __ATOMIC_SEQ_CST);
    if (mg_link.rank == 0 && mg_link.method == MG_TCP) {
        for (int k = 1; k < mg_link.nproc; k++)
            if (k != rank && !mg_link.bye[k]) mg_send_frame(mg_link.fd[k], MG_ABORT, rank, msg, strlen(msg));
    }
    char text[3 * MG_MSG_MAX];  // one write, its lines indented
    size_t n = (size_t)snprintf(text, sizeof(text), "Error: rank %d of %d stopped the run:\n  ", rank, mg_link.nproc);
    for (const char *c = msg; *c && n + 8 < sizeof(text); c++) {
        text[n++] = *c;
        if (*c == '\n') text[n++] = ' ', text[n++] = ' ';
    }
    snprintf(text + n, sizeof(text) - n, "\n(rank %d stops too)\n", mg_link.rank);
    fflush(stdout);
    fputs(text, stderr);
    fflush(stderr);
    _exit(1);
}

// Tells the others that this process is failing, with msg (tcp: a frame, fs: a file).
static inline void mg_link_send_abort(const char *msg) {
    if (!mg_link.active || mg_link.finished) return;
    if (__atomic_exchange_n(&mg_link.failing, 1, __ATOMIC_SEQ_CST)) return;
    if (mg_link.method == MG_TCP) {
        if (mg_link.rank == 0) {
            for (int k = 1; k < mg_link.nproc; k++)
                if (!mg_link.bye[k]) mg_send_frame(mg_link.fd[k], MG_ABORT, 0, msg, strlen(msg));
        } else {
            mg_send_frame(mg_link.fd[0], MG_ABORT, mg_link.rank, msg, strlen(msg));
        }
    } else {
        char text[MG_MSG_MAX + 32];
        snprintf(text, sizeof(text), "%d\n%s", mg_link.rank, msg);
        mg_write_atomic(mg_link.abort_path, mg_link.abort_tmp, text, strlen(text));
    }
}

// fs: a crash signal writes the abort file, then takes its default course
static void mg_crash_handler(int sig) {
    if (!__atomic_exchange_n(&mg_link.failing, 1, __ATOMIC_SEQ_CST))
        mg_write_atomic(mg_link.abort_path, mg_link.abort_tmp, mg_link.crash_msg, strlen(mg_link.crash_msg));
    signal(sig, SIG_DFL);
    raise(sig);
}

static int mg_exit_handled = 0;
#ifdef USE_MPI
static int mg_mpi_active = 0;  // 1: MPI_Init ran, 2: for several processes
#endif

// atexit: an exit before multi_gpu_finish is a failure; tell the others, abort NCCL (and MPI).
// Registered at the join and again once NCCL exists, so that it runs before CUDA's teardown.
static void mg_atexit(void) {
    if (mg_exit_handled || mg_link.finished) return;
    mg_exit_handled = 1;
    fflush(stdout);
    char msg[MG_MSG_MAX];
    mg_exit_message(msg, sizeof(msg));
    mg_link_send_abort(msg);
    if (mg_link.abort_comm != NULL) mg_link.abort_comm();
#ifdef USE_MPI
    if (mg_mpi_active > 1) MPI_Abort(MPI_COMM_WORLD, 1);  // (one process: a plain exit says it)
#endif
}

static void *mg_watch(void *arg);

// --- joining ---

// -ps host:port as stream socket addresses (*res for freeaddrinfo): getaddrinfo's code
static inline int mg_resolve(const MultiGpuPlan *p, struct addrinfo **res) {
    char port[16];
    snprintf(port, sizeof(port), "%d", p->port);
    struct addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    *res = NULL;
    return getaddrinfo(p->host, port, &hints, res);
}

static inline int mg_tcp_listen(const MultiGpuPlan *p, char *err, size_t err_len) {
    struct addrinfo *res = NULL;
    const int g = mg_resolve(p, &res);
    if (g != 0) {
        llmc_set_error(err, err_len, "rank 0: -ps %s: %s", p->host, gai_strerror(g));
        return -1;
    }
    int fd = -1, why = 0;
    for (struct addrinfo *a = res; a != NULL && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) {
            why = errno;
            continue;
        }
        const int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0) {
            why = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0)
        llmc_set_error(err, err_len, "rank 0: cannot listen on %s:%d (-ps): %s%s", p->host, p->port, strerror(why),
                       why == EADDRINUSE ? " (another run on this port? -ps host:port picks another)"
                       : why == EADDRNOTAVAIL ? " (-ps must be an address of rank 0's own host)" : "");
    return fd;
}

// one connection attempt to rank 0, up to 2 s: the socket, or -1 with errno
static inline int mg_tcp_connect_once(const MultiGpuPlan *p, int *why, int *resolve_error) {
    struct addrinfo *res = NULL;
    const int g = mg_resolve(p, &res);
    if (g != 0) {
        *resolve_error = g;
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *a = res; a != NULL && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) {
            *why = errno;
            continue;
        }
        const int flags = fcntl(fd, F_GETFL, 0);
        fcntl(fd, F_SETFL, flags | O_NONBLOCK);
        int rc = connect(fd, a->ai_addr, a->ai_addrlen);
        if (rc != 0 && errno == EINPROGRESS) {
            struct pollfd pfd = {fd, POLLOUT, 0};
            int soerr = ETIMEDOUT;
            socklen_t sl = sizeof(soerr);
            if (poll(&pfd, 1, 2000) == 1) getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
            rc = soerr == 0 ? 0 : -1;
            errno = soerr;
        }
        if (rc != 0) {
            *why = errno;
            close(fd);
            fd = -1;
            continue;
        }
        fcntl(fd, F_SETFL, flags);
    }
    freeaddrinfo(res);
    return fd;
}

static inline void mg_missing_ranks(char *out, size_t len, const int *present, int nproc) {
    size_t n = 0;
    int shown = 0;
    out[0] = 0;
    for (int k = 1; k < nproc && n + 16 < len; k++)
        if (!present[k]) {
            if (shown == 8) {
                snprintf(out + n, len - n, ", ...");
                break;
            }
            n += (size_t)snprintf(out + n, len - n, "%s%d", shown ? ", " : "", k);
            shown++;
        }
}

static inline int mg_tcp_join(const MultiGpuPlan *p, char *err, size_t err_len) {
    const double deadline = mg_now() + p->timeout_s;
    char buf[MG_MSG_MAX + 64];
    MgFrame f;
    if (p->rank == 0) {
        const int lfd = mg_tcp_listen(p, err, err_len);
        if (lfd < 0) return -1;
        int joined = 0;
        while (joined < p->nproc - 1) {
            struct pollfd pfd = {lfd, POLLIN, 0};
            const double left = deadline - mg_now();
            if (left <= 0) {
                char missing[128];
                mg_missing_ranks(missing, sizeof(missing), mg_link.bye, p->nproc);
                llmc_set_error(err, err_len, "rank 0: %d of %d processes came to %s:%d within %d s; missing ranks %s "
                               "(each started with -pi tcp -ps %s -pn %d -pr <rank>? TRAIN_COMM_TIMEOUT sets the wait)",
                               joined + 1, p->nproc, p->host, p->port, p->timeout_s, missing, p->host, p->nproc);
                close(lfd);
                return -1;
            }
            const int pr = poll(&pfd, 1, (int)(left * 1000) + 1);
            if (pr <= 0) continue;
            const int fd = accept(lfd, NULL, NULL);
            if (fd < 0) continue;
            const int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            int n = 0, ok = mg_recv_frame(fd, &f, buf, sizeof(buf), mg_now() + 10) == 0 && f.type == MG_HELLO &&
                           sscanf(buf, "%d", &n) == 1;
            const char *why = NULL;
            char text[256];
            if (!ok) why = "no greeting";  // not one of ours: ignored
            else if (n != p->nproc) {
                snprintf(text, sizeof(text), "rank %d has -pn %d, and rank 0 has -pn %d", f.rank, n, p->nproc);
                why = text;
            } else if (f.rank < 1 || f.rank >= p->nproc || mg_link.bye[f.rank]) {
                snprintf(text, sizeof(text), "two processes say they are rank %d (-pr given twice?)", f.rank);
                why = text;
            }
            if (why != NULL && ok) {
                mg_send_frame(fd, MG_REJECT, 0, why, strlen(why));
                close(fd);
                llmc_set_error(err, err_len, "rank 0: %s", why);
                close(lfd);
                return -1;
            }
            if (why != NULL) {
                close(fd);
                continue;
            }
            mg_link.fd[f.rank] = fd;
            mg_link.bye[f.rank] = 1;  // (joined; reset below)
            joined++;
        }
        close(lfd);
        for (int k = 1; k < p->nproc; k++) {
            mg_link.bye[k] = 0;
            mg_send_frame(mg_link.fd[k], MG_WELCOME, 0, NULL, 0);
        }
        return 0;
    }
    int why = ECONNREFUSED, gai = 0, fd = -1;
    while (fd < 0) {
        fd = mg_tcp_connect_once(p, &why, &gai);
        if (fd >= 0) break;
        if (mg_now() > deadline) {
            if (gai != 0)
                llmc_set_error(err, err_len, "rank %d: -ps %s: %s", p->rank, p->host, gai_strerror(gai));
            else
                llmc_set_error(err, err_len, "rank %d: rank 0 did not answer at %s:%d within %d s (%s): is it running "
                               "with -pi tcp -ps %s? (TRAIN_COMM_TIMEOUT sets the wait)", p->rank, p->host, p->port,
                               p->timeout_s, strerror(why), p->host);
            return -1;
        }
        mg_sleep_us(gai != 0 ? 1000000 : 200000);
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    char hello[32];
    snprintf(hello, sizeof(hello), "%d", p->nproc);
    mg_link.fd[0] = fd;
    if (mg_send_frame(fd, MG_HELLO, p->rank, hello, strlen(hello)) != 0) {
        llmc_set_error(err, err_len, "rank %d: lost rank 0 at %s:%d: %s", p->rank, p->host, p->port, strerror(errno));
        return -1;
    }
    const int rc = mg_recv_frame(fd, &f, buf, sizeof(buf), deadline);
    if (rc == 0 && f.type == MG_WELCOME) return 0;
    if (rc == 0 && f.type == MG_REJECT)
        llmc_set_error(err, err_len, "rank %d: rank 0 refused it: %s", p->rank, buf);
    else if (rc == 0 && f.type == MG_ABORT)
        llmc_set_error(err, err_len, "rank %d: rank %d stopped the run: %s", p->rank, f.rank, buf);
    else
        llmc_set_error(err, err_len, "rank %d: rank 0 at %s:%d %s", p->rank, p->host, p->port,
                       rc > 0 ? "closed the connection before the run began" : "did not welcome it in time");
    return -1;
}

// fs: the run file rank 0 writes (mg_link.nonce as read from the hellos, id or none)
static inline int mg_fs_publish(const unsigned char *id) {
    const size_t cap = 128 + 17 * (size_t)mg_link.nproc + 2 * MG_ID_BYTES;
    char *text = (char *)malloc(cap), path[PATH_MAX + 64];
    if (text == NULL) return -1;
    size_t n = (size_t)snprintf(text, cap, "train_gpt fs 1\n%016llx %d\n", (unsigned long long)mg_link.run,
                                mg_link.nproc);
    for (int k = 1; k < mg_link.nproc; k++)
        n += (size_t)snprintf(text + n, cap - n, "%016llx%c", (unsigned long long)mg_link.nonce[k],
                              k + 1 < mg_link.nproc ? ' ' : '\n');
    if (id == NULL) n += (size_t)snprintf(text + n, cap - n, "-\n");
    else {
        for (int i = 0; i < MG_ID_BYTES; i++) n += (size_t)snprintf(text + n, cap - n, "%02x", id[i]);
        n += (size_t)snprintf(text + n, cap - n, "\n");
    }
    snprintf(path, sizeof(path), "%s/train_gpt_fs.run", mg_link.dir);
    const int rc = mg_write_file(path, text);
    free(text);
    return rc;
}

// fs: reads the run file: 1 when it is rank 0's for this process (its own fresh nonce at its
// rank; unless learn, this run's), learning the run when learn and the id into id when given;
// 0 otherwise (none yet, an earlier run's, or half of one).
static inline int mg_fs_read_run(int learn, unsigned char *id) {
    char path[PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/train_gpt_fs.run", mg_link.dir);
    const size_t cap = 128 + 17 * (size_t)mg_link.nproc + 2 * MG_ID_BYTES;
    char *text = (char *)malloc(cap);
    if (text == NULL || mg_read_file(path, text, cap) <= 0) {
        free(text);
        return 0;
    }
    int ok = strncmp(text, "train_gpt fs 1\n", 15) == 0;
    char *s = text + 15, *end = NULL;
    const unsigned long long run = ok ? strtoull(s, &end, 16) : 0;
    ok = ok && end != s && *end == ' ';
    const long nproc = ok ? strtol(end + 1, &s, 10) : 0;
    ok = ok && nproc == mg_link.nproc && *s == '\n';
    unsigned long long mine = 0;
    for (int k = 1; ok && k < mg_link.nproc; k++) {
        const unsigned long long v = strtoull(s + 1, &end, 16);
        ok = end == s + 17;
        if (k == mg_link.rank) mine = v;
        s = end;
    }
    ok = ok && *s == '\n' && mine == mg_link.nonce[mg_link.rank] && (learn || run == mg_link.run);
    if (ok && id != NULL) {
        s++;
        ok = strlen(s) >= 2 * MG_ID_BYTES;
        for (int i = 0; ok && i < MG_ID_BYTES; i++) {
            unsigned v = 0;
            ok = sscanf(s + 2 * i, "%2x", &v) == 1;
            id[i] = (unsigned char)v;
        }
    }
    if (ok && learn) mg_link.run = run;
    free(text);
    return ok;
}

static inline int mg_fs_join(const MultiGpuPlan *p, char *err, size_t err_len) {
    const double deadline = mg_now() + p->timeout_s;
    char path[PATH_MAX + 64], text[256];
    const int n = p->nproc;
    if (p->rank == 0) {
        mg_link.run = mg_random64();
        int *acked = (int *)calloc((size_t)n, sizeof(int));
        uint64_t *seen = (uint64_t *)calloc((size_t)n, sizeof(uint64_t));
        int published = 0, all_acked = 0;
        while (!all_acked) {
            int all = 1, changed = 0;
            for (int k = 1; k < n; k++) {  // the hellos: a new nonce (a stale one replaced) republishes
                unsigned long long v = 0;
                int kn = 0;
                mg_fs_rank_path(path, sizeof(path), "hello", k);
                if (mg_read_file(path, text, sizeof(text)) > 0 && sscanf(text, "%llx %d", &v, &kn) == 2 && kn == n &&
                    v != seen[k]) {
                    seen[k] = v;
                    changed = 1;
                }
                all = all && seen[k] != 0;
            }
            if (all && (changed || !published)) {
                memcpy(mg_link.nonce, seen, (size_t)n * sizeof(uint64_t));
                if (mg_fs_publish(NULL) != 0) {
                    llmc_set_error(err, err_len, "rank 0: cannot write in -pf %s: %s", p->fs_dir, strerror(errno));
                    free(acked);
                    free(seen);
                    return -1;
                }
                published = 1;
            }
            all_acked = published;
            for (int k = 1; k < n; k++) {  // an ack names this run and the rank's current nonce
                unsigned long long r = 0, v = 0;
                mg_fs_rank_path(path, sizeof(path), "ack", k);
                acked[k] = published && mg_read_file(path, text, sizeof(text)) > 0 &&
                           sscanf(text, "%llx %llx", &r, &v) == 2 && r == mg_link.run && v == mg_link.nonce[k];
                all_acked = all_acked && acked[k];
            }
            if (all_acked) break;
            if (mg_now() > deadline) {
                char missing[128];
                mg_missing_ranks(missing, sizeof(missing), acked, n);
                llmc_set_error(err, err_len, "rank 0: ranks %s did not join through -pf %s within %d s (started with -pi "
                               "fs -pf %s -pn %d -pr <rank>? TRAIN_COMM_TIMEOUT sets the wait)", missing, p->fs_dir,
                               p->timeout_s, p->fs_dir, n);
                free(acked);
                free(seen);
                return -1;
            }
            mg_sleep_us(50000);
        }
        for (int k = 1; k < n; k++) {
            mg_fs_rank_path(path, sizeof(path), "hello", k);
            unlink(path);
            mg_fs_rank_path(path, sizeof(path), "ack", k);
            unlink(path);
        }
        free(acked);
        free(seen);
        return 0;
    }
    const uint64_t mine = mg_random64();
    mg_link.nonce[p->rank] = mine;
    mg_fs_rank_path(path, sizeof(path), "hello", p->rank);
    snprintf(text, sizeof(text), "%016llx %d\n", (unsigned long long)mine, n);
    if (mg_write_file(path, text) != 0) {
        llmc_set_error(err, err_len, "rank %d: cannot write in -pf %s: %s", p->rank, p->fs_dir, strerror(errno));
        return -1;
    }
    while (!mg_fs_read_run(1, NULL)) {
        if (mg_now() > deadline) {
            llmc_set_error(err, err_len, "rank %d: no word from rank 0 in -pf %s within %d s (is rank 0 running with "
                           "-pi fs -pf %s -pn %d? TRAIN_COMM_TIMEOUT sets the wait)", p->rank, p->fs_dir, p->timeout_s,
                           p->fs_dir, n);
            return -1;
        }
        mg_sleep_us(50000);
    }
    mg_fs_rank_path(path, sizeof(path), "ack", p->rank);
    snprintf(text, sizeof(text), "%016llx %016llx\n", (unsigned long long)mg_link.run, (unsigned long long)mine);
    if (mg_write_file(path, text) != 0) {
        llmc_set_error(err, err_len, "rank %d: cannot write in -pf %s: %s", p->rank, p->fs_dir, strerror(errno));
        return -1;
    }
    return 0;
}

// Joins the other processes of an fs or tcp plan (no-op otherwise): each is present, the
// watcher runs, exits tell the others. 0, or -1 with a message.
static inline int mg_link_join(const MultiGpuPlan *p, char *err, size_t err_len) {
    if (p->method != MG_FS && p->method != MG_TCP) return 0;
    memset(&mg_link, 0, sizeof(mg_link));
    mg_link.method = p->method;
    mg_link.rank = p->rank;
    mg_link.nproc = p->nproc;
    mg_link.timeout_s = p->timeout_s;
    pthread_mutex_init(&mg_link.send_lock, NULL);
    mg_link.fd = (int *)malloc((size_t)p->nproc * sizeof(int));
    mg_link.bye = (int *)calloc((size_t)p->nproc, sizeof(int));
    mg_link.nonce = (uint64_t *)calloc((size_t)p->nproc, sizeof(uint64_t));
    if (mg_link.fd == NULL || mg_link.bye == NULL || mg_link.nonce == NULL) {
        llmc_set_error(err, err_len, "out of memory for %d processes", p->nproc);
        return -1;
    }
    for (int k = 0; k < p->nproc; k++) mg_link.fd[k] = -1;
    snprintf(mg_link.dir, sizeof(mg_link.dir), "%s", p->fs_dir);
    const int rc = p->method == MG_TCP ? mg_tcp_join(p, err, err_len) : mg_fs_join(p, err, err_len);
    if (rc != 0) return -1;
    if (p->method == MG_FS) {
        mg_fs_path(mg_link.abort_path, sizeof(mg_link.abort_path), "abort", mg_link.run);
        snprintf(mg_link.abort_tmp, sizeof(mg_link.abort_tmp), "%s.%ld.tmp", mg_link.abort_path, (long)getpid());
        snprintf(mg_link.crash_msg, sizeof(mg_link.crash_msg), "%d\nit was killed by a signal (a crash)", p->rank);
        const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
        for (int i = 0; i < 5; i++) signal(sigs[i], mg_crash_handler);
    }
    mg_tee_stderr();
    mg_link.active = 1;
    atexit(mg_atexit);
    if (pthread_create(&mg_link.watcher, NULL, mg_watch, NULL) != 0) {
        llmc_set_error(err, err_len, "cannot start the watcher thread");
        return -1;
    }
    mg_link.watcher_started = 1;
    return 0;
}

// The watcher: another process's failure (a message, or a connection lost) ends this one.
static void *mg_watch(void *arg) {
    (void)arg;
    char buf[MG_MSG_MAX + 64];
    const int n = mg_link.nproc;
    struct pollfd *pfd = (struct pollfd *)calloc((size_t)n, sizeof(struct pollfd));
    int *who = (int *)calloc((size_t)n, sizeof(int));
    while (!__atomic_load_n(&mg_link.stop, __ATOMIC_SEQ_CST)) {
        if (mg_link.method == MG_FS) {  // the run's abort file, which any failing rank writes
            if (mg_read_file(mg_link.abort_path, buf, sizeof(buf)) > 0) {
                int r = -1;
                char *nl = strchr(buf, '\n');
                if (sscanf(buf, "%d", &r) == 1 && nl != NULL && r != mg_link.rank) mg_peer_failed(r, nl + 1);
            }
            mg_sleep_us(100000);
            continue;
        }
        int m = 0;
        for (int k = 0; k < n; k++)
            if (mg_link.fd[k] >= 0) {
                pfd[m].fd = mg_link.fd[k];
                pfd[m].events = POLLIN;
                pfd[m].revents = 0;
                who[m++] = k;
            }
        if (m == 0) break;
        const int pr = poll(pfd, (nfds_t)m, 100);
        if (pr <= 0) continue;
        for (int i = 0; i < m; i++) {
            if (pfd[i].revents == 0) continue;
            const int k = who[i];
            MgFrame f;
            const int rc = mg_recv_frame(mg_link.fd[k], &f, buf, sizeof(buf), mg_now() + 10);
            if (rc == 0 && f.type == MG_ID && mg_link.rank != 0 && f.len == MG_ID_BYTES) {
                memcpy(mg_link.id, buf, MG_ID_BYTES);
                __atomic_store_n(&mg_link.id_ready, 1, __ATOMIC_SEQ_CST);
            } else if (rc == 0 && f.type == MG_BYE) {
                mg_link.bye[k] = 1;
            } else if (rc == 0 && f.type == MG_ABORT) {
                mg_peer_failed(f.rank, buf);
            } else if (rc != 0) {
                if (__atomic_load_n(&mg_link.stop, __ATOMIC_SEQ_CST)) break;
                if (!mg_link.bye[k] && !__atomic_load_n(&mg_link.failing, __ATOMIC_SEQ_CST))
                    mg_peer_failed(k, "its connection closed without a message (killed, or crashed)");
                close(mg_link.fd[k]);  // a goodbye came first: a clean end
                mg_link.fd[k] = -1;
            }
        }
    }
    free(pfd);
    free(who);
    return NULL;
}

// rank 0: the id to every other process
static inline int mg_link_send_id(const unsigned char *id) {
    if (mg_link.method == MG_FS) return mg_fs_publish(id);
    for (int k = 1; k < mg_link.nproc; k++)
        if (mg_send_frame(mg_link.fd[k], MG_ID, 0, id, MG_ID_BYTES) != 0) return -1;
    return 0;
}

// ranks > 0: rank 0's id, before the deadline: 0, or -1 with a message
static inline int mg_link_recv_id(unsigned char *id, char *err, size_t err_len) {
    const double deadline = mg_now() + mg_link.timeout_s;
    for (;;) {
        if (mg_link.method == MG_FS) {
            if (mg_fs_read_run(0, id)) return 0;
        } else if (__atomic_load_n(&mg_link.id_ready, __ATOMIC_SEQ_CST)) {
            memcpy(id, mg_link.id, MG_ID_BYTES);
            return 0;
        }
        if (mg_now() > deadline) {
            llmc_set_error(err, err_len, "rank %d: no NCCL id from rank 0 within %d s (TRAIN_COMM_TIMEOUT)", mg_link.rank,
                           mg_link.timeout_s);
            return -1;
        }
        mg_sleep_us(mg_link.method == MG_FS ? 50000 : 1000);
    }
}

// rank 0 under fs, once the communicator exists (every rank read the id): the id file goes
static inline void mg_link_id_used(void) {
    if (mg_link.method != MG_FS || mg_link.rank != 0) return;
    char path[PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/train_gpt_fs.run", mg_link.dir);
    unlink(path);
}

// The end of a run: goodbyes (tcp), the watcher stopped, exits clean from now on.
static inline void mg_link_finish(void) {
    if (!mg_link.active) return;
    mg_link.finished = 1;
    if (mg_link.method == MG_TCP) {
        for (int k = 0; k < mg_link.nproc; k++)
            if (k != mg_link.rank && mg_link.fd[k] >= 0) mg_send_frame(mg_link.fd[k], MG_BYE, mg_link.rank, NULL, 0);
    }
    __atomic_store_n(&mg_link.stop, 1, __ATOMIC_SEQ_CST);
    if (mg_link.watcher_started) pthread_join(mg_link.watcher, NULL);
    for (int k = 0; k < mg_link.nproc; k++)
        if (mg_link.fd[k] >= 0) close(mg_link.fd[k]);
    free(mg_link.fd);
    free(mg_link.bye);
    free(mg_link.nonce);
    mg_link.fd = mg_link.bye = NULL;
    mg_link.nonce = NULL;
    mg_link.active = 0;
}

// ----------------------------------------------------------------------------------------
// the processes and the communicator

#ifdef MULTI_GPU
static MultiGpu *mg_current = NULL;  // for the exit path's ncclCommAbort
static void mg_abort_comm(void) {
    if (mg_current != NULL && mg_current->comm_ready) {
        mg_current->comm_ready = 0;
        ncclCommAbort(mg_current->comm);
    }
}
#endif

// A failure in the main thread: the message, then exit(1) (the exit path tells the others).
static inline void multi_gpu_fail(const MultiGpu *mg, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fflush(stdout);
    if (mg->nproc > 1) fprintf(stderr, "Error (rank %d of %d): %s\n", mg->rank, mg->nproc, msg);
    else fprintf(stderr, "Error: %s\n", msg);
    exit(EXIT_FAILURE);
}

// The ranks, no GPU: MPI_Init under mpi; the plan's otherwise. 0, or -1 with a message.
static inline int multi_gpu_init_processes(MultiGpu *mg, const MultiGpuPlan *p, char *err, size_t err_len) {
    memset(mg, 0, sizeof(*mg));
    if (multi_gpu_plan_check_build(p, err, err_len) != 0) return -1;
    mg->method = p->method;
    mg->nproc = p->nproc;
    mg->rank = p->rank;
    mg->local_rank = p->local_rank;
    mg->timeout_s = p->timeout_s;
    mg->fault_rank = p->fault_rank;
    mg->fault_step = p->fault_step;
    mg->fault_mode = p->fault_mode;
#ifdef USE_MPI
    if (p->method == MG_MPI) {
        int rc = MPI_Init(NULL, NULL);
        MPI_Comm local;
        if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(MPI_COMM_WORLD, &mg->rank);
        if (rc == MPI_SUCCESS) rc = MPI_Comm_size(MPI_COMM_WORLD, &mg->nproc);
        if (rc == MPI_SUCCESS)
            rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, mg->rank, MPI_INFO_NULL, &local);
        if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(local, &mg->local_rank);
        if (rc == MPI_SUCCESS) rc = MPI_Comm_free(&local);
        if (rc != MPI_SUCCESS) {
            char why[MPI_MAX_ERROR_STRING] = "";
            int len = 0;
            MPI_Error_string(rc, why, &len);
            llmc_set_error(err, err_len, "MPI's start (%s): %s", p->why_mpi, why);
            return -1;
        }
        mg_mpi_active = mg->nproc > 1 ? 2 : 1;
        atexit(mg_atexit);
        if (mg->fault_step > 0 && mg->fault_rank >= mg->nproc) {
            llmc_set_error(err, err_len, "TRAIN_FAULT: rank %d, and the run has %d processes", mg->fault_rank, mg->nproc);
            return -1;
        }
    }
#endif
    return 0;
}

// fs, tcp: every process present, the watcher running (a no-op otherwise). 0, or -1 with a message.
static inline int multi_gpu_join(MultiGpu *mg, const MultiGpuPlan *p, char *err, size_t err_len) {
    (void)mg;
    return mg_link_join(p, err, err_len);
}

// This process's GPU among the host's devices: 0, or -1 with a message when it has none. A
// process that sees one GPU takes it (a launcher that gives each its own: srun --gpus-per-task=1).
static inline int multi_gpu_device_checked(const MultiGpu *mg, int devices, int *device, char *err, size_t err_len) {
    *device = mg->nproc > 1 && devices > 1 ? mg->local_rank : 0;
    if (*device >= devices) {
        llmc_set_error(err, err_len, "rank %d is process %d of its host, which shows %d GPU%s: one process per GPU "
                       "(-pg <GPUs per host> numbers them as rank %% pg)", mg->rank, *device, devices,
                       devices == 1 ? "" : "s");
        return -1;
    }
    return 0;
}

#ifdef MULTI_GPU
// Waits for an NCCL call that returned ncclInProgress (a nonblocking communicator), polling
// its state; any error ends the process with what and NCCL's words.
static inline void mg_nccl_settle(MultiGpu *mg, ncclResult_t r, const char *what, double deadline) {
    while (r == ncclInProgress) {
        if (mg_now() > deadline)
            multi_gpu_fail(mg, "NCCL: %s did not complete within %d s (another process is stuck or gone; "
                           "TRAIN_COMM_TIMEOUT)", what, mg->timeout_s);
        mg_sleep_us(100);
        if (ncclCommGetAsyncError(mg->comm, &r) != ncclSuccess) r = ncclInternalError;
    }
    if (r != ncclSuccess) multi_gpu_fail(mg, "NCCL: %s: %s (%s)", what, ncclGetErrorString(r), ncclGetLastError(mg->comm));
}

// Waits until stream's work so far is done, polling NCCL's state and the deadline.
static inline void mg_wait_stream(MultiGpu *mg, cudaStream_t stream, const char *what) {
    const double deadline = mg_now() + mg->timeout_s;
    cudaError_t ce = cudaEventRecord(mg->done, stream);
    if (ce != cudaSuccess) multi_gpu_fail(mg, "CUDA: %s: %s", what, cudaGetErrorString(ce));
    long spins = 0;
    while ((ce = cudaEventQuery(mg->done)) == cudaErrorNotReady) {
        ncclResult_t a = ncclSuccess;
        ncclCommGetAsyncError(mg->comm, &a);
        if (a != ncclSuccess && a != ncclInProgress)
            multi_gpu_fail(mg, "NCCL: %s: %s (%s)", what, ncclGetErrorString(a), ncclGetLastError(mg->comm));
        if ((++spins & 1023) == 0 && mg_now() > deadline)
            multi_gpu_fail(mg, "NCCL: %s did not complete within %d s (another process is stuck or gone; "
                           "TRAIN_COMM_TIMEOUT)", what, mg->timeout_s);
        if (spins > 2000) mg_sleep_us(20);
    }
    if (ce != cudaSuccess) multi_gpu_fail(mg, "CUDA: %s: %s", what, cudaGetErrorString(ce));
}
#endif

// NCCL's communicator, once this process's GPU is set (a no-op for one process).
static inline void multi_gpu_init_comm(MultiGpu *mg) {
#ifdef MULTI_GPU
    if (mg->nproc <= 1) return;
    // NVLink multicast (NVLS) stays off unless the environment asks for it
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    char err[1024];
    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    ncclResult_t r = ncclSuccess;
    if (mg->rank == 0 && (r = ncclGetUniqueId(&id)) != ncclSuccess)
        multi_gpu_fail(mg, "NCCL: ncclGetUniqueId: %s (%s)", ncclGetErrorString(r), ncclGetLastError(NULL));
#ifdef USE_MPI
    if (mg->method == MG_MPI) {
        const int rc = MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) multi_gpu_fail(mg, "MPI: MPI_Bcast of NCCL's id failed (%d)", rc);
    }
#endif
    if (mg->method == MG_FS || mg->method == MG_TCP) {
        if (mg->rank == 0 && mg_link_send_id((const unsigned char *)&id) != 0)
            multi_gpu_fail(mg, "rank 0: cannot send NCCL's id: %s", strerror(errno));
        if (mg->rank != 0 && mg_link_recv_id((unsigned char *)&id, err, sizeof(err)) != 0) multi_gpu_fail(mg, "%s", err);
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const double deadline = mg_now() + mg->timeout_s;
    r = ncclCommInitRankConfig(&mg->comm, mg->nproc, id, mg->rank, &config);
    if (r != ncclSuccess && r != ncclInProgress)
        multi_gpu_fail(mg, "NCCL: ncclCommInitRankConfig: %s (%s)", ncclGetErrorString(r), ncclGetLastError(NULL));
    mg->comm_ready = 1;  // from here on an exit aborts it
    mg_current = mg;
    mg_link.abort_comm = mg_abort_comm;
    atexit(mg_atexit);  // again: after CUDA's own exit handler, so it runs before it
    mg_nccl_settle(mg, r, "creating the communicator (ncclCommInitRankConfig)", deadline);
    mg_link_id_used();
    cudaError_t ce = cudaStreamCreateWithFlags(&mg->stream, cudaStreamNonBlocking);
    if (ce == cudaSuccess) ce = cudaEventCreateWithFlags(&mg->done, cudaEventDisableTiming);
    if (ce == cudaSuccess) ce = cudaMalloc((void **)&mg->dev_value, sizeof(double));
    if (ce == cudaSuccess) ce = cudaMallocHost((void **)&mg->host_value, sizeof(double));
    if (ce != cudaSuccess) multi_gpu_fail(mg, "CUDA: the buffers of the host sums: %s", cudaGetErrorString(ce));
#else
    (void)mg;
#endif
}

// ----------------------------------------------------------------------------------------
// the gradients' and parameters' collectives: each is enqueued on a CUDA stream (a
// cudaStream_t, passed as void *) and returns once NCCL has taken it, without waiting for the
// GPU; multi_gpu_wait waits, polling. For one process every call is a no-op. Averages are
// ncclAvg: on two processes every element is the same a/2 + b/2 whichever collective computes
// it, so ZeRO-0 and ZeRO-1, bucketed or not, give bitwise the same gradients; on more, NCCL's
// summation order can differ between collectives (by rounding), while one configuration
// repeats its bits.

#ifdef MULTI_GPU
// an NCCL call's result: taken (ncclSuccess), or in progress until settled; an error ends the run
static inline void mg_nccl_enqueued(MultiGpu *mg, ncclResult_t r, const char *what) {
    if (r != ncclSuccess && r != ncclInProgress)
        multi_gpu_fail(mg, "NCCL: %s: %s (%s)", what, ncclGetErrorString(r), ncclGetLastError(mg->comm));
    mg_nccl_settle(mg, r, what, mg_now() + mg->timeout_s);
}
#endif

// fp32 buf[0..n) averaged over the ranks, in place, on every rank (ZeRO-0).
static inline void multi_gpu_all_reduce_avg(MultiGpu *mg, float *buf, size_t n, void *stream) {
#ifdef MULTI_GPU
    if (mg->nproc <= 1) return;
    mg_nccl_enqueued(mg, ncclAllReduce(buf, buf, n, ncclFloat, ncclAvg, mg->comm, (cudaStream_t)stream),
                     "ncclAllReduce of the gradients");
#else
    (void)mg; (void)buf; (void)n; (void)stream;
#endif
}

// fp32 buf of nproc slices of `slice` floats: this rank's slice becomes the average over the
// ranks of their copies of it, in place (ZeRO-1); the other slices keep this rank's own values.
static inline void multi_gpu_reduce_scatter_avg(MultiGpu *mg, float *buf, size_t slice, void *stream) {
#ifdef MULTI_GPU
    if (mg->nproc <= 1) return;
    mg_nccl_enqueued(mg, ncclReduceScatter(buf, buf + (size_t)mg->rank * slice, slice, ncclFloat, ncclAvg, mg->comm,
                                           (cudaStream_t)stream), "ncclReduceScatter of the gradients");
#else
    (void)mg; (void)buf; (void)slice; (void)stream;
#endif
}

// buf of nproc slices of slice_bytes: every rank's slice r becomes rank r's, in place (ZeRO-1:
// the parameters each rank updated; the gradient norm's partial sums; -tp 1: every rank's lnf
// and targets for the vocab-parallel LM head). A copy: exact.
static inline void multi_gpu_all_gather(MultiGpu *mg, void *buf, size_t slice_bytes, void *stream) {
#ifdef MULTI_GPU
    if (mg->nproc <= 1) return;
    mg_nccl_enqueued(mg, ncclAllGather((char *)buf + (size_t)mg->rank * slice_bytes, buf, slice_bytes, ncclUint8,
                                       mg->comm, (cudaStream_t)stream), "ncclAllGather");
#else
    (void)mg; (void)buf; (void)slice_bytes; (void)stream;
#endif
}

// One bucket of fp32 gradients (llmc/zero.h's pieces of buf) averaged in one NCCL group: a piece
// of owner -1 on every rank (ncclAllReduce), one of owner r onto rank r (ncclReduce: ZeRO-1,
// where only the owner's slice is used; the others' copies keep their own values).
static inline void multi_gpu_reduce_bucket(MultiGpu *mg, float *buf, const ZeroPiece *pieces, int n, void *stream) {
#ifdef MULTI_GPU
    if (mg->nproc <= 1 || n == 0) return;
    const cudaStream_t st = (cudaStream_t)stream;
    mg_nccl_enqueued(mg, ncclGroupStart(), "ncclGroupStart of a gradient bucket");
    for (int i = 0; i < n; i++) {
        float *p = buf + pieces[i].offset;
        const ncclResult_t r = pieces[i].owner < 0
                                   ? ncclAllReduce(p, p, pieces[i].count, ncclFloat, ncclAvg, mg->comm, st)
                                   : ncclReduce(p, p, pieces[i].count, ncclFloat, ncclAvg, pieces[i].owner, mg->comm, st);
        if (r != ncclSuccess && r != ncclInProgress)
            multi_gpu_fail(mg, "NCCL: a gradient bucket's %s: %s (%s)", pieces[i].owner < 0 ? "ncclAllReduce" : "ncclReduce",
                           ncclGetErrorString(r), ncclGetLastError(mg->comm));
    }
    mg_nccl_enqueued(mg, ncclGroupEnd(), "a gradient bucket (ncclGroupEnd)");
#else
    (void)mg; (void)buf; (void)pieces; (void)n; (void)stream;
#endif
}

// Returns when stream's work so far is done; polls NCCL's state and the deadline meanwhile,
// so that a failed process cannot hang this one (several processes; one: a no-op, the caller
// synchronizes as it likes).
static inline void multi_gpu_wait(MultiGpu *mg, void *stream, const char *what) {
#ifdef MULTI_GPU
    if (mg->nproc <= 1) return;
    mg_wait_stream(mg, (cudaStream_t)stream, what);
#else
    (void)mg; (void)stream; (void)what;
#endif
}

// In place, on stream: buf holds nproc blocks of n floats; afterwards this rank's block (at
// rank * n) is the sum over the ranks of theirs (-tp 1: the LM head's partial d(lnf)).
// Enqueued, not waited for (multi_gpu_wait).
static inline void multi_gpu_reduce_scatter_sum(MultiGpu *mg, float *buf, size_t n, void *stream) {
#ifdef MULTI_GPU
    if (mg->nproc <= 1) return;
    mg_nccl_enqueued(mg, ncclReduceScatter(buf, buf + (size_t)mg->rank * n, n, ncclFloat, ncclSum, mg->comm,
                                           (cudaStream_t)stream), "ncclReduceScatter of the LM head's d(lnf)");
#else
    (void)mg; (void)buf; (void)n; (void)stream;
#endif
}

// flce_comm's allreduce over this run's communicator (user: the MultiGpu), for flce's
// vocab_parallel calls (-tp 1): ncclAllReduce in place on the call's stream. Its enqueue is
// polled (a nonblocking communicator: NCCL errors and the deadline end the process with a
// message, never a hang); its completion is not waited for, so that flce's chunks stay
// asynchronous: the caller waits with multi_gpu_wait before its next blocking CUDA call. Device
// fp32 buffers only (what flce's GPU calls pass): -1 for anything else.
static inline int multi_gpu_flce_allreduce(void *user, void *buf, size_t count, flce_comm_dtype dtype, flce_comm_op op,
                                           void *cuda_stream) {
    MultiGpu *mg = (MultiGpu *)user;
    if (mg == NULL || dtype != FLCE_COMM_FP32) return -1;
    if (mg->nproc <= 1 || count == 0) return 0;
#ifdef MULTI_GPU
    if (!mg->comm_ready) return -1;
    mg_nccl_enqueued(mg, ncclAllReduce(buf, buf, count, ncclFloat, op == FLCE_COMM_MAX ? ncclMax : ncclSum, mg->comm,
                                       (cudaStream_t)cuda_stream), "ncclAllReduce of flce's vocab-parallel statistics");
    return 0;
#else
    (void)buf; (void)op; (void)cuda_stream;
    return -1;
#endif
}

// The flce_comm of multi_gpu_flce_allreduce over mg (for flce_set_comm).
static inline flce_comm multi_gpu_flce_comm(MultiGpu *mg) {
    flce_comm c;
    c.user = mg;
    c.allreduce = multi_gpu_flce_allreduce;
    return c;
}

// A host value summed over the ranks (NCCL on a small device buffer: no MPI needed).
static inline double multi_gpu_sum(MultiGpu *mg, double x) {
#ifdef MULTI_GPU
    if (mg->nproc <= 1) return x;
    if (!mg->comm_ready) multi_gpu_fail(mg, "multi_gpu_sum before multi_gpu_init_comm (a bug)");
    *mg->host_value = x;
    cudaError_t ce = cudaMemcpyAsync(mg->dev_value, mg->host_value, sizeof(double), cudaMemcpyHostToDevice, mg->stream);
    if (ce != cudaSuccess) multi_gpu_fail(mg, "CUDA: a host sum's copy: %s", cudaGetErrorString(ce));
    const ncclResult_t r = ncclAllReduce(mg->dev_value, mg->dev_value, 1, ncclDouble, ncclSum, mg->comm, mg->stream);
    mg_nccl_settle(mg, r, "ncclAllReduce of a host value", mg_now() + mg->timeout_s);
    ce = cudaMemcpyAsync(mg->host_value, mg->dev_value, sizeof(double), cudaMemcpyDeviceToHost, mg->stream);
    if (ce != cudaSuccess) multi_gpu_fail(mg, "CUDA: a host sum's copy: %s", cudaGetErrorString(ce));
    mg_wait_stream(mg, mg->stream, "ncclAllReduce of a host value");
    return *mg->host_value;
#else
    (void)mg;
    return x;
#endif
}

// Every rank reaches it before any leaves (after multi_gpu_init_comm).
static inline void multi_gpu_barrier(MultiGpu *mg) {
    if (mg->nproc > 1) multi_gpu_sum(mg, 0.0);
}

// multi_gpu_barrier as a callback (CheckpointWrite's barrier)
static inline void multi_gpu_barrier_cb(void *mg) {
    multi_gpu_barrier((MultiGpu *)mg);
}

// TRAIN_FAULT at the start of training step `step` (1-based): exit and kill happen here; the
// return value is MG_FAULT_CUDA when the caller is to make a CUDA call fail, else MG_FAULT_NONE.
static inline int multi_gpu_fault(const MultiGpu *mg, int step) {
    if (mg->fault_step != step || mg->fault_rank != mg->rank) return MG_FAULT_NONE;
    if (mg->fault_mode == MG_FAULT_KILL) {
        fflush(stdout);
        raise(SIGKILL);
    }
    if (mg->fault_mode == MG_FAULT_EXIT)
        multi_gpu_fail(mg, "TRAIN_FAULT: rank %d stops at step %d (an injected failure, a testing aid)", mg->rank, step);
    return mg->fault_mode;
}

// The end of a run: every rank there, the communicator and MPI closed, the link's goodbyes.
static inline void multi_gpu_finish(MultiGpu *mg) {
#ifdef MULTI_GPU
    if (mg->comm_ready) {
        multi_gpu_barrier(mg);
        const double deadline = mg_now() + mg->timeout_s;
        mg_nccl_settle(mg, ncclCommFinalize(mg->comm), "ncclCommFinalize", deadline);
        mg->comm_ready = 0;
        const ncclResult_t r = ncclCommDestroy(mg->comm);
        if (r != ncclSuccess) multi_gpu_fail(mg, "NCCL: ncclCommDestroy: %s", ncclGetErrorString(r));
        cudaEventDestroy(mg->done);
        cudaStreamDestroy(mg->stream);
        cudaFree(mg->dev_value);
        cudaFreeHost(mg->host_value);
    }
#endif
    mg_link_finish();
    mg_link.finished = 1;
#ifdef USE_MPI
    if (mg_mpi_active) {
        mg_mpi_active = 0;
        MPI_Finalize();
    }
#endif
    (void)mg;
}

#endif // LLMC_MULTI_GPU_H
