/*
train_config.h - the trainer's run configuration: llm.c's flags and their defaults, parsed
strictly (the whole string a number, in its range, finite) and checked against each other, the
process count and the model, all before any GPU is touched. One table gives both the parser and
the usage text. Every error names the flag and its value.

  train_config_parse(&cfg, argc, argv, err, len)   0, 1 for -h, -1 with a message
  train_config_check(&cfg, nproc, err, len)        flags against each other and nproc
  train_config_check_model(&cfg, &model, err, len) flags against the model (-t, kernel sizes)
  train_config_steps(&cfg, tokens, start, err, len) -x resolved (-1: one epoch), > start
The processes' flags (-pn -pr -pg -pi -ps -pf) are parsed here and checked, with the launcher's
environment, by llmc/launch_plan.h's launch_plan.
*/
#ifndef LLMC_TRAIN_CONFIG_H
#define LLMC_TRAIN_CONFIG_H

#include "utils.h"  // first: it sets the POSIX feature macros

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>

#include "models.h"
#include "schedulers.h"

// tokens of one rank's micro-batch: the encoder's backward indexes 3 int arrays of this size
#define TRAIN_MAX_MICRO_TOKENS (1 << 28)

typedef struct {
    const char *train_glob, *val_glob, *model, *out_dir;
    const char *tokenizer;  // -tk: the file that decodes samples (NULL: the model family's own)
    LRSchedule schedule;
    int B, T, total_batch, max_steps, warmup;
    int val_every, val_max, sample_every, gen_tokens, ckpt_every, resume, recompute, master_weights;
    int vocab, flce_mib, flce_fp32_logits, flce_autotune;
    int flce_hopper;  // -fh: 1 flce's Hopper GEMMs where they run, 0 cuBLASLt's (flce_set_hopper_default)
    int zero_stage;  // -z: 0 every rank keeps the whole optimizer state, 1 its slice (llmc/zero.h)
    int overlap;     // -ov: 1 reduces gradients in buckets while the backward runs
    int tp;          // -tp 1: the LM head vocabulary-parallel over the processes (train_tp_shard)
    int bf16_moments;  // -bm 1: AdamW's m and v in bf16 (llmc/adamw.cuh), 0 in fp32
    int hf_export;   // -hf 1: a Hugging Face directory <-o>/hf_<step> with each checkpoint and at the end
    int hf_shard_mb; // -hs: its safetensors shards' largest size in MB (10^6 bytes)
    int step_profile;  // -sp 1: where a step's time goes, printed at the end (llmc/step_profile.h)
    float lr, final_frac, weight_decay;
    int grad_accum;  // derived by train_config_check: total_batch / (B * T * processes)
    // the processes (llmc/launch_plan.h's launch_plan checks them): -1, 0 or NULL when not given
    int proc_num, proc_rank, proc_gpus;
    const char *proc_init, *proc_server, *proc_fs;
} TrainConfig;

typedef struct {
    const char *flag;
    char kind;       // 'i' int, 'f' float, 's' string, 'k' lr schedule
    size_t offset;   // of the field in TrainConfig
    double min, max; // a number's range
    const char *help;
} TrainFlag;

