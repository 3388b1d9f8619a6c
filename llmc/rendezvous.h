/*
rendezvous.h - how the processes of a run meet, and how a failure of one reaches the others:
under mpi through MPI (MPI_Init, MPI_Bcast of NCCL's id, MPI_Abort), under fs and tcp through a
link of our own between them (rank 0 and each other rank), which carries NCCL's id and a
failing process's last words. Everything a process knows of the others is in one Rendezvous;
rv_process points at the one whose exit path runs (atexit and signal handlers take no argument).

Order: rv_init (the plan's ranks, or MPI's under mpi), rv_join (fs, tcp: every process present,
a watcher thread started), rv_share_id (NCCL's id from rank 0, llmc/comm.h), rv_finish.

fs without stale ids: rank 0 may find files of an earlier run in DIR. Each other rank writes a
fresh random nonce (train_gpt_fs.hello.<rank>), and takes rank 0's file (train_gpt_fs.run) only
when it lists that nonce, so an id written for an earlier run is never used; every file is
written to a temporary and renamed (utils.h's atomic_write_signal_safe); rank 0 removes the id
once the communicator exists. One run per directory at a time. (On NFS a file can take the
attribute cache's time, up to about a minute, to be seen by another host: tcp learns of a
failure at once.)

Failures, never a hang: a process that exits before rv_finish (a bad file, a CUDA or NCCL error,
a non-finite loss, TRAIN_FAULT) tells the others on its way out (atexit): under tcp a message
over its connection to rank 0, which forwards it; under fs a file train_gpt_fs.abort.<run>; then
the communicator's abort (rv_on_abort), and MPI_Abort under mpi (mpirun stops the others). The
message carries the last lines the process wrote to stderr (a tee on stderr from the join on).
Each process's watcher thread prints it and exits 1 as soon as it arrives; under tcp also when a
connection closes without a goodbye (a process killed or crashed); under fs a crash signal
writes the abort file too, and only a SIGKILL is left to the deadline (TRAIN_COMM_TIMEOUT).
Every wait here polls against that deadline. No CUDA, no NCCL: test_train_host runs fs and tcp
between forked processes.
*/
#ifndef LLMC_RENDEZVOUS_H
#define LLMC_RENDEZVOUS_H

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
#include <time.h>
#include <unistd.h>

#ifdef USE_MPI
#include <mpi.h>
#endif

#include "launch_plan.h"

#define RV_ID_BYTES 128  // NCCL_UNIQUE_ID_BYTES
#define RV_MSG_MAX 1500  // a forwarded error message

// the link's frames (tcp)
typedef struct {
    uint32_t magic, type;
    int32_t rank;
    uint32_t len;
} RvFrame;
#define RV_FRAME_MAGIC 0x54475054u  // "TGPT"
enum { RV_HELLO = 1, RV_WELCOME, RV_REJECT, RV_ID, RV_ABORT, RV_BYE };

typedef struct {
    int method, rank, nproc;       // LAUNCH_*, and this process's place: the plan's, or MPI's
    int local_rank;                // its GPU index on its host
    int timeout_s;                 // the longest wait on another process
    // the link (fs, tcp)
    int active;                    // joined: exits tell the others
    int finished;                  // rv_finish ran: an exit is clean
    int failing;                   // this process is on its way out (atomics): the watcher stays quiet
    pthread_t watcher;
    int watcher_started, stop;     // stop: atomics
    pthread_mutex_t send_lock;
    int *fd, *bye;                 // tcp: rank 0 fd[k] for rank k; others fd[0], rank 0's
    char dir[PATH_MAX];            // fs
    uint64_t run, *nonce;          // fs: rank 0's nonce; nonce[k] of rank k
    char abort_path[PATH_MAX + 64], abort_tmp[PATH_MAX + 96], crash_msg[128];
    int id_ready;                  // atomics
    unsigned char id[RV_ID_BYTES];
    char tail[RV_MSG_MAX];         // the end of what this process wrote to stderr
    size_t tail_len;
    // the exit path
    int exit_handled;              // it ran (it is registered more than once)
    int mpi_active;                // 1: MPI_Init ran, 2: for several processes
    void (*abort_comm)(void *ctx); // the communicator's abort, once there is one (rv_on_abort)
    void *abort_ctx;
} Rendezvous;

// The Rendezvous of this process's exit path, its crash handler and its stderr tee: set where
// they are installed (rv_init under mpi, rv_join, rv_on_abort). It must outlive main().
static Rendezvous *rv_process = NULL;

// the clock and the sleep of every wait on another process (llmc/comm.h's too)
static inline double rv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline void rv_sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

