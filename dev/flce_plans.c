/*
flce_plans.c - the planner's choices on any machine, no GPU: for each shape and workspace
budget, the plan flce's Hopper path takes on a GPU of --sms multiprocessors (132: an H100 or
H200 SXM; 0: the cuBLASLt path's plan, any GPU) for a call with every gradient (bf16 inputs, fp32 d_W): its chunk and vocabulary
tile, the workspace flce_workspace_size gives, the gradient route and the cost model's time.
What a planner change does to every plan is the diff of this program's output before and after
it; dev/flce_bench then measures the plans that moved.

  build/flce_plans [-s NxHxV,...|llama|default|all] [-b MiB,...] [--sms N] [--check]
                   [--chunk C] [--vtile T] [--side S]

--check adds whether a call given that workspace plans what the budget planned (the plan a
call runs is the one made from the workspace it is given). --chunk, --vtile and --side bound
or force the plan as dev/flce_bench's options of those names do (the Hopper path's chunk cap,
the config's max_vocab_tile, d_h's SMs side by side: 0 never), so that a forced plan's
workspace and modelled time are known before it is timed.

It links flce_plan.o alone: the planner is plain C, and the GPU query it would make is answered
by --sms (flce_dev_set_plan_sms); with --sms 0 flce_device_hopper_sms below answers it: no
Hopper GPU, the cuBLASLt path.
*/
#define _POSIX_C_SOURCE 200809L  // strtok_r
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flce.h"
#include "flce_internal.h"
#include "shapes.h"  // DEFAULT_SHAPES, LLAMA_SHAPES, expand_shapes

int flce_device_hopper_sms(void) { return 0; }  // (--sms 0)

static void usage(const char *prog) {
    fprintf(stderr,
            "usage: %s [-s NxHxV,...|llama|default|all] [-b MiB,...] [--sms N] [--check]\n"
            "          [--chunk C] [--vtile T] [--side S]\n"
            "  -s  shapes (default: llama and default, as dev/flce_bench names them)\n"
            "  -b  workspace budgets in MiB (default 160,300,512,1024)\n"
            "  --sms   the Hopper GPU's multiprocessors the plans are for (default 132; 0: the cuBLASLt path)\n"
            "  --check also plan from the workspace flce_workspace_size gives, and say where that differs\n"
            "  --chunk the Hopper path's largest chunk (tokens), --vtile the largest vocabulary tile,\n"
            "          --side d_h's SMs where d_h and d_W run side by side (0: never), as flce_bench's\n",
            prog);
    exit(2);
}

static const char *route(const flce_plan *p) {
    if (!p->sm90) return "the cuBLASLt path";
    if (p->lt_backward) return "cuBLASLt on dlogits";
    if (p->side_sms) return "direct, side by side";
    return p->dw_direct ? "direct" : "fused";
}