#define TRAIN_FIELD_(field) offsetof(TrainConfig, field)
static const TrainFlag train_flags[] = {
    {"-i", 's', TRAIN_FIELD_(train_glob), 0, 0, "train data glob (default data/tiny_shakespeare_train.bin)"},
    {"-j", 's', TRAIN_FIELD_(val_glob), 0, 0, "val data glob (default data/tiny_shakespeare_val.bin)"},
    {"-e", 's', TRAIN_FIELD_(model), 0, 0, "model file (llm.c's GPT-2 v3/v5, or llmc/llama.h's), Hugging Face model directory\n"
     "              (config.json + safetensors: LlamaForCausalLM, Qwen2ForCausalLM, GPT2LMHeadModel)\n"
     "              or descriptor (default d12): GPT-2 d6|d12|d24|d36|d48; llama3.2-1b|llama3.2-3b|\n"
     "              llama3.1-8b|qwen2.5-0.5b|qwen2.5-1.5b; test models llama-test|qwen-test"},
    {"-V", 'i', TRAIN_FIELD_(vocab), 0, GPT2_MAX_VOCAB, "vocabulary of a fresh model (default 0: the descriptor's own, GPT-2's 50257\n"
     "              padded to 50304, Llama 3's 128256, Qwen2.5's 151936; e.g. 176245: any size,\n"
     "              padded to a multiple of 128)"},
    {"-o", 's', TRAIN_FIELD_(out_dir), 0, 0, "output dir for main.log, main.jsonl (a JSON line a step: scripts/plot_log.py) and checkpoints (default none)"},
    {"-tk", 's', TRAIN_FIELD_(tokenizer), 0, 0, "tokenizer that decodes samples: llm.c's .bin or a Hugging Face tokenizer.json\n"
     "              (default: -e DIR's tokenizer.json; else GPT-2's data/gpt2_tokenizer.bin for GPT-2, token ids\n"
     "              for Llama / Qwen)"},
    {"-b", 'i', TRAIN_FIELD_(B), 1, 1 << 20, "micro-batch size B (default 4)"},
    {"-t", 'i', TRAIN_FIELD_(T), 1, 1 << 24, "sequence length T (default 1024)"},
    {"-d", 'i', TRAIN_FIELD_(total_batch), -1, INT_MAX, "total batch size in tokens (default -1: B*T*processes)"},
    {"-x", 'i', TRAIN_FIELD_(max_steps), -1, INT_MAX, "max steps (default -1: one epoch)"},
    {"-k", 'k', TRAIN_FIELD_(schedule), 0, 0, "lr schedule cosine|linear|constant|wsd (default cosine)"},
    {"-l", 'f', TRAIN_FIELD_(lr), 0, FLT_MAX, "learning rate (default 3e-4)"},
    {"-u", 'i', TRAIN_FIELD_(warmup), 0, INT_MAX, "warm-up steps (default 0)"},
    {"-q", 'f', TRAIN_FIELD_(final_frac), 0, 1, "final lr as a fraction of -l (default 1.0)"},
    {"-c", 'f', TRAIN_FIELD_(weight_decay), 0, FLT_MAX, "weight decay (default 0.0)"},
    {"-v", 'i', TRAIN_FIELD_(val_every), 0, INT_MAX, "val loss every N steps, 0 never (default 20)"},
    {"-m", 'i', TRAIN_FIELD_(val_max), -1, INT_MAX, "val max batches, -1 all (default 20)"},
    {"-s", 'i', TRAIN_FIELD_(sample_every), 0, INT_MAX, "sample every N steps, 0 never (default 20)"},
    {"-g", 'i', TRAIN_FIELD_(gen_tokens), 0, INT_MAX, "tokens to generate (default 64)"},
    {"-n", 'i', TRAIN_FIELD_(ckpt_every), 0, INT_MAX, "checkpoint every N steps, 0 never (default 0)"},
    {"-y", 'i', TRAIN_FIELD_(resume), 0, 1, "resume from the latest complete checkpoint in -o (default 0)"},
    {"-hf", 'i', TRAIN_FIELD_(hf_export), 0, 1, "1: also write <-o>/hf_<step>/, a Hugging Face model directory (config.json +\n"
     "              bf16 model.safetensors, transformers' names; AutoModelForCausalLM loads it),\n"
     "              with each checkpoint (before its DONE_ marker) and at the end of the run\n"
     "              (default 0); resume still reads the checkpoint's own files"},
    {"-hs", 'i', TRAIN_FIELD_(hf_shard_mb), 1, 1 << 30, "-hf 1's largest safetensors file in MB (10^6 bytes; default 5000, transformers'\n"
     "              \"5GB\"): a larger model is written as shards and an index"},
    {"-r", 'i', TRAIN_FIELD_(recompute), 0, 1, "recompute: 1 recomputes the MLP's activation (GPT-2's GELU, Llama's SwiGLU)\n"
     "              in the backward (default 1); 0 keeps each layer's (faster; L x B x T x 4C,\n"
     "              or x I, bf16 more memory)"},
    {"-w", 'i', TRAIN_FIELD_(master_weights), 0, 1, "fp32 master weights (default 1; required)"},
    {"-f", 'i', TRAIN_FIELD_(flce_mib), 1, 1 << 20, "flce workspace budget in MiB (default 1024)"},
    {"-fl", 'i', TRAIN_FIELD_(flce_fp32_logits), 0, 1, "flce's logits buffer: 0 bf16 (as llm.c; faster), 1 fp32 (exact loss)\n"
     "              (default 0)"},
    {"-fa", 'i', TRAIN_FIELD_(flce_autotune), 0, 1, "1: flce times cuBLASLt's candidate algorithms for its GEMMs on the first step\n"
     "              (faster; a run's bits can then differ from another's); default 0"},
    {"-fh", 'i', TRAIN_FIELD_(flce_hopper), 0, 1, "flce's GEMMs: 1 its own Hopper GEMMs with the loss fused in, where they run (an\n"
     "              sm_90a build on a compute 9.0 GPU; default); 0 cuBLASLt's GEMMs, as on every\n"
     "              other GPU"},
    {"-z", 'i', TRAIN_FIELD_(zero_stage), 0, 1, "ZeRO stage (several GPUs): 0 every GPU keeps the fp32 master weights and AdamW's\n"
     "              m, v (default); 1 each GPU keeps its 1/N slice of them (stages 2, 3: not supported)"},
    {"-bm", 'i', TRAIN_FIELD_(bf16_moments), 0, 1,
     "AdamW moments: 0 m, v in fp32 (default); 1 in bf16, stochastically rounded\n"
     "              (half their memory: 4 bytes per parameter less; resume converts either way)"},
    {"-ov", 'i', TRAIN_FIELD_(overlap), 0, 1, "several GPUs: 1 reduces the gradients layer by layer while the backward runs\n"
     "              (default); 0 in one call after it (for measurement)"},
    {"-tp", 'i', TRAIN_FIELD_(tp), 0, 1, "1: the LM head vocabulary-parallel over the processes (flce's vocab_parallel:\n"
     "              each rank computes the logits of its 1/P of wte's rows for every rank's tokens;\n"
     "              wte stays replicated); several processes only; default 0 (data parallel)"},
    {"-sp", 'i', TRAIN_FIELD_(step_profile), 0, 1, "1: prints at the end where a step's time goes (CUDA events at its phases: batch,\n"
     "              forward, flce head, backward, gradient reduction, norm, AdamW; steps 2 on); default 0"},
    {"-pn", 'i', TRAIN_FIELD_(proc_num), 1, 65536, "processes (one per GPU) without mpirun (default: srun's SLURM_NTASKS\n"
     "              with -pi fs|tcp, else 1)"},
    {"-pr", 'i', TRAIN_FIELD_(proc_rank), 0, 65535, "this process's rank, 0..pn-1 (default: srun's SLURM_PROCID with -pi fs|tcp)"},
    {"-pg", 'i', TRAIN_FIELD_(proc_gpus), 1, 1024, "GPUs per host: the GPU is rank % pg (default: srun's SLURM_LOCALID, else\n"
     "              the rank)"},
    {"-pi", 's', TRAIN_FIELD_(proc_init), 0, 0, "how the processes meet: mpi (the default under mpirun), fs (rank 0 writes\n"
     "              NCCL's id into -pf) or tcp (rank 0 sends it from -ps)"},
    {"-ps", 's', TRAIN_FIELD_(proc_server), 0, 0, "-pi tcp: rank 0's address, host or host:port (port 12345 by default)"},
    {"-pf", 's', TRAIN_FIELD_(proc_fs), 0, 0, "-pi fs: a directory every process shares"},
};
#undef TRAIN_FIELD_
#define TRAIN_NUM_FLAGS ((int)(sizeof(train_flags) / sizeof(train_flags[0])))

