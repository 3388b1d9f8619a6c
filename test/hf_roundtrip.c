/*
hf_roundtrip.c - reads a Hugging Face model directory into our parameter table and writes it out
again as one: the trainer's reader (-e DIR) and writer (-hf 1) end to end, with nothing else.

    build/hf_roundtrip IN OUT [MAX_SHARD_BYTES]

IN: config.json + model.safetensors (or an index and shards) of LlamaForCausalLM,
Qwen2ForCausalLM or GPT2LMHeadModel, as transformers' save_pretrained writes it (llmc/hf_model.h
says what is checked). The tensors become our table's fp32 parameters (model_load_checked, as
-e reads them), then bf16 (round to nearest even: exact for a bf16 checkpoint), and OUT is
written as the trainer writes its hf_<step> directories (atomically; shards above
MAX_SHARD_BYTES, default 5 * 10^9), with IN's tokenizer files and generation_config.json copied
(llmc/hf_model.h's side files). For a bf16 IN the tensors of OUT are bitwise IN's;
scripts/check_hf_roundtrip.py checks with transformers that both give the same logits, and
test/test_hf_reference.py checks the files with the reference safetensors implementation.
Prints what it did; exits 1 with the reader's or writer's message on any error.
*/
#include "../llmc/utils.h"  // first: it sets the POSIX feature macros
#include "../llmc/bf16.h"
#include "../llmc/hf_model.h"
#include "../llmc/models.h"

int main(int argc, char **argv) {
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: %s IN_DIR OUT_DIR [MAX_SHARD_BYTES]\n", argv[0]);
        return 2;
    }
    uint64_t max_shard = 0;
    if (argc == 4) {
        char *end = NULL;
        errno = 0;
        const unsigned long long v = strtoull(argv[3], &end, 10);
        if (argv[3][0] == 0 || argv[3][0] == '-' || *end != 0 || errno != 0 || v == 0) {
            fprintf(stderr, "Error: MAX_SHARD_BYTES '%s' is not a positive integer\n", argv[3]);
            return 2;
        }
        max_shard = v;
    }
    if (!hf_is_dir(argv[1])) {
        fprintf(stderr, "Error: '%s' is not a directory\n", argv[1]);
        return 1;
    }
    char err[2048];
    ModelSpec spec;
    float *params = NULL;
    if (model_load_checked(argv[1], 0, &spec, &params, err, sizeof(err)) != 0) {
        fprintf(stderr, "Error: %s\n", err);
        return 1;
    }
    const size_t n = spec.num_parameters;
    uint16_t *bf = (uint16_t *)malloc_check(n * sizeof(uint16_t));
    size_t rounded = 0;
    for (size_t i = 0; i < n; i++) {
        bf[i] = bf16_from_float(params[i]);
        rounded += float_from_bf16(bf[i]) != params[i];  // (a NaN counts too)
    }
    free(params);
    HFSideFiles side;
    if (hf_side_files_read_checked(&side, argv[1], err, sizeof(err)) != 0 ||
        hf_write_dir_checked(argv[2], &spec, bf, max_shard, &side, 1, err, sizeof(err)) != 0) {
        fprintf(stderr, "Error: %s\n", err);
        hf_side_files_free(&side);
        free(bf);
        return 1;
    }
    free(bf);
    const char *type = spec.family == llama_family() ? llama_model_type_name(llama_config_of(&spec)->model_type)
                                                     : spec.family->name;
    printf("%s -> %s: %s model, %zu parameters in %zu Hugging Face tensors (bf16)", argv[1], argv[2], type, n,
           hf_num_tensors(&spec));
    if (rounded > 0) printf("; %zu values were not bf16 and are rounded", rounded);
    for (int i = 0; i < side.n; i++) printf("%s %s", i == 0 ? "; copied" : ",", side.name[i]);
    printf("\n");
    hf_side_files_free(&side);
    return 0;
}
