/*
gpu_llama_model.cuh - the Llama 3 / Qwen2.5 family through the trainer (llmc/llama.cuh behind
train_gpt.cu's loop) against transformers: the files of scripts/export_llama_fixture.py (its
header says what they hold), made on the GPU machine by `make test-gpu` into the directory
LLAMA_FIXTURE_DIR names. For each model: the loss of one batch, the logits of a few
positions, every parameter's gradient, bitwise repeatability, the rotary frequencies, and
10 AdamW steps' losses. Bounds: the loss within 2e-3 relative, logits and gradients within
2e-2 relative L2 (bf16 parameters and activations against fp64), the AdamW trace within 1e-2
relative (its bf16 parameters' stochastic rounding is of the size of lr 1e-4's updates, so the
trace drifts from the fp64 one by a few 1e-3 over 10 steps as the loss falls fast on one batch).
-r 0 (the SwiGLU outputs kept) gives bitwise the gradients of -r 1 (recomputed).
Included by test/test_train_gpu.cu after train_gpt.cu.
*/
#ifndef TEST_GPU_LLAMA_MODEL_CUH
#define TEST_GPU_LLAMA_MODEL_CUH

#define LLAMA_FIXTURE_MAGIC 20241203

typedef struct {
    int B, T, R, S;
    LlamaConfig config;
    size_t P;
    float *params, *grads, *logits, *inv_freq, *losses, *norms;
    int *x, *y, *pos;
    float loss, lr, beta1, beta2, eps, wd, clip;
} LlamaFixture;