static inline void train_config_defaults(TrainConfig *c) {
    memset(c, 0, sizeof(*c));
    c->train_glob = "data/tiny_shakespeare_train.bin";
    c->val_glob = "data/tiny_shakespeare_val.bin";
    c->model = "d12";
    c->out_dir = NULL;
    c->schedule = LR_COSINE;
    c->B = 4;
    c->T = 1024;
    c->total_batch = -1;
    c->max_steps = -1;
    c->val_every = 20;
    c->val_max = 20;
    c->sample_every = 20;
    c->gen_tokens = 64;
    c->recompute = 1;
    c->master_weights = 1;
    c->overlap = 1;
    c->flce_mib = 1024;
    c->flce_hopper = 1;
    c->hf_shard_mb = 5000;
    c->lr = 3e-4f;
    c->final_frac = 1.0f;
    c->proc_num = -1;
    c->proc_rank = -1;
}

static inline void train_usage(FILE *out) {
    fprintf(out, "Usage:   ./train_gpt [options]\nOptions (llm.c's flags):\n");
    for (int i = 0; i < TRAIN_NUM_FLAGS; i++) {
        const TrainFlag *f = &train_flags[i];
        const char *type = f->kind == 'i' ? "<int>" : f->kind == 'f' ? "<float>" : "<str>";
        fprintf(out, "  %s %-*s%s\n", f->flag, (int)(11 - strlen(f->flag)), type, f->help);
    }
    fprintf(out, "  -h          this help\n");
}

