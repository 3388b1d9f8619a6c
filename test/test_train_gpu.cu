/*
test_train_gpu.cu - the trainer's GPU tests (make test-gpu; needs a CUDA GPU):
  1. each llmc kernel against a CPU double reference (test/gpu_kernels_*.cuh);
  2. the whole model against the PyTorch debug fixture (test/fixtures/gpt2_debug*.bin, from
     scripts/export_gpt2_debug.py): the loss and every parameter gradient of one batch, then
     the losses of the fixture's AdamW runs (10 steps each, global-norm clipping, weight decay
     on the 2-D tensors only);
  3. determinism: the same batch twice gives bitwise the same gradients;
  4. resume: a checkpoint written mid-run and resumed continues with bitwise the same losses;
  5. -r 0 (GELU outputs kept) against -r 1 (recomputed): bitwise where the forward's GELU is
     the recomputed one's;
  6. ZeRO-1 (-z 1): on one rank bitwise the plain run (steps, parameters, resume); over 3 ranks
     emulated on this GPU (the collectives done by copies: this build has no NCCL) each rank's
     update of its slice, slice boundaries inside tensors, gives bitwise the ZeRO-0 parameters
     and its slice of master, m, v, and its slice's squared norm ZeRO-0's; a backward with
     gradient buckets (-ov 1) leaves bitwise the same gradients. The real collectives run in
     make test-multigpu (train-zero, train-overlap: 2 GPUs). 4 and 6 again with AdamW's
     moments in bf16 (-bm 1): resume bitwise, ZeRO-1's slices bitwise ZeRO-0's, the losses
     those of fp32 moments up to bf16 rounding;
  7. the Llama / Qwen2.5 family against transformers (test/gpu_llama_model.cuh): loss, logits,
     every gradient and 10 AdamW steps of two small models with the real vocabularies.
The trainer runs in bf16 against PyTorch's fp32/fp64, so the bounds are bf16's: they are
printed with the measured errors.
*/
#define TESTING
#include "../train_gpt.cu"

#include "gpt2_ref.h"
#include "test_util.h"

#include "gpu_kernels_attention.cuh"
#include "gpu_kernels_basic.cuh"
#include "gpu_kernels_llama.cuh"
#include "gpu_kernels_matmul.cuh"
#include "gpu_llama_model.cuh"

// bf16 activations against PyTorch's fp64: on an H200 with fp32 logits the loss was
// 6e-6 off, the gradients 2e-3..7e-3 (rel L2 per tensor), the 10-step AdamW losses within 2e-4;
// the trainer's default bf16 logits add ~1e-4 to the loss
#define LOSS_TOL 1e-3
#define GRAD_TOL 2e-2

static const char *MODEL_PATH = "test/fixtures/gpt2_debug.bin";
static const char *STATE_PATH = "test/fixtures/gpt2_debug_state.bin";

// The model of -e arg (a file or a descriptor) on the device, as main() builds it (comm: the ranks,
// NULL for one; zero: -z; overlap: -ov; bf16_moments: -bm).
static void build_model(Trainer *m, const char *arg, Comm *comm = NULL, int zero = 0, int overlap = 1,
                        int bf16_moments = 0) {
    char err[1024];
    ModelSpec spec;
    float *host = NULL;
    if (model_load_checked(arg, 0, &spec, &host, err, sizeof(err)) != 0) {
        fprintf(stderr, "Error: %s\n", err);
        exit(EXIT_FAILURE);
    }
    trainer_build(m, &spec, comm, zero, overlap, bf16_moments);
    trainer_upload_params(m, host);
    free(host);
}

// Loads the latest complete checkpoint of dir into m and loader, as main() resumes (the moments
// converted to m's precision, the note into note when given); its step or -1.
static int resume_checkpoint(Trainer *m, DataLoader *loader, const char *dir, const Comm *comm,
                             char *note = NULL, size_t note_len = 0) {
    char err[1024];
    Checkpoint ck;
    const int rc = checkpoint_load_checked(dir, &m->spec, comm->rank, comm->nproc, m->zero.stage, loader, &ck, err,
                                           sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "Error: %s\n", err);
        exit(EXIT_FAILURE);
    }
    if (rc == 0) return -1;
    char own[512];
    checkpoint_moments_for_run(&ck, m->bf16_moments, note != NULL ? note : own, note != NULL ? note_len : sizeof(own));
    trainer_upload_checkpoint(m, &ck);
    const int step = ck.step;
    checkpoint_free(&ck);
    return step;
}