int main(int argc, char **argv) {
    char shapes[4096], budgets[256] = "160,300,512,1024";
    int sms = 132, check = 0, side = -1;
    long long chunk = 0, vtile = 0;
    expand_shapes("llama,default", shapes, sizeof(shapes));
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-s") == 0 && i + 1 < argc) {
            if (!expand_shapes(argv[++i], shapes, sizeof(shapes))) usage(argv[0]);
        } else if (strcmp(argv[i], "-b") == 0 && i + 1 < argc) {
            snprintf(budgets, sizeof(budgets), "%s", argv[++i]);
        } else if ((strcmp(argv[i], "--sms") == 0 || strcmp(argv[i], "--chunk") == 0 ||
                    strcmp(argv[i], "--vtile") == 0 || strcmp(argv[i], "--side") == 0) && i + 1 < argc) {
            // the numeric options: an integer from 0 to its bound
            const char *opt = argv[i];
            const int small = strcmp(opt, "--sms") == 0 || strcmp(opt, "--side") == 0;
            const long long most = small ? 1024 : 1LL << 40;
            char *end;
            const long long v = strtoll(argv[++i], &end, 10);
            if (*end != '\0' || end == argv[i] || v < 0 || v > most) {
                fprintf(stderr, "bad %s '%s' (0..%lld)\n", opt, argv[i], most);
                return 2;
            }
            if (strcmp(opt, "--sms") == 0) sms = (int)v;
            else if (strcmp(opt, "--chunk") == 0) chunk = v;
            else if (strcmp(opt, "--vtile") == 0) vtile = v;
            else side = (int)v;
        } else if (strcmp(argv[i], "--check") == 0) {
            check = 1;
        } else {
            fprintf(stderr, "unknown option or a missing value: %s\n", argv[i]);
            usage(argv[0]);
        }
    }
    // every shape and budget checked before anything is printed
    enum { MAX_ITEMS = 64 };
    long long shape[MAX_ITEMS][3], mib[MAX_ITEMS];
    int n_shapes = 0, n_budgets = 0;
    char *save = NULL;
    for (char *s = strtok_r(shapes, ",", &save); s != NULL; s = strtok_r(NULL, ",", &save)) {
        long long *d = shape[n_shapes];
        char tail;
        flce_config cfg;
        char msg[256];
        if (n_shapes == MAX_ITEMS || sscanf(s, "%lldx%lldx%lld%c", &d[0], &d[1], &d[2], &tail) != 3 || d[0] < 1 ||
            d[1] < 1 || d[2] < 2) {
            fprintf(stderr, "bad shape '%s' (NxHxV, at most %d shapes)\n", s, MAX_ITEMS);
            return 2;
        }
        flce_config_init(&cfg, d[0], d[1], d[2]);
        if (flce_config_check(&cfg, msg, sizeof(msg)) != FLCE_OK) {
            fprintf(stderr, "%s: %s\n", s, msg);
            return 2;
        }
        n_shapes++;
    }
    for (char *b = strtok_r(budgets, ",", &save); b != NULL; b = strtok_r(NULL, ",", &save)) {
        char *end;
        const long long m = strtoll(b, &end, 10);
        if (n_budgets == MAX_ITEMS || *end != '\0' || m < 1 || m > (1LL << 30)) {
            fprintf(stderr, "bad budget '%s' (MiB, at most %d budgets)\n", b, MAX_ITEMS);
            return 2;
        }
        mib[n_budgets++] = m;
    }
    flce_dev_set_plan_sms(sms);
    if (chunk > 0) flce_dev_set_plan_chunk(chunk, 0);
    if (side >= 0) flce_dev_set_side(side);
    printf("| N x H x V | budget MiB | chunk | chunks | vocab tile | tiles | workspace MiB | d_h parts | route | model ms |%s\n",
           check ? " from the workspace |" : "");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|%s\n", check ? "---|" : "");
    int differ = 0;
    for (int i = 0; i < n_shapes; i++) {
        char name[96];
        snprintf(name, sizeof(name), "%lldx%lldx%lld", shape[i][0], shape[i][1], shape[i][2]);
        for (int k = 0; k < n_budgets; k++) {
            flce_config cfg;
            flce_config_init(&cfg, shape[i][0], shape[i][1], shape[i][2]);
            cfg.max_vocab_tile = vtile;
            size_t ws = 0;
            const size_t budget = (size_t)mib[k] << 20;
            const flce_status st = flce_workspace_size(&cfg, budget, &ws);
            flce_plan p;
            flce_make_plan(&cfg, budget, 1, 1, sms, 0, &p);
            if (st != FLCE_OK || p.chunk == 0) {
                printf("| %s | %lld | does not fit (at least %.1f MiB) | | | | | | | |%s\n", name, mib[k],
                       ws / 1048576.0, check ? " |" : "");
                continue;
            }
            char parts[48];  // (and those it takes side by side, where fewer)
            if (p.side_sms && p.side_dh_parts < p.dh_parts)
                snprintf(parts, sizeof(parts), "%d (%d side by side)", p.dh_parts, p.side_dh_parts);
            else
                snprintf(parts, sizeof(parts), "%d", p.dh_parts);
            printf("| %s | %lld | %lld | %lld | %lld | %lld | %.1f | %s | %s | %.2f |", name, mib[k],
                   (long long)p.chunk, (long long)p.n_chunks, (long long)p.vocab_tile, (long long)p.n_vtiles,
                   ws / 1048576.0, parts, route(&p), 1e3 * flce_plan_cost(&cfg, &p, 1, 1));
            if (check) {
                flce_plan q;
                flce_make_plan(&cfg, ws, 1, 1, sms, 0, &q);
                const int same = q.chunk == p.chunk && q.vocab_tile == p.vocab_tile;
                differ += !same;
                if (same) printf(" the same |");
                else printf(" %lld x %lld (%s) |", (long long)q.chunk, (long long)q.vocab_tile, route(&q));
            }
            printf("\n");
        }
    }
    if (check) printf("\n%d plan(s) differ from their workspace's\n", differ);
    return 0;
}