// s as a whole decimal integer in [min, max]: 0, or -1 with "<flag> <s>: why" in err
static inline int parse_int_strict(const char *flag, const char *s, long long min, long long max, int *out,
                                   char *err, size_t err_len) {
    char *end = NULL;
    errno = 0;
    const long long v = strtoll(s, &end, 10);
    if (s[0] == 0 || s[0] == ' ' || s[0] == '\t' || end == NULL || *end != 0) {
        llmc_set_error(err, err_len, "%s %s: not an integer", flag, s);
        return -1;
    }
    if (errno == ERANGE || v < min || v > max) {
        llmc_set_error(err, err_len, "%s %s: out of range [%lld, %lld]", flag, s, min, max);
        return -1;
    }
    *out = (int)v;
    return 0;
}

// s as a whole finite number in [min, max] that a float holds: 0, or -1 with a message
static inline int parse_float_strict(const char *flag, const char *s, double min, double max, float *out,
                                     char *err, size_t err_len) {
    char *end = NULL;
    const double v = strtod(s, &end);
    if (s[0] == 0 || s[0] == ' ' || s[0] == '\t' || end == NULL || *end != 0) {
        llmc_set_error(err, err_len, "%s %s: not a number", flag, s);
        return -1;
    }
    if (!isfinite(v) || !isfinite((float)v)) {
        llmc_set_error(err, err_len, "%s %s: not a finite float", flag, s);
        return -1;
    }
    if (v < min || v > max) {
        llmc_set_error(err, err_len, "%s %s: out of range [%g, %g]", flag, s, min, max);
        return -1;
    }
    *out = (float)v;
    return 0;
}

