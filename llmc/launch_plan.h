/*
launch_plan.h - what a run's processes are asked to be, from the flags and the environment,
before anything starts: how many there are, which one this is, its GPU on its host, and how
they are to meet (llmc/rendezvous.h). Checked whole, touching nothing beyond a stat of -pf, so
that a wrong flag or variable stops the run with a message before any network or GPU is used.

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
Environment: TRAIN_COMM_TIMEOUT (seconds, default 300), the longest wait on another process;
TRAIN_FAULT (llmc/fault.h), a testing aid.
Builds: MULTI_GPU (NCCL) runs several processes; USE_MPI (with it) adds -pi mpi. Without
MULTI_GPU the trainer runs one process, and a request for more is an error that says so
(launch_plan_check_build). C11, no CUDA, no NCCL: test_train_host checks every flag line.
*/
#ifndef LLMC_LAUNCH_PLAN_H
#define LLMC_LAUNCH_PLAN_H

#include "utils.h"  // first: it sets the POSIX feature macros

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fault.h"  // TRAIN_FAULT

#if defined(USE_MPI) && !defined(MULTI_GPU)
#error "USE_MPI (mpirun's ranks) needs MULTI_GPU (NCCL)"
#endif

#define LAUNCH_MAX_PROCS 65536
#define LAUNCH_DEFAULT_PORT 12345
#define LAUNCH_DEFAULT_TIMEOUT_S 300

// how the processes meet: LAUNCH_SINGLE (0: what memset gives) when there is one
enum { LAUNCH_SINGLE = 0, LAUNCH_MPI = 1, LAUNCH_FS = 2, LAUNCH_TCP = 3 };

// What the flags and the environment ask for; launch_plan fills it, touching nothing.
typedef struct {
    int method;               // LAUNCH_*; LAUNCH_SINGLE when there is one process
    int nproc, rank;          // fs, tcp: known now; mpi: from MPI_Init
    int local_rank;           // fs, tcp: the GPU index on this host
    int timeout_s;            // TRAIN_COMM_TIMEOUT
    Fault fault;              // TRAIN_FAULT
    char host[256];           // tcp: rank 0's address
    int port;
    char fs_dir[PATH_MAX];    // fs
    char why_mpi[96];         // mpi: what asked for it (for messages)
} LaunchPlan;

typedef const char *(*LaunchEnv)(const char *name);
static inline const char *launch_getenv(const char *name) { return getenv(name); }