static float lf_float(int32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

static void llama_fixture_free(LlamaFixture *f) {
    void *ptrs[] = {f->params, f->grads, f->logits, f->inv_freq, f->losses, f->norms, f->x, f->y, f->pos};
    for (size_t k = 0; k < sizeof(ptrs) / sizeof(ptrs[0]); k++) free(ptrs[k]);
    memset(f, 0, sizeof(*f));
}

// Reads one fixture file; 0, or -1 with a message in err.
static int llama_fixture_load(LlamaFixture *f, const char *path, char *err, size_t err_len) {
    memset(f, 0, sizeof(*f));
    FILE *fp = llmc_fopen_read_checked(path, "llama fixture", err, err_len);
    if (fp == NULL) return -1;
    int32_t h[256];
    int64_t size = 0;
    if (llmc_file_size(fp, &size) != 0 || llmc_read_exact(fp, h, sizeof(h)) != 0 || h[0] != LLAMA_FIXTURE_MAGIC ||
        h[1] != 1) {
        llmc_set_error(err, err_len, "'%s': not a version 1 llama fixture", path);
        fclose(fp);
        return -1;
    }
    f->B = h[2];
    f->T = h[3];
    f->R = h[15];
    f->S = h[16];
    f->P = (size_t)(uint32_t)h[14];
    LlamaConfig *c = &f->config;
    memset(c, 0, sizeof(*c));
    c->model_type = h[18] == 1 ? LLAMA_TYPE_QWEN2 : LLAMA_TYPE_LLAMA;
    c->num_hidden_layers = h[4];
    c->hidden_size = h[5];
    c->num_attention_heads = h[6];
    c->num_key_value_heads = h[7];
    c->head_dim = h[5] / h[6];
    c->intermediate_size = h[8];
    c->vocab_size = h[9];
    c->padded_vocab_size = (h[9] + 127) / 128 * 128;
    c->tie_word_embeddings = h[10];
    c->attention_bias = h[11];
    c->rope_scaling = h[12] ? LLAMA_ROPE_LLAMA3 : LLAMA_ROPE_NONE;
    c->rope_original_max_position_embeddings = h[13];
    c->max_position_embeddings = h[17];
    c->bos_token_id = -1;
    c->eos_token_id = -1;
    c->rms_norm_eps = lf_float(h[32]);
    c->rope_theta = lf_float(h[33]);
    c->rope_factor = h[12] ? lf_float(h[34]) : 0.0;
    c->rope_low_freq_factor = h[12] ? lf_float(h[35]) : 0.0;
    c->rope_high_freq_factor = h[12] ? lf_float(h[36]) : 0.0;
    c->initializer_range = 0.02;
    f->lr = lf_float(h[37]);
    f->beta1 = lf_float(h[38]);
    f->beta2 = lf_float(h[39]);
    f->eps = lf_float(h[40]);
    f->wd = lf_float(h[41]);
    f->clip = lf_float(h[42]);
    const size_t BT = (size_t)f->B * f->T, V = (size_t)c->vocab_size, half = (size_t)c->head_dim / 2;
    const int64_t want = 1024 + (int64_t)(2 * f->P + BT * 2 + f->R + 1 + (size_t)f->R * V + half + 2 * f->S) * 4;
    if (size != want) {
        llmc_set_error(err, err_len, "'%s': %lld bytes, the header implies %lld", path, (long long)size,
                       (long long)want);
        fclose(fp);
        return -1;
    }
    f->params = (float *)malloc_check(f->P * 4);
    f->grads = (float *)malloc_check(f->P * 4);
    f->x = (int *)malloc_check(BT * 4);
    f->y = (int *)malloc_check(BT * 4);
    f->pos = (int *)malloc_check((size_t)f->R * 4);
    f->logits = (float *)malloc_check((size_t)f->R * V * 4);
    f->inv_freq = (float *)malloc_check(half * 4);
    f->losses = (float *)malloc_check((size_t)f->S * 4);
    f->norms = (float *)malloc_check((size_t)f->S * 4);
    const int rc = llmc_read_exact(fp, f->params, f->P * 4) | llmc_read_exact(fp, f->x, BT * 4) |
                   llmc_read_exact(fp, f->y, BT * 4) | llmc_read_exact(fp, f->pos, (size_t)f->R * 4) |
                   llmc_read_exact(fp, &f->loss, 4) | llmc_read_exact(fp, f->logits, (size_t)f->R * V * 4) |
                   llmc_read_exact(fp, f->grads, f->P * 4) | llmc_read_exact(fp, f->inv_freq, half * 4) |
                   llmc_read_exact(fp, f->losses, (size_t)f->S * 4) | llmc_read_exact(fp, f->norms, (size_t)f->S * 4);
    fclose(fp);
    if (rc != 0) {
        llmc_set_error(err, err_len, "'%s': read error", path);
        llama_fixture_free(f);
        return -1;
    }
    return 0;
}

// One micro-step on the fixture's batch (gradients zeroed first); its loss.
static float llama_fixture_step(Trainer *t, const LlamaFixture *f, cudaStream_t s) {
    trainer_zero_grad(t, s);
    trainer_set_batch(t, f->x, f->y, f->B, f->T, 1, s);
    trainer_forward(t, f->B, f->T, 0, s);
    trainer_backward(t, f->B, f->T, s);
    float loss = 0.0f;
    cudaCheck(cudaMemcpyAsync(&loss, t->losses, sizeof(float), cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaStreamSynchronize(s));
    return loss;
}

static void test_llama_fixture(const char *dir, const char *name) {
    char path[1024], err[1024];
    snprintf(path, sizeof(path), "%s/%s.bin", dir, name);
    LlamaFixture f;
    if (!test_check(llama_fixture_load(&f, path, err, sizeof(err)) == 0, "load %s: %s", path, err)) return;
    const LlamaConfig *c = &f.config;
    ModelSpec spec;
    if (!test_check(llama_config_check(c, err, sizeof(err)) == 0, "%s: its config passes llama_config_check: %s", name,
                    err)) {
        llama_fixture_free(&f);
        return;
    }
    llama_spec(c, &spec);
    if (!test_check(spec.num_parameters == f.P, "%s: %zu parameters in our table, %zu in transformers' model", name,
                    spec.num_parameters, f.P)) {
        llama_fixture_free(&f);
        return;
    }
    // the rotary frequencies: llmc/rope.h's against transformers' own
    RopeConfig rc;
    llama_rope_of(c, &rc);
    const int half = c->head_dim / 2;
    float *inv = (float *)malloc_check((size_t)half * sizeof(float));
    double worst_f = 0.0;
    if (rope_inv_freq_checked(inv, &rc, err, sizeof(err)) == 0)
        for (int j = 0; j < half; j++) {
            const double e = fabs((double)inv[j] - f.inv_freq[j]) / f.inv_freq[j];
            if (!(e <= worst_f)) worst_f = e;
        }
    else
        worst_f = INFINITY;
    test_check(worst_f <= 1e-6, "%s: rotary inverse frequencies (%s) within %.1e of transformers' (bound 1e-6)", name,
               rc.type == ROPE_LLAMA3 ? "llama3 scaling" : "default", worst_f);
    free(inv);

    cudaStream_t s;
    cudaCheck(cudaStreamCreate(&s));
    Trainer t;
    trainer_build(&t, &spec);
    trainer_upload_params(&t, f.params);
    trainer_alloc(&t, f.B, f.T, (size_t)512 << 20, 1, 1);
    const size_t n = spec.num_parameters;
    const long long swiglu_before = t.mm.n_swiglu;
    const float loss = llama_fixture_step(&t, &f, s);
    {  // the MLP's SwiGLU: in the Hopper GEMM's epilogues where the trainer's kinds have them
        const int fused = t.mm.n_swiglu > swiglu_before;
        const LlamaModel *g = llama_impl(&t.model);  // layer 0's buffers (the others' offsets keep alignment)
        const int BT = f.B * f.T, C = c->hidden_size, I = c->intermediate_size;
        const int want = ((t.mm.use_sm90 >> MM90_SWIGLU & 1) &&
                          mm90_fits_swiglu(BT, C, I, g->gu, g->h, g->ln2, g->p.gateupw, NULL)) ||
                         ((t.mm.use_sm90 >> MM90_DSWIGLU & 1) &&
                          mm90_fits_swiglu(BT, C, I, g->gu, NULL, g->dresidual, g->p.downw, g->gu));
        test_check(fused == want, "%s: the SwiGLU path of the step: %s (%lld fused calls; expected %s)", name,
                   fused ? "fused into the Hopper GEMM's epilogue" : "unfused (GEMM + swiglu kernels)",
                   t.mm.n_swiglu - swiglu_before, want ? "fused" : "unfused");
    }
    const double rel = fabs((double)loss - f.loss) / f.loss;
    test_check(rel < 2e-3, "%s: loss %.6f vs transformers %.6f (rel err %.2e, bound 2e-3; ln V %.4f)", name, loss, f.loss,
               rel, log((double)c->vocab_size));
    // logits of the fixture's positions: their hidden rows times the head, as sampling does
    const size_t Vp = (size_t)spec.padded_vocab_size, V = (size_t)spec.vocab_size, C = (size_t)spec.channels;
    uint16_t *row_bf = (uint16_t *)malloc_check(Vp * sizeof(uint16_t));
    float *row = (float *)malloc_check(Vp * sizeof(float));
    double worst_l = 0.0;
    for (int r = 0; r < f.R; r++) {
        matmul_forward(&t.mm, t.logits_row, NULL, t.model.hidden + (size_t)f.pos[r] * C, trainer_head_weight(&t), NULL,
                       1, (int)C, (int)Vp, s);
        cudaCheck(cudaMemcpyAsync(row_bf, t.logits_row, Vp * sizeof(uint16_t), cudaMemcpyDeviceToHost, s));
        cudaCheck(cudaStreamSynchronize(s));
        bf16_to_floats(row_bf, row, Vp);
        const double e = rel_l2_f32(row, f.logits + (size_t)r * V, V);
        if (!(e <= worst_l)) worst_l = e;
    }
    test_check(worst_l < 2e-2, "%s: logits of %d positions within rel L2 %.2e of transformers' (bound 2e-2)", name, f.R,
               worst_l);
    free(row_bf);
    free(row);
    float *grads = (float *)malloc_check(n * sizeof(float)), *grads2 = (float *)malloc_check(n * sizeof(float));
    cudaCheck(cudaMemcpy(grads, t.grads_memory, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < spec.num_tensors; i++) {
        const ParameterTensor *pt = &spec.tensors[i];
        const double e = rel_l2_f32(grads + pt->offset, f.grads + pt->offset, pt->numel);
        test_check(e < 2e-2, "%s: gradient of %-8s rel L2 %.2e (bound 2e-2)", name, pt->name, e);
    }
    llama_fixture_step(&t, &f, s);
    cudaCheck(cudaMemcpy(grads2, t.grads_memory, n * sizeof(float), cudaMemcpyDeviceToHost));
    test_check(memcmp(grads, grads2, n * sizeof(float)) == 0, "%s: the same batch twice: bitwise the same gradients",
               name);
    {
        Trainer k;  // -r 0: every layer's SwiGLU output kept from the forward
        trainer_build(&k, &spec);
        trainer_upload_params(&k, f.params);
        trainer_alloc(&k, f.B, f.T, (size_t)512 << 20, 1, 1, 0);
        llama_fixture_step(&k, &f, s);
        cudaCheck(cudaMemcpy(grads2, k.grads_memory, n * sizeof(float), cudaMemcpyDeviceToHost));
        test_check(memcmp(grads, grads2, n * sizeof(float)) == 0 && k.act_bytes > t.act_bytes,
                   "%s: -r 0 (%zu more activation bytes): bitwise the gradients of -r 1", name,
                   k.act_bytes - t.act_bytes);
        trainer_free(&k);
    }
    // 10 AdamW steps from the fixture's parameters, the trainer's update
    trainer_upload_params(&t, f.params);
    cudaCheck(cudaMemset(t.m, 0, n * sizeof(float)));
    cudaCheck(cudaMemset(t.v, 0, n * sizeof(float)));
    double worst = 0.0;
    for (int k = 0; k < f.S; k++) {
        const float l = llama_fixture_step(&t, &f, s);
        const float norm = trainer_grad_norm(&t, s);
        const float scale = f.clip > 0.0f && norm > f.clip ? f.clip / norm : 1.0f;
        trainer_update(&t, f.lr, f.beta1, f.beta2, f.eps, f.wd, scale, k + 1, s);
        const double e = fabs((double)l - f.losses[k]) / f.losses[k];
        if (!(e <= worst)) worst = e;
        printf("      %s step %2d: loss %.6f vs transformers %.6f, norm %.4f vs %.4f\n", name, k + 1, l, f.losses[k],
               norm, f.norms[k]);
    }
    test_check(worst < 1e-2, "%s: %d AdamW steps' losses within %.2e relative of transformers' (bound 1e-2)", name,
               f.S, worst);
    free(grads);
    free(grads2);
    trainer_free(&t);
    cudaCheck(cudaStreamDestroy(s));
    llama_fixture_free(&f);
}

// The fixtures of LLAMA_FIXTURE_DIR (make test-gpu exports them), or a failure saying how.
static void test_llama_vs_transformers(void) {
    printf("-- the Llama / Qwen2.5 family against transformers\n");
    const char *dir = getenv("LLAMA_FIXTURE_DIR");
    if (!test_check(dir != NULL && dir[0] != 0, "LLAMA_FIXTURE_DIR names the fixtures' directory (python3 "
                    "scripts/export_llama_fixture.py DIR; make test-gpu does it)"))
        return;
    test_llama_fixture(dir, "llama");
    test_llama_fixture(dir, "qwen");
    test_llama_fixture(dir, "llama_hd128");
}

#endif // TEST_GPU_LLAMA_MODEL_CUH