// Parses llm.c's "-flag value" pairs over the defaults. 0, 1 when -h asks for the usage,
// -1 with a message naming the flag and its value.
static inline int train_config_parse(TrainConfig *c, int argc, char **argv, char *err, size_t err_len) {
    train_config_defaults(c);
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-h") == 0) return 1;
    for (int i = 1; i < argc; i += 2) {
        const TrainFlag *f = NULL;
        for (int k = 0; k < TRAIN_NUM_FLAGS && f == NULL; k++)
            if (strcmp(argv[i], train_flags[k].flag) == 0) f = &train_flags[k];
        if (f == NULL) {
            llmc_set_error(err, err_len, argv[i][0] == '-' ? "unknown flag %s (see -h)"
                           : "unexpected argument '%s' (flags are -x value; see -h)", argv[i]);
            return -1;
        }
        if (i + 1 >= argc) {
            llmc_set_error(err, err_len, "flag %s needs a value (see -h)", f->flag);
            return -1;
        }
        const char *v = argv[i + 1];
        void *field = (char *)c + f->offset;
        if (f->kind == 'i') {
            if (parse_int_strict(f->flag, v, (long long)f->min, (long long)f->max, (int *)field, err, err_len) != 0)
                return -1;
        } else if (f->kind == 'f') {
            if (parse_float_strict(f->flag, v, f->min, f->max, (float *)field, err, err_len) != 0) return -1;
        } else if (f->kind == 'k') {
            if (lr_schedule_parse(v, (LRSchedule *)field) != 0) {
                llmc_set_error(err, err_len, "%s %s: unknown schedule (cosine, linear, constant or wsd)", f->flag, v);
                return -1;
            }
        } else {
            if (v[0] == 0) {
                llmc_set_error(err, err_len, "%s: empty value", f->flag);
                return -1;
            }
            *(const char **)field = v;
        }
    }
    return 0;
}

// The flags against each other and the process count; derives total_batch (-1) and
// grad_accum. 0, or -1 with a message.
static inline int train_config_check(TrainConfig *c, int nproc, char *err, size_t err_len) {
    if (c->total_batch == 0) {
        llmc_set_error(err, err_len, "-d 0: the total batch must be >= 1 token (or -1: B*T*processes)");
        return -1;
    }
    if (c->max_steps == 0) {
        llmc_set_error(err, err_len, "-x 0: the number of steps must be >= 1 (or -1: one epoch)");
        return -1;
    }
    if (c->master_weights != 1) {
        llmc_set_error(err, err_len, "-w %d: this trainer always keeps fp32 master weights (-w 1)", c->master_weights);
        return -1;
    }
    const long long micro = (long long)c->B * c->T, step_micro = micro * nproc;
    if (micro > TRAIN_MAX_MICRO_TOKENS) {
        llmc_set_error(err, err_len, "-b %d -t %d: %lld tokens per micro-batch, more than %d", c->B, c->T, micro,
                       TRAIN_MAX_MICRO_TOKENS);
        return -1;
    }
    if (step_micro > INT_MAX) {
        llmc_set_error(err, err_len, "-b %d -t %d on %d processes: %lld tokens per micro-step, more than %d",
                       c->B, c->T, nproc, step_micro, INT_MAX);
        return -1;
    }
    if (c->total_batch < 0) c->total_batch = (int)step_micro;
    if (c->total_batch % step_micro != 0) {
        llmc_set_error(err, err_len, "-d %d: the total batch must be a multiple of B*T*processes = %lld",
                       c->total_batch, step_micro);
        return -1;
    }
    c->grad_accum = (int)(c->total_batch / step_micro);
    if (c->resume && c->out_dir == NULL) {
        llmc_set_error(err, err_len, "-y 1 resumes from the checkpoints in -o <dir>, and no -o is given");
        return -1;
    }
    if (c->ckpt_every > 0 && c->out_dir == NULL) {
        llmc_set_error(err, err_len, "-n %d writes checkpoints into -o <dir>, and no -o is given", c->ckpt_every);
        return -1;
    }
    if (c->hf_export && c->out_dir == NULL) {
        llmc_set_error(err, err_len, "-hf 1 writes Hugging Face directories into -o <dir>, and no -o is given");
        return -1;
    }
    if (c->tp && nproc < 2) {
        llmc_set_error(err, err_len, "-tp 1 splits the LM head's vocabulary over several processes, and this run has "
                       "%d (mpirun -np N, or -pn N with -pi fs|tcp)", nproc);
        return -1;
    }
    if (c->vocab != 0 && !model_is_descriptor(c->model)) {
        llmc_set_error(err, err_len, "-V %d sets the vocabulary of a fresh model (-e a descriptor: d12, qwen2.5-0.5b, ...); the model file "
                       "'%s' has its own", c->vocab, c->model);
        return -1;
    }
    return 0;
}