// NAME from env as an integer in [min, max]: 1 and *out, 0 when unset, -1 with a message.
static inline int launch_env_int(LaunchEnv env, const char *name, long long min, long long max, int *out, char *err,
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

// -ps host[:port], [v6]:port: 0, or -1 with a message
static inline int launch_parse_server(const char *ps, char *host, size_t host_len, int *port, char *err,
                                      size_t err_len) {
    *port = LAUNCH_DEFAULT_PORT;
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
static inline int launch_launcher_size(LaunchEnv env, const char **name) {
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
static inline int launch_env_rank(void) {
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
static inline int launch_plan(LaunchPlan *p, int pn, int pr, int pg, const char *pi, const char *ps, const char *pf,
                              LaunchEnv env, char *err, size_t err_len) {
    memset(p, 0, sizeof(*p));
    if (env == NULL) env = launch_getenv;
    p->method = LAUNCH_SINGLE;
    p->nproc = 1;
    p->port = LAUNCH_DEFAULT_PORT;
    p->timeout_s = LAUNCH_DEFAULT_TIMEOUT_S;
    int method = -1;
    if (pi != NULL) {
        method = strcmp(pi, "mpi") == 0 ? LAUNCH_MPI : strcmp(pi, "fs") == 0 ? LAUNCH_FS
               : strcmp(pi, "tcp") == 0 ? LAUNCH_TCP : -2;
        if (method == -2) {
            llmc_set_error(err, err_len, "-pi %s: unknown init method (mpi, fs or tcp)", pi);
            return -1;
        }
    }
    if (ps != NULL && method != LAUNCH_TCP) {
        llmc_set_error(err, err_len, "-ps %s: only -pi tcp has a server address (-pi tcp -ps host[:port])", ps);
        return -1;
    }
    if (pf != NULL && method != LAUNCH_FS) {
        llmc_set_error(err, err_len, "-pf %s: only -pi fs has a shared directory (-pi fs -pf dir)", pf);
        return -1;
    }
    if (method == LAUNCH_TCP) {
        if (ps == NULL) {
            llmc_set_error(err, err_len, "-pi tcp needs -ps <address of rank 0's host>[:port]");
            return -1;
        }
        if (launch_parse_server(ps, p->host, sizeof(p->host), &p->port, err, err_len) != 0) return -1;
    }
    if (method == LAUNCH_FS) {
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
    if (launch_env_int(env, "TRAIN_COMM_TIMEOUT", 1, 604800, &p->timeout_s, err, err_len) < 0) return -1;
    if (fault_parse(env("TRAIN_FAULT"), LAUNCH_MAX_PROCS, &p->fault, err, err_len) != 0) return -1;

    const char *lname = NULL;
    const int lsize = launch_launcher_size(env, &lname);
    int ntasks = 0;  // srun's tasks of this job step (a batch script's own environment has none)
    if (launch_env_int(env, "SLURM_STEP_NUM_TASKS", 1, LAUNCH_MAX_PROCS, &ntasks, err, err_len) < 0) return -1;
    if (method == LAUNCH_MPI || (method < 0 && lsize > 1)) {
        if (pn >= 0 || pr >= 0 || pg > 0) {
            const char *flag = pn >= 0 ? "-pn" : pr >= 0 ? "-pr" : "-pg";
            const int value = pn >= 0 ? pn : pr >= 0 ? pr : pg;
            llmc_set_error(err, err_len, "%s %d: under %s the ranks and GPUs come from MPI (drop -pn, -pr and -pg, or "
                           "give -pi fs or -pi tcp to use the launcher only to start the processes)", flag, value,
                           method == LAUNCH_MPI ? "-pi mpi" : "mpirun");
            return -1;
        }
        p->method = LAUNCH_MPI;
        p->nproc = lsize > 0 ? lsize : 1;
        if (method == LAUNCH_MPI) snprintf(p->why_mpi, sizeof(p->why_mpi), "-pi mpi");
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
                const int has_n = launch_env_int(env, sets[k][0], 1, LAUNCH_MAX_PROCS, &n, err, err_len);
                const int has_r = launch_env_int(env, sets[k][1], 0, LAUNCH_MAX_PROCS - 1, &r, err, err_len);
                const int has_l = launch_env_int(env, sets[k][2], 0, LAUNCH_MAX_PROCS - 1, &l, err, err_len);
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
        p->method = nproc > 1 ? method : LAUNCH_SINGLE;
    }
    if (p->fault.step > 0 && p->method != LAUNCH_MPI && p->fault.rank >= p->nproc) {
        llmc_set_error(err, err_len, "TRAIN_FAULT=%s: rank %d, and the run has %d process%s", env("TRAIN_FAULT"),
                       p->fault.rank, p->nproc, p->nproc > 1 ? "es" : "");
        return -1;
    }
    return 0;
}

// The plan against this build: 0, or -1 with what the build lacks and what to do instead.
static inline int launch_plan_check_build(const LaunchPlan *p, char *err, size_t err_len) {
#ifndef MULTI_GPU
    if (p->method != LAUNCH_SINGLE) {
        char what[128];
        if (p->method == LAUNCH_MPI) snprintf(what, sizeof(what), "%s", p->why_mpi);
        else snprintf(what, sizeof(what), "%d processes", p->nproc);
        llmc_set_error(err, err_len, "%s: this trainer was built for one GPU (NCCL was not found at build time, or "
                       "NO_MULTI_GPU=1): rebuild with NCCL to run several processes", what);
        return -1;
    }
#elif !defined(USE_MPI)
    if (p->method == LAUNCH_MPI) {
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
static inline void launch_usage(FILE *out) {
#if defined(USE_MPI)
    fprintf(out, "This build: several GPUs with NCCL; -pi mpi (mpirun), fs and tcp.\n");
#elif defined(MULTI_GPU)
    fprintf(out, "This build: several GPUs with NCCL; -pi fs and tcp (no MPI: no -pi mpi).\n");
#else
    fprintf(out, "This build: one GPU (no NCCL): the -p flags can only describe one process.\n");
#endif
    fprintf(out, "Environment: TRAIN_COMM_TIMEOUT=<s> the longest wait on another process (default %d);\n"
                 "  TRAIN_FAULT=rank:step[:exit|cuda|kill] stops that rank at that step (a testing aid).\n",
            LAUNCH_DEFAULT_TIMEOUT_S);
}

#endif // LLMC_LAUNCH_PLAN_H
