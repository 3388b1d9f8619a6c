/*
gen_corpus.c - writes the binary seed files of test/fuzz/corpus/ with the project's own writers:
small valid files (a few KB each) of every binary format the fuzz targets read.
    gcc -std=c11 -D_DEFAULT_SOURCE -Iflce -Itest test/fuzz/gen_corpus.c -lm -lcjson -o build/gen_corpus
    build/gen_corpus test/fuzz/corpus
*/
#include "../../llmc/checkpoint.h"
#include "../../llmc/gpt2.h"
#include "../../llmc/llama.h"
#include "../../llmc/safetensors.h"
#include "../../llmc/shard.h"
#include "../../llmc/tokenizer.h"

static char err[1024];
static void ok(int rc, const char *what) {
    if (rc != 0) {
        fprintf(stderr, "gen_corpus: %s: %s\n", what, err);
        exit(1);
    }
}
static const char *at(const char *dir, const char *name) {
    static char p[512];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return p;
}

int main(int argc, char **argv) {
    const char *d = argc > 1 ? argv[1] : "test/fuzz/corpus";
    char path[512];
    // GPT-2: L=1, C=8, NH=2, V=5, Vp=8, maxT=4, fp32 and bf16
    GPT2Config g = {4, 5, 8, 1, 2, 8};
    size_t n = gpt2_num_parameters(&g);
    float *p = (float *)calloc(n, 4);
    uint16_t *pb = (uint16_t *)calloc(n, 2);
    for (size_t i = 0; i < n; i++) p[i] = (float)i / (float)n - 0.5f;
    ok(model_write_checked(at(d, "gpt2/fp32.bin"), &g, MODEL_VERSION_FP32, p, 0, err, sizeof(err)), "gpt2 fp32");
    ok(model_write_checked(at(d, "gpt2/bf16.bin"), &g, MODEL_VERSION_BF16, pb, 0, err, sizeof(err)), "gpt2 bf16");
    free(p);
    free(pb);
    // Llama and Qwen2: C=16, one head of 16, I=16, V=5, Vp=128
    LlamaConfig c;
    memset(&c, 0, sizeof(c));
    c.model_type = LLAMA_TYPE_LLAMA;
    c.hidden_size = 16;
    c.num_hidden_layers = 1;
    c.num_attention_heads = 1;
    c.num_key_value_heads = 1;
    c.head_dim = 16;
    c.intermediate_size = 16;
    c.vocab_size = 5;
    c.padded_vocab_size = 128;
    c.max_position_embeddings = 8;
    c.tie_word_embeddings = 1;
    c.rope_scaling = LLAMA_ROPE_LLAMA3;
    c.rope_original_max_position_embeddings = 4;
    c.eos_token_id = 1;
    c.rms_norm_eps = 1e-5;
    c.rope_theta = 10000.0;
    c.rope_factor = 8.0;
    c.rope_low_freq_factor = 1.0;
    c.rope_high_freq_factor = 4.0;
    c.initializer_range = 0.02;
    pb = (uint16_t *)calloc(llama_num_parameters(&c), 2);
    ok(llama_model_write_checked(at(d, "llama/llama.bin"), &c, pb, 0, err, sizeof(err)), "llama");
    c.model_type = LLAMA_TYPE_QWEN2;
    c.attention_bias = 1;
    c.rope_scaling = LLAMA_ROPE_NONE;
    c.rope_original_max_position_embeddings = 0;
    c.rope_factor = c.rope_low_freq_factor = c.rope_high_freq_factor = 0;
    free(pb);
    pb = (uint16_t *)calloc(llama_num_parameters(&c), 2);
    ok(llama_model_write_checked(at(d, "llama/qwen2.bin"), &c, pb, 0, err, sizeof(err)), "qwen2");
    free(pb);
    // shards: uint16 (version 1) and uint32 (version 7)
    uint32_t ids[64];
    for (int i = 0; i < 64; i++) ids[i] = (uint32_t)(i * 37 % 50257);
    ok(shard_write_checked(at(d, "shard/v1.bin"), ids, 64, SHARD_VERSION, err, sizeof(err)), "shard v1");
    ok(shard_write_checked(at(d, "shard/v7.bin"), ids, 20, SHARD_VERSION_LLAMA3, err, sizeof(err)), "shard v7");
    // tokenizer: 6 tokens
    const unsigned char tb[] = "abc\n hello<|endoftext|>\xff";
    const uint32_t offs[7] = {0, 1, 2, 3, 4, 10, 24};
    ok(tokenizer_write_checked(at(d, "tokenizer/v2.bin"), 6, 5, offs, tb, err, sizeof(err)), "tokenizer");
    // safetensors: F32 [2,3], BF16 [4], F16 scalar
    float f6[6] = {1, 2, 3, 4, 5, 6};
    uint16_t b4[4] = {0x3f80, 0x4000, 0xbf80, 0x7f80}, h1 = 0x3c00;
    SafeTensorsWriteTensor st[3];
    memset(st, 0, sizeof(st));
    st[0].name = "a.weight"; st[0].dtype = ST_F32; st[0].ndim = 2; st[0].shape[0] = 2; st[0].shape[1] = 3; st[0].data = f6;
    st[1].name = "b.bias"; st[1].dtype = ST_BF16; st[1].ndim = 1; st[1].shape[0] = 4; st[1].data = b4;
    st[2].name = "c"; st[2].dtype = ST_F16; st[2].ndim = 0; st[2].data = &h1;
    ok(safetensors_write_file_checked(at(d, "safetensors/three.safetensors"), st, 3, 0, err, sizeof(err)), "safetensors");
    // state files of FUZZ_STATE_PARAMS (64) parameters: with master weights, and shuffled loader state
    TrainingState s;
    memset(&s, 0, sizeof(s));
    s.num_processes = 1;
    s.use_master_weights = 1;
    s.step = 3;
    s.rng_state = 12345;
    s.num_parameters = 64;
    s.m = (float *)calloc(64, 4);
    s.v = (float *)calloc(64, 4);
    s.master_weights = (float *)calloc(64, 4);
    s.loader.sample_idx = 1;
    ok(state_write_checked(at(d, "checkpoint/plain.bin"), &s, 0, err, sizeof(err)), "state");
    snprintf(path, sizeof(path), "%s/shard_tmp.bin", d);
    ok(shard_write_checked(path, ids, 64, SHARD_VERSION, err, sizeof(err)), "shard for the loader");
    DataLoader l;
    ok(dataloader_init_checked(&l, path, 2, 4, 0, 1, 1, 0, err, sizeof(err)), "loader");
    dataloader_get_state(&l, &s.loader);
    ok(state_write_checked(at(d, "checkpoint/shuffled.bin"), &s, 0, err, sizeof(err)), "shuffled state");
    dataloader_free(&l);
    remove(path);
    return 0;
}