// The flags against the model: T within its max_seq_len, sizes the trainer's kernels take (the
// family's check_run: for GPT-2 channels a multiple of 8, a head size of 16, 32, 64 or 128).
// 0, or -1 with a message.
static inline int train_config_check_model(const TrainConfig *c, const ModelSpec *m, char *err, size_t err_len) {
    if (c->T > m->max_seq_len) {
        llmc_set_error(err, err_len, "-t %d exceeds the model's max_seq_len %d", c->T, m->max_seq_len);
        return -1;
    }
    char why[512];
    if (m->family->check_run(m, c->T, why, sizeof(why)) != 0) {
        llmc_set_error(err, err_len, "model '%s': %s", c->model, why);
        return -1;
    }
    return 0;
}

// -tp 1: rank's rows of the padded vocabulary Vp, [*v0, *v0 + *rows), and how many of them are
// real classes (*real, the rest padding), for nproc ranks. The rows are cut at multiples of 128
// (alignment; llm.c pads Vp to one) into nearly equal ranges, the last rank also taking any rest
// of Vp beyond a multiple of 128. 0, or -1 with a message: fewer 128-row blocks than ranks, or a
// rank whose rows would all be padding.
static inline int train_tp_shard(int V, int Vp, int nproc, int rank, int *v0, int *rows, int *real, char *err,
                                 size_t err_len) {
    const long long blocks = Vp / 128;
    if (nproc < 1 || rank < 0 || rank >= nproc || blocks < nproc) {
        llmc_set_error(err, err_len, "-tp 1: the padded vocabulary of %d rows is fewer than 128 rows for each of %d "
                       "processes", Vp, nproc);
        return -1;
    }
    const long long b0 = blocks * rank / nproc, b1 = blocks * (rank + 1) / nproc;
    *v0 = (int)(b0 * 128);
    *rows = rank == nproc - 1 ? Vp - *v0 : (int)((b1 - b0) * 128);
    *real = V - *v0 < 0 ? 0 : V - *v0 > *rows ? *rows : V - *v0;
    if (*real < 1) {
        llmc_set_error(err, err_len, "-tp 1: rank %d's rows [%d, %d) of the vocabulary are all padding (%d real "
                       "classes): use fewer processes", rank, *v0, *v0 + *rows, V);
        return -1;
    }
    return 0;
}

// Resolves -x -1 to one epoch of train_tokens, and checks that steps remain after start_step
// (the step a checkpoint resumes at; 0 for a fresh run). 0, or -1 with a message.
static inline int train_config_steps(TrainConfig *c, int64_t train_tokens, int start_step, char *err, size_t err_len) {
    if (c->max_steps < 0) {
        const int64_t epoch = train_tokens / c->total_batch;
        if (epoch < 1) {
            llmc_set_error(err, err_len, "one epoch of the training data (%lld tokens) is less than one step of "
                           "-d %d tokens: give -x, or more data", (long long)train_tokens, c->total_batch);
            return -1;
        }
        c->max_steps = epoch > INT_MAX ? INT_MAX : (int)epoch;
    }
    if (start_step >= c->max_steps) {
        llmc_set_error(err, err_len, "the checkpoint resumed is at step %d and the run ends at step %d (-x): "
                       "nothing left to train (raise -x)", start_step, c->max_steps);
        return -1;
    }
    return 0;
}

#endif // LLMC_TRAIN_CONFIG_H