// ----------------------------------------------------------------------------------------
// the link: how fs and tcp processes meet, exchange NCCL's id and learn of a failure

static inline uint64_t rv_random64(void) {
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
#define RV_HAVE_TEE 1
static ssize_t rv_tee_write(void *cookie, const char *buf, size_t n) {
    Rendezvous *rv = (Rendezvous *)cookie;
    size_t done = 0;
    while (done < n) {
        const ssize_t w = write(2, buf + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        done += (size_t)w;
    }
    const size_t cap = sizeof(rv->tail) - 1;
    if (n >= cap) {
        memcpy(rv->tail, buf + n - cap, cap);
        rv->tail_len = cap;
    } else {
        if (rv->tail_len + n > cap) {
            const size_t drop = rv->tail_len + n - cap;
            memmove(rv->tail, rv->tail + drop, rv->tail_len - drop);
            rv->tail_len -= drop;
        }
        memcpy(rv->tail + rv->tail_len, buf, n);
        rv->tail_len += n;
    }
    rv->tail[rv->tail_len] = 0;
    return (ssize_t)n;
}

static inline void rv_tee_stderr(Rendezvous *rv) {
    cookie_io_functions_t io;
    memset(&io, 0, sizeof(io));
    io.write = rv_tee_write;
    FILE *f = fopencookie(rv, "w", io);
    if (f == NULL) return;
    setvbuf(f, NULL, _IONBF, 0);
    fflush(stderr);
    stderr = f;
}
#else
#define RV_HAVE_TEE 0
static inline void rv_tee_stderr(Rendezvous *rv) { (void)rv; }
#endif

// The message this process's exit sends: the last (up to 4) lines it wrote to stderr.
static inline void rv_exit_message(const Rendezvous *rv, char *out, size_t len) {
    const char *t = rv->tail;
    size_t n = rv->tail_len;
    while (n > 0 && (t[n - 1] == '\n' || t[n - 1] == ' ')) n--;
    if (n == 0) {
        snprintf(out, len, "it exited before the end of the run%s", RV_HAVE_TEE ? " (it printed no error)" : "");
        return;
    }
    size_t start = n;
    for (int lines = 0; start > 0 && lines < 4; start--)
        if (t[start - 1] == '\n' && ++lines == 4) break;
    if (start == 0 && rv->tail_len == sizeof(rv->tail) - 1) {  // a cut line: from the next one
        const char *nl = (const char *)memchr(t, '\n', n);
        if (nl != NULL) start = (size_t)(nl - t) + 1;
    }
    snprintf(out, len, "%.*s", (int)(n - start), t + start);
}

// text to path through a temporary of this process's own (utils.h's atomic_write_signal_safe)
static inline int rv_write_file(const char *path, const char *text) {
    char tmp[PATH_MAX + 96];
    snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid());
    return atomic_write_signal_safe(path, tmp, text, strlen(text));
}

// The whole small file path into buf (NUL-terminated): its length, or -1.
static inline long rv_read_file(const char *path, char *buf, size_t cap) {
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

static inline void rv_fs_path(const Rendezvous *rv, char *out, size_t len, const char *what, uint64_t key) {
    snprintf(out, len, "%s/train_gpt_fs.%s.%016llx", rv->dir, what, (unsigned long long)key);
}
static inline void rv_fs_rank_path(const Rendezvous *rv, char *out, size_t len, const char *what, int rank) {
    snprintf(out, len, "%s/train_gpt_fs.%s.%d", rv->dir, what, rank);
}

// --- tcp frames ---

static inline int rv_send_all(int fd, const void *buf, size_t n) {
    size_t done = 0;
    while (done < n) {
        const ssize_t w = send(fd, (const char *)buf + done, n - done, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        done += (size_t)w;
    }
    return 0;
}

static inline int rv_send_frame(Rendezvous *rv, int fd, uint32_t type, int rank, const void *payload, size_t len) {
    if (fd < 0) return -1;
    RvFrame f = {RV_FRAME_MAGIC, type, rank, (uint32_t)len};
    pthread_mutex_lock(&rv->send_lock);
    const int rc = rv_send_all(fd, &f, sizeof(f)) == 0 && (len == 0 || rv_send_all(fd, payload, len) == 0) ? 0 : -1;
    pthread_mutex_unlock(&rv->send_lock);
    return rc;
}

// n bytes before deadline: 0, 1 at a clean end of stream before the first byte, -1 otherwise
static inline int rv_recv_all(int fd, void *buf, size_t n, double deadline) {
    size_t done = 0;
    while (done < n) {
        struct pollfd pfd = {fd, POLLIN, 0};
        const double left = deadline - rv_now();
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
static inline int rv_recv_frame(int fd, RvFrame *f, char *buf, size_t cap, double deadline) {
    const int rc = rv_recv_all(fd, f, sizeof(*f), deadline);
    if (rc != 0) return rc;
    if (f->magic != RV_FRAME_MAGIC || f->len >= cap) return -1;
    if (f->len > 0 && rv_recv_all(fd, buf, f->len, deadline) != 0) return -1;
    buf[f->len] = 0;
    return 0;
}

// --- a peer's failure, and this process's own ---

// The watcher's end: another process failed (rank, its message); rank 0 forwards it first.
static inline void rv_peer_failed(Rendezvous *rv, int rank, const char *msg) {
    if (__atomic_load_n(&rv->failing, __ATOMIC_SEQ_CST) || __atomic_load_n(&rv->stop, __ATOMIC_SEQ_CST))
        return;
    __atomic_store_n(&rv->failing, 1, __ATOMIC_SEQ_CST);
    if (rv->rank == 0 && rv->method == LAUNCH_TCP) {
        for (int k = 1; k < rv->nproc; k++)
            if (k != rank && !rv->bye[k]) rv_send_frame(rv, rv->fd[k], RV_ABORT, rank, msg, strlen(msg));
    }
    char text[3 * RV_MSG_MAX];  // one write, its lines indented
    size_t n = (size_t)snprintf(text, sizeof(text), "Error: rank %d of %d stopped the run:\n  ", rank, rv->nproc);
    for (const char *c = msg; *c && n + 8 < sizeof(text); c++) {
        text[n++] = *c;
        if (*c == '\n') text[n++] = ' ', text[n++] = ' ';
    }
    snprintf(text + n, sizeof(text) - n, "\n(rank %d stops too)\n", rv->rank);
    fflush(stdout);
    fputs(text, stderr);
    fflush(stderr);
    _exit(1);
}

// Tells the others that this process is failing, with msg (tcp: a frame, fs: a file).
static inline void rv_send_abort(Rendezvous *rv, const char *msg) {
    if (!rv->active || rv->finished) return;
    if (__atomic_exchange_n(&rv->failing, 1, __ATOMIC_SEQ_CST)) return;
    if (rv->method == LAUNCH_TCP) {
        if (rv->rank == 0) {
            for (int k = 1; k < rv->nproc; k++)
                if (!rv->bye[k]) rv_send_frame(rv, rv->fd[k], RV_ABORT, 0, msg, strlen(msg));
        } else {
            rv_send_frame(rv, rv->fd[0], RV_ABORT, rv->rank, msg, strlen(msg));
        }
    } else {
        char text[RV_MSG_MAX + 32];
        snprintf(text, sizeof(text), "%d\n%s", rv->rank, msg);
        atomic_write_signal_safe(rv->abort_path, rv->abort_tmp, text, strlen(text));
    }
}

// fs: a crash signal writes the abort file, then takes its default course
static void rv_crash_handler(int sig) {
    Rendezvous *rv = rv_process;
    if (!__atomic_exchange_n(&rv->failing, 1, __ATOMIC_SEQ_CST))
        atomic_write_signal_safe(rv->abort_path, rv->abort_tmp, rv->crash_msg, strlen(rv->crash_msg));
    signal(sig, SIG_DFL);
    raise(sig);
}

// atexit: an exit before rv_finish is a failure; tell the others, abort NCCL (and MPI).
// Registered at MPI's start or the join, and again once NCCL exists (rv_on_abort), so that it
// runs before CUDA's teardown.
static void rv_atexit(void) {
    Rendezvous *rv = rv_process;
    if (rv == NULL || rv->exit_handled || rv->finished) return;
    rv->exit_handled = 1;
    fflush(stdout);
    char msg[RV_MSG_MAX];
    rv_exit_message(rv, msg, sizeof(msg));
    rv_send_abort(rv, msg);
    if (rv->abort_comm != NULL) rv->abort_comm(rv->abort_ctx);
#ifdef USE_MPI
    if (rv->mpi_active > 1) MPI_Abort(MPI_COMM_WORLD, 1);  // (one process: a plain exit says it)
#endif
}

static void *rv_watch(void *arg);

// --- joining ---

// -ps host:port as stream socket addresses (*res for freeaddrinfo): getaddrinfo's code
static inline int rv_resolve(const LaunchPlan *p, struct addrinfo **res) {
    char port[16];
    snprintf(port, sizeof(port), "%d", p->port);
    struct addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    *res = NULL;
    return getaddrinfo(p->host, port, &hints, res);
}

static inline int rv_tcp_listen(const LaunchPlan *p, char *err, size_t err_len) {
    struct addrinfo *res = NULL;
    const int g = rv_resolve(p, &res);
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
static inline int rv_tcp_connect_once(const LaunchPlan *p, int *why, int *resolve_error) {
    struct addrinfo *res = NULL;
    const int g = rv_resolve(p, &res);
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

static inline void rv_missing_ranks(char *out, size_t len, const int *present, int nproc) {
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

static inline int rv_tcp_join(Rendezvous *rv, const LaunchPlan *p, char *err, size_t err_len) {
    const double deadline = rv_now() + p->timeout_s;
    char buf[RV_MSG_MAX + 64];
    RvFrame f;
    if (p->rank == 0) {
        const int lfd = rv_tcp_listen(p, err, err_len);
        if (lfd < 0) return -1;
        int joined = 0;
        while (joined < p->nproc - 1) {
            struct pollfd pfd = {lfd, POLLIN, 0};
            const double left = deadline - rv_now();
            if (left <= 0) {
                char missing[128];
                rv_missing_ranks(missing, sizeof(missing), rv->bye, p->nproc);
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
            int n = 0, ok = rv_recv_frame(fd, &f, buf, sizeof(buf), rv_now() + 10) == 0 && f.type == RV_HELLO &&
                           sscanf(buf, "%d", &n) == 1;
            const char *why = NULL;
            char text[256];
            if (!ok) why = "no greeting";  // not one of ours: ignored
            else if (n != p->nproc) {
                snprintf(text, sizeof(text), "rank %d has -pn %d, and rank 0 has -pn %d", f.rank, n, p->nproc);
                why = text;
            } else if (f.rank < 1 || f.rank >= p->nproc || rv->bye[f.rank]) {
                snprintf(text, sizeof(text), "two processes say they are rank %d (-pr given twice?)", f.rank);
                why = text;
            }
            if (why != NULL && ok) {
                rv_send_frame(rv, fd, RV_REJECT, 0, why, strlen(why));
                close(fd);
                llmc_set_error(err, err_len, "rank 0: %s", why);
                close(lfd);
                return -1;
            }
            if (why != NULL) {
                close(fd);
                continue;
            }
            rv->fd[f.rank] = fd;
            rv->bye[f.rank] = 1;  // (joined; reset below)
            joined++;
        }
        close(lfd);
        for (int k = 1; k < p->nproc; k++) {
            rv->bye[k] = 0;
            rv_send_frame(rv, rv->fd[k], RV_WELCOME, 0, NULL, 0);
        }
        return 0;
    }
    int why = ECONNREFUSED, gai = 0, fd = -1;
    while (fd < 0) {
        fd = rv_tcp_connect_once(p, &why, &gai);
        if (fd >= 0) break;
        if (rv_now() > deadline) {
            if (gai != 0)
                llmc_set_error(err, err_len, "rank %d: -ps %s: %s", p->rank, p->host, gai_strerror(gai));
            else
                llmc_set_error(err, err_len, "rank %d: rank 0 did not answer at %s:%d within %d s (%s): is it running "
                               "with -pi tcp -ps %s? (TRAIN_COMM_TIMEOUT sets the wait)", p->rank, p->host, p->port,
                               p->timeout_s, strerror(why), p->host);
            return -1;
        }
        rv_sleep_us(gai != 0 ? 1000000 : 200000);
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    char hello[32];
    snprintf(hello, sizeof(hello), "%d", p->nproc);
    rv->fd[0] = fd;
    if (rv_send_frame(rv, fd, RV_HELLO, p->rank, hello, strlen(hello)) != 0) {
        llmc_set_error(err, err_len, "rank %d: lost rank 0 at %s:%d: %s", p->rank, p->host, p->port, strerror(errno));
        return -1;
    }
    const int rc = rv_recv_frame(fd, &f, buf, sizeof(buf), deadline);
    if (rc == 0 && f.type == RV_WELCOME) return 0;
    if (rc == 0 && f.type == RV_REJECT)
        llmc_set_error(err, err_len, "rank %d: rank 0 refused it: %s", p->rank, buf);
    else if (rc == 0 && f.type == RV_ABORT)
        llmc_set_error(err, err_len, "rank %d: rank %d stopped the run: %s", p->rank, f.rank, buf);
    else
        llmc_set_error(err, err_len, "rank %d: rank 0 at %s:%d %s", p->rank, p->host, p->port,
                       rc > 0 ? "closed the connection before the run began" : "did not welcome it in time");
    return -1;
}

// fs: the run file rank 0 writes (rv->nonce as read from the hellos, id or none)
static inline int rv_fs_publish(Rendezvous *rv, const unsigned char *id) {
    const size_t cap = 128 + 17 * (size_t)rv->nproc + 2 * RV_ID_BYTES;
    char *text = (char *)malloc(cap), path[PATH_MAX + 64];
    if (text == NULL) return -1;
    size_t n = (size_t)snprintf(text, cap, "train_gpt fs 1\n%016llx %d\n", (unsigned long long)rv->run,
                                rv->nproc);
    for (int k = 1; k < rv->nproc; k++)
        n += (size_t)snprintf(text + n, cap - n, "%016llx%c", (unsigned long long)rv->nonce[k],
                              k + 1 < rv->nproc ? ' ' : '\n');
    if (id == NULL) n += (size_t)snprintf(text + n, cap - n, "-\n");
    else {
        for (int i = 0; i < RV_ID_BYTES; i++) n += (size_t)snprintf(text + n, cap - n, "%02x", id[i]);
        n += (size_t)snprintf(text + n, cap - n, "\n");
    }
    snprintf(path, sizeof(path), "%s/train_gpt_fs.run", rv->dir);
    const int rc = rv_write_file(path, text);
    free(text);
    return rc;
}

// fs: reads the run file: 1 when it is rank 0's for this process (its own fresh nonce at its
// rank; unless learn, this run's), learning the run when learn and the id into id when given;
// 0 otherwise (none yet, an earlier run's, or half of one).
static inline int rv_fs_read_run(Rendezvous *rv, int learn, unsigned char *id) {
    char path[PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/train_gpt_fs.run", rv->dir);
    const size_t cap = 128 + 17 * (size_t)rv->nproc + 2 * RV_ID_BYTES;
    char *text = (char *)malloc(cap);
    if (text == NULL || rv_read_file(path, text, cap) <= 0) {
        free(text);
        return 0;
    }
    int ok = strncmp(text, "train_gpt fs 1\n", 15) == 0;
    char *s = text + 15, *end = NULL;
    const unsigned long long run = ok ? strtoull(s, &end, 16) : 0;
    ok = ok && end != s && *end == ' ';
    const long nproc = ok ? strtol(end + 1, &s, 10) : 0;
    ok = ok && nproc == rv->nproc && *s == '\n';
    unsigned long long mine = 0;
    for (int k = 1; ok && k < rv->nproc; k++) {
        const unsigned long long v = strtoull(s + 1, &end, 16);
        ok = end == s + 17;
        if (k == rv->rank) mine = v;
        s = end;
    }
    ok = ok && *s == '\n' && mine == rv->nonce[rv->rank] && (learn || run == rv->run);
    if (ok && id != NULL) {
        s++;
        ok = strlen(s) >= 2 * RV_ID_BYTES;
        for (int i = 0; ok && i < RV_ID_BYTES; i++) {
            unsigned v = 0;
            ok = sscanf(s + 2 * i, "%2x", &v) == 1;
            id[i] = (unsigned char)v;
        }
    }
    if (ok && learn) rv->run = run;
    free(text);
    return ok;
}

static inline int rv_fs_join(Rendezvous *rv, const LaunchPlan *p, char *err, size_t err_len) {
    const double deadline = rv_now() + p->timeout_s;
    char path[PATH_MAX + 64], text[256];
    const int n = p->nproc;
    if (p->rank == 0) {
        rv->run = rv_random64();
        int *acked = (int *)calloc((size_t)n, sizeof(int));
        uint64_t *seen = (uint64_t *)calloc((size_t)n, sizeof(uint64_t));
        int published = 0, all_acked = 0;
        while (!all_acked) {
            int all = 1, changed = 0;
            for (int k = 1; k < n; k++) {  // the hellos: a new nonce (a stale one replaced) republishes
                unsigned long long v = 0;
                int kn = 0;
                rv_fs_rank_path(rv, path, sizeof(path), "hello", k);
                if (rv_read_file(path, text, sizeof(text)) > 0 && sscanf(text, "%llx %d", &v, &kn) == 2 && kn == n &&
                    v != seen[k]) {
                    seen[k] = v;
                    changed = 1;
                }
                all = all && seen[k] != 0;
            }
            if (all && (changed || !published)) {
                memcpy(rv->nonce, seen, (size_t)n * sizeof(uint64_t));
                if (rv_fs_publish(rv, NULL) != 0) {
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
                rv_fs_rank_path(rv, path, sizeof(path), "ack", k);
                acked[k] = published && rv_read_file(path, text, sizeof(text)) > 0 &&
                           sscanf(text, "%llx %llx", &r, &v) == 2 && r == rv->run && v == rv->nonce[k];
                all_acked = all_acked && acked[k];
            }
            if (all_acked) break;
            if (rv_now() > deadline) {
                char missing[128];
                rv_missing_ranks(missing, sizeof(missing), acked, n);
                llmc_set_error(err, err_len, "rank 0: ranks %s did not join through -pf %s within %d s (started with -pi "
                               "fs -pf %s -pn %d -pr <rank>? TRAIN_COMM_TIMEOUT sets the wait)", missing, p->fs_dir,
                               p->timeout_s, p->fs_dir, n);
                free(acked);
                free(seen);
                return -1;
            }
            rv_sleep_us(50000);
        }
        for (int k = 1; k < n; k++) {
            rv_fs_rank_path(rv, path, sizeof(path), "hello", k);
            unlink(path);
            rv_fs_rank_path(rv, path, sizeof(path), "ack", k);
            unlink(path);
        }
        free(acked);
        free(seen);
        return 0;
    }
    const uint64_t mine = rv_random64();
    rv->nonce[p->rank] = mine;
    rv_fs_rank_path(rv, path, sizeof(path), "hello", p->rank);
    snprintf(text, sizeof(text), "%016llx %d\n", (unsigned long long)mine, n);
    if (rv_write_file(path, text) != 0) {
        llmc_set_error(err, err_len, "rank %d: cannot write in -pf %s: %s", p->rank, p->fs_dir, strerror(errno));
        return -1;
    }
    while (!rv_fs_read_run(rv, 1, NULL)) {
        if (rv_now() > deadline) {
            llmc_set_error(err, err_len, "rank %d: no word from rank 0 in -pf %s within %d s (is rank 0 running with "
                           "-pi fs -pf %s -pn %d? TRAIN_COMM_TIMEOUT sets the wait)", p->rank, p->fs_dir, p->timeout_s,
                           p->fs_dir, n);
            return -1;
        }
        rv_sleep_us(50000);
    }
    rv_fs_rank_path(rv, path, sizeof(path), "ack", p->rank);
    snprintf(text, sizeof(text), "%016llx %016llx\n", (unsigned long long)rv->run, (unsigned long long)mine);
    if (rv_write_file(path, text) != 0) {
        llmc_set_error(err, err_len, "rank %d: cannot write in -pf %s: %s", p->rank, p->fs_dir, strerror(errno));
        return -1;
    }
    return 0;
}

// Joins the other processes of an fs or tcp plan (no-op otherwise; rv as rv_init left it): each
// is present, the watcher runs, exits tell the others. 0, or -1 with a message.
static inline int rv_join(Rendezvous *rv, const LaunchPlan *p, char *err, size_t err_len) {
    if (p->method != LAUNCH_FS && p->method != LAUNCH_TCP) return 0;
    rv->method = p->method;
    rv->rank = p->rank;
    rv->nproc = p->nproc;
    rv->timeout_s = p->timeout_s;
    pthread_mutex_init(&rv->send_lock, NULL);
    rv->fd = (int *)malloc((size_t)p->nproc * sizeof(int));
    rv->bye = (int *)calloc((size_t)p->nproc, sizeof(int));
    rv->nonce = (uint64_t *)calloc((size_t)p->nproc, sizeof(uint64_t));
    if (rv->fd == NULL || rv->bye == NULL || rv->nonce == NULL) {
        llmc_set_error(err, err_len, "out of memory for %d processes", p->nproc);
        return -1;
    }
    for (int k = 0; k < p->nproc; k++) rv->fd[k] = -1;
    snprintf(rv->dir, sizeof(rv->dir), "%s", p->fs_dir);
    const int rc = p->method == LAUNCH_TCP ? rv_tcp_join(rv, p, err, err_len) : rv_fs_join(rv, p, err, err_len);
    if (rc != 0) return -1;
    rv_process = rv;
    if (p->method == LAUNCH_FS) {
        rv_fs_path(rv, rv->abort_path, sizeof(rv->abort_path), "abort", rv->run);
        snprintf(rv->abort_tmp, sizeof(rv->abort_tmp), "%s.%ld.tmp", rv->abort_path, (long)getpid());
        snprintf(rv->crash_msg, sizeof(rv->crash_msg), "%d\nit was killed by a signal (a crash)", p->rank);
        const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
        for (int i = 0; i < 5; i++) signal(sigs[i], rv_crash_handler);
    }
    rv_tee_stderr(rv);
    rv->active = 1;
    atexit(rv_atexit);
    if (pthread_create(&rv->watcher, NULL, rv_watch, rv) != 0) {
        llmc_set_error(err, err_len, "cannot start the watcher thread");
        return -1;
    }
    rv->watcher_started = 1;
    return 0;
}

// The watcher: another process's failure (a message, or a connection lost) ends this one.
static void *rv_watch(void *arg) {
    Rendezvous *rv = (Rendezvous *)arg;
    char buf[RV_MSG_MAX + 64];
    const int n = rv->nproc;
    struct pollfd *pfd = (struct pollfd *)calloc((size_t)n, sizeof(struct pollfd));
    int *who = (int *)calloc((size_t)n, sizeof(int));
    while (!__atomic_load_n(&rv->stop, __ATOMIC_SEQ_CST)) {
        if (rv->method == LAUNCH_FS) {  // the run's abort file, which any failing rank writes
            if (rv_read_file(rv->abort_path, buf, sizeof(buf)) > 0) {
                int r = -1;
                char *nl = strchr(buf, '\n');
                if (sscanf(buf, "%d", &r) == 1 && nl != NULL && r != rv->rank) rv_peer_failed(rv, r, nl + 1);
            }
            rv_sleep_us(100000);
            continue;
        }
        int m = 0;
        for (int k = 0; k < n; k++)
            if (rv->fd[k] >= 0) {
                pfd[m].fd = rv->fd[k];
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
            RvFrame f;
            const int rc = rv_recv_frame(rv->fd[k], &f, buf, sizeof(buf), rv_now() + 10);
            if (rc == 0 && f.type == RV_ID && rv->rank != 0 && f.len == RV_ID_BYTES) {
                memcpy(rv->id, buf, RV_ID_BYTES);
                __atomic_store_n(&rv->id_ready, 1, __ATOMIC_SEQ_CST);
            } else if (rc == 0 && f.type == RV_BYE) {
                rv->bye[k] = 1;
            } else if (rc == 0 && f.type == RV_ABORT) {
                rv_peer_failed(rv, f.rank, buf);
            } else if (rc != 0) {
                if (__atomic_load_n(&rv->stop, __ATOMIC_SEQ_CST)) break;
                if (!rv->bye[k] && !__atomic_load_n(&rv->failing, __ATOMIC_SEQ_CST))
                    rv_peer_failed(rv, k, "its connection closed without a message (killed, or crashed)");
                close(rv->fd[k]);  // a goodbye came first: a clean end
                rv->fd[k] = -1;
            }
        }
    }
    free(pfd);
    free(who);
    return NULL;
}

// rank 0: the id to every other process
static inline int rv_send_id(Rendezvous *rv, const unsigned char *id) {
    if (rv->method == LAUNCH_FS) return rv_fs_publish(rv, id);
    for (int k = 1; k < rv->nproc; k++)
        if (rv_send_frame(rv, rv->fd[k], RV_ID, 0, id, RV_ID_BYTES) != 0) return -1;
    return 0;
}

// ranks > 0: rank 0's id, before the deadline: 0, or -1 with a message
static inline int rv_recv_id(Rendezvous *rv, unsigned char *id, char *err, size_t err_len) {
    const double deadline = rv_now() + rv->timeout_s;
    for (;;) {
        if (rv->method == LAUNCH_FS) {
            if (rv_fs_read_run(rv, 0, id)) return 0;
        } else if (__atomic_load_n(&rv->id_ready, __ATOMIC_SEQ_CST)) {
            memcpy(id, rv->id, RV_ID_BYTES);
            return 0;
        }
        if (rv_now() > deadline) {
            llmc_set_error(err, err_len, "rank %d: no NCCL id from rank 0 within %d s (TRAIN_COMM_TIMEOUT)", rv->rank,
                           rv->timeout_s);
            return -1;
        }
        rv_sleep_us(rv->method == LAUNCH_FS ? 50000 : 1000);
    }
}

// rank 0 under fs, once the communicator exists (every rank read the id): the id file goes
static inline void rv_id_used(const Rendezvous *rv) {
    if (rv->method != LAUNCH_FS || rv->rank != 0) return;
    char path[PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/train_gpt_fs.run", rv->dir);
    unlink(path);
}

// The link's end: goodbyes (tcp), the watcher stopped, exits clean from now on.
static inline void rv_link_finish(Rendezvous *rv) {
    if (!rv->active) return;
    rv->finished = 1;
    if (rv->method == LAUNCH_TCP) {
        for (int k = 0; k < rv->nproc; k++)
            if (k != rv->rank && rv->fd[k] >= 0) rv_send_frame(rv, rv->fd[k], RV_BYE, rv->rank, NULL, 0);
    }
    __atomic_store_n(&rv->stop, 1, __ATOMIC_SEQ_CST);
    if (rv->watcher_started) pthread_join(rv->watcher, NULL);
    for (int k = 0; k < rv->nproc; k++)
        if (rv->fd[k] >= 0) close(rv->fd[k]);
    free(rv->fd);
    free(rv->bye);
    free(rv->nonce);
    rv->fd = rv->bye = NULL;
    rv->nonce = NULL;
    rv->active = 0;
}

// ----------------------------------------------------------------------------------------
// the processes: their start, NCCL's id, a failure in the main thread, the end

// This process's place in the run (rv zeroed first): the plan's, or under mpi MPI's, MPI_Init
// run and the exit path installed. 0, or -1 with a message.
static inline int rv_init(Rendezvous *rv, const LaunchPlan *p, char *err, size_t err_len) {
    memset(rv, 0, sizeof(*rv));
    rv->method = p->method;
    rv->rank = p->rank;
    rv->nproc = p->nproc;
    rv->local_rank = p->local_rank;
    rv->timeout_s = p->timeout_s;
#ifdef USE_MPI
    if (p->method == LAUNCH_MPI) {
        int rc = MPI_Init(NULL, NULL);
        MPI_Comm local;
        if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(MPI_COMM_WORLD, &rv->rank);
        if (rc == MPI_SUCCESS) rc = MPI_Comm_size(MPI_COMM_WORLD, &rv->nproc);
        if (rc == MPI_SUCCESS)
            rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rv->rank, MPI_INFO_NULL, &local);
        if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(local, &rv->local_rank);
        if (rc == MPI_SUCCESS) rc = MPI_Comm_free(&local);
        if (rc != MPI_SUCCESS) {
            char why[MPI_MAX_ERROR_STRING] = "";
            int len = 0;
            MPI_Error_string(rc, why, &len);
            llmc_set_error(err, err_len, "MPI's start (%s): %s", p->why_mpi, why);
            return -1;
        }
        rv->mpi_active = rv->nproc > 1 ? 2 : 1;
        rv_process = rv;
        atexit(rv_atexit);
    }
#else
    (void)err;
    (void)err_len;
#endif
    return 0;
}

// NCCL's id (RV_ID_BYTES) from rank 0 to every rank, in place: MPI_Bcast under mpi, the link
// under fs and tcp. 0, or -1 with a message.
static inline int rv_share_id(Rendezvous *rv, unsigned char *id, char *err, size_t err_len) {
#ifdef USE_MPI
    if (rv->method == LAUNCH_MPI) {
        const int rc = MPI_Bcast(id, RV_ID_BYTES, MPI_BYTE, 0, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) {
            llmc_set_error(err, err_len, "MPI: MPI_Bcast of NCCL's id failed (%d)", rc);
            return -1;
        }
    }
#endif
    if (rv->method == LAUNCH_FS || rv->method == LAUNCH_TCP) {
        if (rv->rank == 0 && rv_send_id(rv, id) != 0) {
            llmc_set_error(err, err_len, "rank 0: cannot send NCCL's id: %s", strerror(errno));
            return -1;
        }
        if (rv->rank != 0 && rv_recv_id(rv, id, err, err_len) != 0) return -1;
    }
    return 0;
}

// From now on the exit path also aborts the communicator (abort_comm(ctx), llmc/comm.h). The
// exit path is registered again: after CUDA's own exit handler, so that it runs before it.
static inline void rv_on_abort(Rendezvous *rv, void (*abort_comm)(void *ctx), void *ctx) {
    rv->abort_comm = abort_comm;
    rv->abort_ctx = ctx;
    rv_process = rv;
    atexit(rv_atexit);
}

// The end of a run, after the communicator's: the link's goodbyes, MPI closed; exits are clean
// from now on.
static inline void rv_finish(Rendezvous *rv) {
    rv_link_finish(rv);
    rv->finished = 1;
#ifdef USE_MPI
    if (rv->mpi_active) {
        rv->mpi_active = 0;
        MPI_Finalize();
    }
#endif
}

// A failure in the main thread of rank of nproc: the message, then exit(1) (the exit path tells
// the others).
static inline void rv_fail(int rank, int nproc, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4), noreturn))
#endif
    ;
static inline void rv_fail(int rank, int nproc, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fflush(stdout);
    if (nproc > 1) fprintf(stderr, "Error (rank %d of %d): %s\n", rank, nproc, msg);
    else fprintf(stderr, "Error: %s\n", msg);
    exit(EXIT_FAILURE);
}

#endif // LLMC_RENDEZVOUS_H