// One forward+backward on the fixture batch; returns the loss (grads left in m->grads).
static float train_micro_step(Trainer *m, const GPT2RefState *st, cudaStream_t s) {
    trainer_zero_grad(m, s);
    trainer_set_batch(m, st->x, st->y, st->B, st->T, 1, s);
    trainer_forward(m, st->B, st->T, 0, s);
    trainer_backward(m, st->B, st->T, s);
    float loss = 0.0f;
    cudaCheck(cudaMemcpyAsync(&loss, m->losses, sizeof(float), cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaStreamSynchronize(s));
    return loss;
}

static void test_model_vs_pytorch(void) {
    GPT2Ref ref;
    GPT2RefState st;
    if (!test_check(gpt2ref_load(&ref, MODEL_PATH) == 0, "load %s: %s", MODEL_PATH, ref.error)) return;
    if (!test_check(gpt2ref_state_load(&st, STATE_PATH, &ref) == 0, "load %s: %s", STATE_PATH, st.error)) {
        gpt2ref_free(&ref);
        return;
    }
    cudaStream_t s;
    cudaCheck(cudaStreamCreate(&s));
    Trainer m;
    build_model(&m, MODEL_PATH);
    trainer_alloc(&m, st.B, st.T, (size_t)64 << 20, 1, 1);  // bf16 logits: the trainer's default
    const size_t n = m.spec.num_parameters;
    test_check(n == st.num_parameters, "parameter count %zu vs the fixture's %zu", n, st.num_parameters);

    // 1. loss and every gradient tensor of one batch
    const float loss = train_micro_step(&m, &st, s);
    test_check(fabs(loss - st.loss) < LOSS_TOL, "model loss %.6f vs PyTorch %.6f (abs err %.2e, bound %.0e)", loss,
               st.loss, fabs(loss - st.loss), LOSS_TOL);
    float *grads = (float *)malloc(n * sizeof(float)), *grads2 = (float *)malloc(n * sizeof(float));
    cudaCheck(cudaMemcpy(grads, m.grads_memory, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < m.spec.num_tensors; i++) {
        const ParameterTensor *pt = &m.spec.tensors[i];
        const double e = rel_l2_f32(grads + pt->offset, st.grads + pt->offset, pt->numel);
        test_check(e < GRAD_TOL, "gradient of %-8s rel L2 %.2e (bound %.0e)", pt->name, e, GRAD_TOL);
    }
    // 3. determinism
    train_micro_step(&m, &st, s);
    cudaCheck(cudaMemcpy(grads2, m.grads_memory, n * sizeof(float), cudaMemcpyDeviceToHost));
    test_check(memcmp(grads, grads2, n * sizeof(float)) == 0, "the same batch twice: bitwise the same gradients");

    // 2. the fixture's AdamW runs, each from the fixture's parameters
    for (int run = 0; run < st.n_runs; run++) {
        trainer_upload_params(&m, ref.params);  // the fixture's fp32 parameters, llm.c's order
        cudaCheck(cudaMemset(m.m, 0, n * sizeof(float)));
        cudaCheck(cudaMemset(m.v, 0, n * sizeof(float)));
        double worst = 0.0;
        for (int k = 0; k < st.n_steps; k++) {
            const float l = train_micro_step(&m, &st, s);
            const float norm = trainer_grad_norm(&m, s);
            const float scale = st.grad_clip > 0.0f && norm > st.grad_clip ? st.grad_clip / norm : 1.0f;
            trainer_update(&m, st.lr, st.beta1, st.beta2, st.eps, st.weight_decay[run], scale, k + 1, s);
            const double e = fabs((double)l - st.losses[run * st.n_steps + k]);
            if (!(e <= worst)) worst = e;  // NaN propagates
            printf("      run %d step %2d: loss %.6f vs PyTorch %.6f, norm %.4f vs %.4f\n", run, k + 1, l,
                   st.losses[run * st.n_steps + k], norm, st.norms[run * st.n_steps + k]);
        }
        test_check(worst < LOSS_TOL, "AdamW run %d (weight decay %.2f): %d step losses within %.2e of PyTorch's (bound %.0e)",
                   run, st.weight_decay[run], st.n_steps, worst, LOSS_TOL);
    }
    free(grads);
    free(grads2);
    trainer_free(&m);
    gpt2ref_state_free(&st);
    gpt2ref_free(&ref);
    cudaCheck(cudaStreamDestroy(s));
}

// One training step of the real loop's shape (zero, micro-steps, clip, AdamW); its loss.
static float train_step(Trainer *m, DataLoader *loader, int B, int T, int step, cudaStream_t s) {
    trainer_zero_grad(m, s);
    dataloader_next_batch(loader);
    trainer_set_batch(m, loader->inputs, loader->targets, B, T, 1, s);
    trainer_forward(m, B, T, 0, s);
    trainer_backward(m, B, T, s);
    const float norm = trainer_grad_norm(m, s);
    trainer_update(m, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, norm > 1.0f ? 1.0f / norm : 1.0f, step + 1, s);
    float loss = 0.0f;
    cudaCheck(cudaMemcpyAsync(&loss, m->losses, sizeof(float), cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaStreamSynchronize(s));
    return loss;
}

// 4. a checkpoint written after 2 steps and resumed gives bitwise the same next 2 losses (at
// ZeRO stage zero on one rank; its losses into out[4] when given), for the model of -e model,
// AdamW's moments in bf16 when bf16_moments (-bm 1); the checkpoint has its Hugging Face
// directory (-hf 1), which reads back as its model file
static void test_resume_bitwise(int zero, float *out = NULL, const char *model = "d6", int bf16_moments = 0) {
    const int B = 4, T = 64, steps = 4, at = 2;
    char dir[] = "/tmp/train_gpt_resume_XXXXXX";
    if (!test_check(mkdtemp(dir) != NULL, "mkdtemp for the resume test")) return;
    cudaStream_t s;
    cudaCheck(cudaStreamCreate(&s));
    float straight[8], resumed[8];
    Comm single;
    memset(&single, 0, sizeof(single));
    single.nproc = 1;
    const HFExport hf = {0, NULL};  // with its Hugging Face directory (-hf 1), nothing beside it
    {
        Trainer m;
        build_model(&m, model, &single, zero, 1, bf16_moments);
        trainer_alloc(&m, B, T, (size_t)256 << 20, 1, 1);
        DataLoader loader;
        dataloader_init(&loader, "data/tiny_shakespeare_train.bin", B, T, 0, 1, 1);
        for (int k = 0; k < steps; k++) {
            if (k == at) write_checkpoint(&m, &loader, dir, k, &single, &hf);
            straight[k] = train_step(&m, &loader, B, T, k, s);
        }
        dataloader_free(&loader);
        trainer_free(&m);
    }
    {
        Trainer m;
        build_model(&m, model, &single, zero, 1, bf16_moments);
        trainer_alloc(&m, B, T, (size_t)256 << 20, 1, 1);
        DataLoader loader;
        dataloader_init(&loader, "data/tiny_shakespeare_train.bin", B, T, 0, 1, 1);
        char note[512];
        const int step = resume_checkpoint(&m, &loader, dir, &single, note, sizeof(note));
        test_check(step == at && note[0] == 0, "resume finds the checkpoint of step %d (got %d), of this run's "
                   "moment precision (no conversion note: '%s')", at, step, note);
        for (int k = at; k < steps; k++) resumed[k] = train_step(&m, &loader, B, T, k, s);
        dataloader_free(&loader);
        trainer_free(&m);
    }
    int same = 1;
    for (int k = at; k < steps; k++) {
        printf("      step %d: loss %.9g straight, %.9g resumed\n", k + 1, straight[k], resumed[k]);
        same &= memcmp(&straight[k], &resumed[k], sizeof(float)) == 0;
    }
    test_check(same && isfinite(straight[steps - 1]) && straight[steps - 1] < straight[0],
               "%s -z %d -bm %d, resumed run: bitwise the same losses as the uninterrupted one, and falling (%.4f -> "
               "%.4f)", model, zero, bf16_moments, straight[0], straight[steps - 1]);
    if (out != NULL) memcpy(out, straight, sizeof(float) * steps);
    char path[CHECKPOINT_PATH_MAX], err[1024] = "";
    {
        ModelSpec run, file, hf;
        uint16_t *bits = NULL;
        float *wide = NULL;
        checkpoint_model_path(path, sizeof(path), dir, at);
        int ok = model_load_checked(model, 0, &run, NULL, err, sizeof(err)) == 0 &&
                 run.family->read_file(path, &file, &bits, err, sizeof(err)) == 0;
        hf_checkpoint_path(path, sizeof(path), dir, at);
        ok = ok && hf_load_dir_checked(path, &hf, &wide, err, sizeof(err)) == 0 &&
             model_spec_compare(&hf, &file, err, sizeof(err)) == 0;
        size_t differ = 0;
        for (size_t i = 0; ok && i < file.num_parameters; i++) differ += float_from_bf16(bits[i]) != wide[i];
        test_check(ok && differ == 0, "%s: the checkpoint's hf_%08d reads back (-e DIR) as its model file, bitwise "
                   "(%zu differ)%s%s", model, at, differ, err[0] ? ": " : "", err);
        free(bits);
        free(wide);
        hf_remove_flat_dir(path);
    }
    for (int r = -1; r <= 1; r++) {  // the step's files, so that the directory can go
        if (r < 0) checkpoint_model_path(path, sizeof(path), dir, at);
        else if (r == 0) checkpoint_state_path(path, sizeof(path), dir, at, 0);
        else checkpoint_done_path(path, sizeof(path), dir, at);
        remove(path);
    }
    rmdir(dir);
    cudaCheck(cudaStreamDestroy(s));
}

// 5. -r 0 (each layer's GELU output kept from the forward) against -r 1 (recomputed in the
// backward) on one batch of a fresh d6: the same loss bit for bit. With the unfused forward
// (the GELU by gelu_forward of the rounded pre-activation, which is what -r 1 recomputes)
// every gradient is bitwise the same. With cuBLASLt's GELU epilogue the forward's GELU is of
// the fp32 pre-activation, so -r 0 feeds fcprojw's gradient GEMM those values: every other
// gradient is bitwise the same, fcprojw's within bf16 rounding.
static void test_recompute_modes(void) {
    const int B = 4, T = 64;
    cudaStream_t s;
    cudaCheck(cudaStreamCreate(&s));
    Trainer m[2];  // m[r]: -r r
    for (int r = 0; r < 2; r++) {
        build_model(&m[r], "d6");
        trainer_alloc(&m[r], B, T, (size_t)256 << 20, 1, 1, r);
    }
    const size_t gelu_bytes = (size_t)B * T * 4 * m[0].spec.channels * sizeof(floatX);
    test_check(m[0].act_bytes - m[1].act_bytes == (size_t)(m[0].spec.num_layers - 1) * gelu_bytes,
               "-r 0 allocates L - 1 more GELU buffers of B*T*4C bf16 (%zu bytes more)", m[0].act_bytes - m[1].act_bytes);
    DataLoader loader;
    dataloader_init(&loader, "data/tiny_shakespeare_train.bin", B, T, 0, 1, 1);
    dataloader_next_batch(&loader);
    const size_t n = m[0].spec.num_parameters;
    float *grads[2] = {(float *)malloc(n * sizeof(float)), (float *)malloc(n * sizeof(float))};
    for (int fused = 1; fused >= 0; fused--) {
        float loss[2];
        for (int r = 0; r < 2; r++) {
            m[r].mm.fuse_epilogues = fused;
            trainer_zero_grad(&m[r], s);
            trainer_set_batch(&m[r], loader.inputs, loader.targets, B, T, 1, s);
            trainer_forward(&m[r], B, T, 0, s);
            trainer_backward(&m[r], B, T, s);
            cudaCheck(cudaMemcpyAsync(&loss[r], m[r].losses, sizeof(float), cudaMemcpyDeviceToHost, s));
            cudaCheck(cudaStreamSynchronize(s));
            cudaCheck(cudaMemcpy(grads[r], m[r].grads_memory, n * sizeof(float), cudaMemcpyDeviceToHost));
        }
        int others_same = 1, fcprojw_same = 0;
        double e_fcprojw = 0.0;
        for (int i = 0; i < m[0].spec.num_tensors; i++) {
            const ParameterTensor *pt = &m[0].spec.tensors[i];
            const int same = memcmp(grads[0] + pt->offset, grads[1] + pt->offset, pt->numel * sizeof(float)) == 0;
            if (strcmp(pt->name, "fcprojw") == 0) {
                fcprojw_same = same;
                e_fcprojw = rel_l2_f32(grads[0] + pt->offset, grads[1] + pt->offset, pt->numel);
            } else {
                others_same &= same;
            }
        }
        if (fused)
            test_check(memcmp(&loss[0], &loss[1], sizeof(float)) == 0 && others_same && e_fcprojw < 1e-2,
                       "-r 0 vs -r 1, GELU epilogue: loss %.9g vs %.9g (bitwise %s), every gradient but fcprojw's "
                       "bitwise equal (%s), fcprojw's rel L2 %.2e (%s; bound 1e-2)", loss[0], loss[1],
                       memcmp(&loss[0], &loss[1], sizeof(float)) == 0 ? "equal" : "DIFFERENT", others_same ? "yes" : "NO",
                       e_fcprojw, fcprojw_same ? "bitwise equal" : "the epilogue's GELU vs the recomputed one");
        else
            test_check(memcmp(&loss[0], &loss[1], sizeof(float)) == 0 && others_same && fcprojw_same,
                       "-r 0 vs -r 1, unfused forward: loss and every gradient bitwise equal (loss %.9g)", loss[0]);
    }
    free(grads[0]);
    free(grads[1]);
    dataloader_free(&loader);
    trainer_free(&m[0]);
    trainer_free(&m[1]);
    cudaCheck(cudaStreamDestroy(s));
}

// 6. ZeRO-1 on one GPU: on one rank bitwise the plain run; over 3 ranks emulated, each rank's
// slice of the update bitwise ZeRO-0's. AdamW's moments in bf16 when bf16_moments (-bm 1);
// the resume test's 4 losses (-z 0) into losses[4].
static void test_zero(int bf16_moments, float *losses) {
    printf("-- ZeRO-1, AdamW moments in %s\n", bf16_moments ? "bf16 (-bm 1)" : "fp32");
    // one rank: the resume test's 4 steps at -z 1 and -z 0, bitwise the same losses
    float l0[4], l1[4];
    test_resume_bitwise(0, l0, "d6", bf16_moments);
    test_resume_bitwise(1, l1, "d6", bf16_moments);
    memcpy(losses, l0, sizeof(l0));
    test_check(memcmp(l0, l1, sizeof(l0)) == 0, "-z 1 -bm %d on one rank: bitwise the losses of -z 0 (%.9g %.9g %.9g "
               "%.9g)", bf16_moments, l1[0], l1[1], l1[2], l1[3]);

    // three ranks on this GPU: A is the plain model (one process, ZeRO-0); R[r] rank r of 3 at
    // ZeRO-1; Z rank 0 of 3 at ZeRO-0 with gradient buckets. The collectives are copies here.
    const int B = 4, T = 64, nproc = 3, steps = 3;
    cudaStream_t s;
    cudaCheck(cudaStreamCreate(&s));
    Comm ranks[nproc];
    Trainer A, Z, R[nproc];
    build_model(&A, "d6", NULL, 0, 1, bf16_moments);
    trainer_alloc(&A, B, T, (size_t)256 << 20, 1, 1);
    for (int r = 0; r < nproc; r++) {
        memset(&ranks[r], 0, sizeof(ranks[r]));
        ranks[r].nproc = nproc;
        ranks[r].rank = r;
        build_model(&R[r], "d6", &ranks[r], 1, 0, bf16_moments);
        trainer_alloc(&R[r], 1, 64, (size_t)64 << 20, 1, 1);  // its norm's scratch
    }
    build_model(&Z, "d6", &ranks[0], 0, 1, bf16_moments);
    trainer_alloc(&Z, B, T, (size_t)256 << 20, 1, 1);
    const size_t n = A.spec.num_parameters;
    const ZeroLayout *z0 = &R[0].zero;
    int cuts = 0;  // slice boundaries inside a tensor
    for (int r = 1; r < nproc; r++)
        for (int i = 0; i < A.spec.num_tensors; i++)
            cuts += A.spec.tensors[i].offset < r * z0->slice && r * z0->slice < A.spec.tensors[i].offset + A.spec.tensors[i].numel;
    test_check(z0->slice % ZERO_ALIGN == 0 && z0->padded >= n && z0->padded - n < (size_t)nproc * ZERO_ALIGN &&
               R[0].zero.opt_count == z0->slice && Z.zero.opt_count == n && cuts == nproc - 1,
               "d6 over %d ranks: slices of %zu (aligned), %d boundaries inside tensors; ZeRO-1 keeps %zu of %zu in "
               "master, m, v", nproc, z0->slice, cuts, R[0].zero.opt_count, n);
    DataLoader loader;
    dataloader_init(&loader, "data/tiny_shakespeare_train.bin", B, T, 0, 1, 1);
    float *h = (float *)malloc(z0->padded * sizeof(float)), *h2 = (float *)malloc(z0->padded * sizeof(float));
    uint16_t *pa = (uint16_t *)malloc(n * 2), *pr = (uint16_t *)malloc(n * 2);
    int grads_same = 1, norms_same = 1, params_same = 1, state_same = 1;
    for (int k = 0; k < steps; k++) {
        dataloader_next_batch(&loader);
        for (int which = 0; which < 2; which++) {  // A, then Z with its buckets
            Trainer *m = which == 0 ? &A : &Z;
            trainer_zero_grad(m, s);
            trainer_set_batch(m, loader.inputs, loader.targets, B, T, 1, s);
            trainer_forward(m, B, T, 0, s);
            trainer_backward(m, B, T, s, 1);
            trainer_reduce_grads(m, s);
        }
        test_check(Z.buckets.pending == 0, "the buckets' wait was taken (step %d)", k + 1);
        cudaCheck(cudaStreamSynchronize(s));
        cudaCheck(cudaMemcpy(h, A.grads_memory, n * sizeof(float), cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(h2, Z.grads_memory, n * sizeof(float), cudaMemcpyDeviceToHost));
        grads_same &= memcmp(h, h2, n * sizeof(float)) == 0;
        const float norm = trainer_grad_norm(&A, s);
        const float scale = norm > 1.0f ? 1.0f / norm : 1.0f;
        // the ranks' reduced gradients: A's (a reduce-scatter of equal copies)
        for (int r = 0; r < nproc; r++) {
            cudaCheck(cudaMemcpy(R[r].grads_memory, A.grads_memory, n * sizeof(float), cudaMemcpyDeviceToDevice));
            trainer_grad_norm(&R[r], s);  // its own slice's partial sum (the others' would come by NCCL)
        }
        trainer_grad_norm(&Z, s);  // ZeRO-0 sums every slice itself
        float pz[nproc], prr;
        cudaCheck(cudaMemcpy(pz, Z.norm_partials, sizeof(pz), cudaMemcpyDeviceToHost));
        for (int r = 0; r < nproc; r++) {
            cudaCheck(cudaMemcpy(&prr, R[r].norm_partials + r, sizeof(float), cudaMemcpyDeviceToHost));
            norms_same &= memcmp(&prr, &pz[r], sizeof(float)) == 0;
        }
        trainer_update(&A, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, scale, k + 1, s);
        for (int r = 0; r < nproc; r++) trainer_update(&R[r], 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, scale, k + 1, s);
        cudaCheck(cudaStreamSynchronize(s));
        // the all-gather: each rank's slice of the bf16 parameters to every other rank
        for (int r = 0; r < nproc; r++)
            for (int q = 0; q < nproc; q++)
                if (q != r)
                    cudaCheck(cudaMemcpy(R[q].params_memory + R[r].zero.lo, R[r].params_memory + R[r].zero.lo,
                                         R[r].zero.count * sizeof(floatX), cudaMemcpyDeviceToDevice));
        cudaCheck(cudaMemcpy(pa, A.params_memory, n * 2, cudaMemcpyDeviceToHost));
        for (int r = 0; r < nproc; r++) {
            cudaCheck(cudaMemcpy(pr, R[r].params_memory, n * 2, cudaMemcpyDeviceToHost));
            params_same &= memcmp(pa, pr, n * 2) == 0;
            // master fp32, m and v of the trainer's precision: compared as bytes, offsets in elements
            const char *bufs[3][2] = {{(const char *)A.master, (const char *)R[r].master},
                                      {(const char *)A.m, (const char *)R[r].m},
                                      {(const char *)A.v, (const char *)R[r].v}};
            const size_t es[3] = {sizeof(float), trainer_moment_bytes(&A), trainer_moment_bytes(&A)};
            for (int b = 0; b < 3; b++) {
                const size_t bytes = R[r].zero.count * es[b];
                cudaCheck(cudaMemcpy(h, bufs[b][0] + R[r].zero.lo * es[b], bytes, cudaMemcpyDeviceToHost));
                cudaCheck(cudaMemcpy(h2, bufs[b][1], bytes, cudaMemcpyDeviceToHost));
                state_same &= memcmp(h, h2, bytes) == 0;
            }
        }
        // Z follows A (its own update would be A's: it holds every parameter)
        cudaCheck(cudaMemcpy(Z.params_memory, A.params_memory, n * 2, cudaMemcpyDeviceToDevice));
    }
    test_check(grads_same, "a backward with gradient buckets (-ov 1; the collectives no-ops here): bitwise the "
               "gradients of the plain backward, %d steps", steps);
    test_check(norms_same, "each ZeRO-1 rank's squared norm of its slice: bitwise ZeRO-0's sum of that slice");
    test_check(params_same && state_same, "%d AdamW steps over %d emulated ZeRO-1 ranks (-bm %d): bitwise the ZeRO-0 "
               "bf16 parameters after the all-gather (stochastic rounding included), each rank's master, m, v (%s) its "
               "slice of ZeRO-0's", steps, nproc, bf16_moments, bf16_moments ? "bf16" : "fp32");
    free(h);
    free(h2);
    free(pa);
    free(pr);
    dataloader_free(&loader);
    trainer_free(&A);
    trainer_free(&Z);
    for (int r = 0; r < nproc; r++) trainer_free(&R[r]);
    cudaCheck(cudaStreamDestroy(s));
}

int main(void) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        fprintf(stderr, "test_train_gpu: no CUDA device\n");
        return 2;
    }
    test_basic_kernels();
    test_llama_kernels();
    test_matmul();
    test_attention();
    test_model_vs_pytorch();
    test_resume_bitwise(0);
    test_recompute_modes();
    float fp32_losses[4], bf16_losses[4];
    test_zero(0, fp32_losses);
    test_zero(1, bf16_losses);
    // bf16 moments change the updates from the second on (the first steps the weights with the
    // fp32 m, v it computes, and only stores them rounded): the losses before and after the first
    // update bitwise the fp32 run's, the later ones within bf16 rounding of them
    double worst = 0.0;
    for (int k = 2; k < 4; k++) {
        const double e = fabs((double)bf16_losses[k] - fp32_losses[k]);
        if (!(e <= worst)) worst = e;  // NaN propagates
    }
    test_check(memcmp(bf16_losses, fp32_losses, 2 * sizeof(float)) == 0 && worst < 1e-2,
               "d6 -bm 1 vs -bm 0, 4 steps: the first 2 losses bitwise the same, the next 2 within %.2e (bound 1e-2): "
               "%.9g %.9g vs %.9g %.9g", worst, bf16_losses[2], bf16_losses[3], fp32_losses[2], fp32_losses[3]);
    test_llama_vs_transformers();
    test_resume_bitwise(0, NULL, "qwen-test");  // the Llama family's checkpoints (tied head, biases)
    test_resume_bitwise(1, NULL, "llama-test");  // and ZeRO-1's layout of its table (untied head)
    test_resume_bitwise(0, NULL, "qwen-test", 1);  // with bf16 moments (-bm 1)
    test_resume_bitwise(1, NULL, "llama-test", 1);
    return test_summary();
}
