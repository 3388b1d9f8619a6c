# Build of the flce library, its tests, the data tools, the dev/ benchmarks and the trainer.
#   make                 everything (CUDA code for sm_$(GPU_COMPUTE_CAPABILITY), default 90)
#   make test            the CPU test suite (no GPU needed; what CI runs)
#   make test-gpu        the GPU test suites (on a machine with a CUDA GPU)
#   make test-multigpu   the trainer on 2 GPUs (MG_NP=N: N under mpirun)
#   make bench           the benchmarks' standard rows; bench-train, bench-peers
#   make train_gpt       the trainer (./train_gpt -h)
#   make data            re-creates the Tiny Shakespeare shards and tokenizer in data/
# Warnings are errors everywhere: nvcc's own and the host compiler's.

NVCC ?= nvcc
CC ?= gcc
GPU_COMPUTE_CAPABILITY ?= 90
BUILD := build
SHELL := /bin/bash

CFLAGS := -O2 -std=c11 -Wall -Wextra -Werror -Iflce -Itest
ifeq ($(GPU_COMPUTE_CAPABILITY),90)
# Hopper: the sm_90a target, whose wgmma and setmaxnreg flce's own GEMMs use
# (common/gemm_sm90.cuh), plus compute_90 PTX for newer GPUs, which it leaves on the cuBLASLt
# path; other targets build the cuBLASLt path alone
NVCC_ARCH := -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_90,code=compute_90 -DSM90_GEMM_BUILD
else
NVCC_ARCH := -gencode arch=compute_$(GPU_COMPUTE_CAPABILITY),code=[sm_$(GPU_COMPUTE_CAPABILITY),compute_$(GPU_COMPUTE_CAPABILITY)]
endif
NVCC_FLAGS := -O3 -std=c++17 $(NVCC_ARCH) -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror -Icommon -Iflce -Itest
NVCC_LIBS := -lcublasLt -lcublas
# cJSON (Debian's libcjson-dev) reads and writes Hugging Face's JSON: config.json, tokenizer.json,
# the safetensors header. On a machine without it installed, CJSON_DIR points at an unpacked
# copy (dpkg -x of libcjson-dev and libcjson1): its include/ and lib/ are used.
CJSON_DIR ?=
# a GPU machine without it: the copy scripts/gpu_deps.sh unpacks into .deps/cjson (carried there),
# also on the library path of the programs run here (a binary built elsewhere has no rpath to it)
ifeq ($(CJSON_DIR)$(wildcard /usr/include/cjson/cJSON.h),)
ifneq ($(wildcard .deps/cjson/usr/include/cjson),)
CJSON_DIR := $(CURDIR)/.deps/cjson
export LD_LIBRARY_PATH := $(CJSON_DIR)/usr/lib/x86_64-linux-gnu$(if $(LD_LIBRARY_PATH),:$(LD_LIBRARY_PATH))
endif
endif
CJSON_CFLAGS := $(if $(CJSON_DIR),-I$(CJSON_DIR)/usr/include)
CJSON_LIBS := $(if $(CJSON_DIR),-L$(CJSON_DIR)/usr/lib/x86_64-linux-gnu -Xlinker -rpath=$(CJSON_DIR)/usr/lib/x86_64-linux-gnu) -lcjson

# the toolkit of $(NVCC); CUPTI, for dev/ktrace.c (build/libktrace.so), where that toolkit has it
CUDA_ROOT := $(abspath $(dir $(shell command -v $(NVCC)))..)
CUPTI_INC := $(patsubst %/cupti.h,%,$(firstword $(wildcard $(CUDA_ROOT)/include/cupti.h $(CUDA_ROOT)/extras/CUPTI/include/cupti.h)))
CUPTI_LIB := $(patsubst %/libcupti.so,%,$(firstword $(wildcard $(CUDA_ROOT)/lib64/libcupti.so $(CUDA_ROOT)/extras/CUPTI/lib64/libcupti.so)))
KTRACE := $(if $(and $(CUPTI_INC),$(CUPTI_LIB)),$(BUILD)/libktrace.so)

# common/: the CUDA layer flce/, llmc/ and dev/ share (-Icommon)
COMMON_HEADERS := common/cuda_check.cuh common/cuda_util.cuh common/gemm_lt.cuh common/gemm_sm90.cuh
FLCE_HEADERS := flce/flce.h flce/flce_nccl.h flce/flce_internal.h flce/flce_call.cuh flce/flce_kernels.cuh \
                flce/flce_sm90.cuh $(COMMON_HEADERS)
LLMC_HEADERS := llmc/utils.h llmc/metrics_log.h llmc/bf16.h llmc/rand.h llmc/shard.h llmc/tokenizer.h llmc/dataloader.h llmc/gpt2.h llmc/llama.h \
                llmc/checkpoint.h llmc/train_config.h llmc/schedulers.h llmc/sampler.h llmc/mfu.h \
                llmc/multi_gpu.h llmc/launch_plan.h llmc/fault.h llmc/rendezvous.h llmc/comm.h \
                llmc/zero.h llmc/model.h llmc/models.h llmc/rope.h llmc/safetensors.h llmc/hf_config.h llmc/hf_model.h \
                flce/flce.h
LLMC_CUDA_HEADERS := llmc/cuda_common.cuh llmc/encoder.cuh llmc/layernorm.cuh llmc/gelu.cuh llmc/adamw.cuh \
                     llmc/global_norm.cuh llmc/attention.cuh llmc/attention_sm90.cuh llmc/matmul.cuh llmc/matmul_sm90.cuh \
                     llmc/rmsnorm.cuh llmc/rope.cuh llmc/swiglu.cuh llmc/step_profile.h \
                     llmc/model.cuh llmc/models.cuh llmc/gpt2.cuh llmc/llama.cuh \
                     $(COMMON_HEADERS)
TEST_HEADERS := test/test_util.h test/test_files.h test/fixture.h test/vp_comm.h flce/flce_ref.h

.PHONY: all lib tests dev test test-gpu data clean

all: lib tests dev train_gpt

lib: $(BUILD)/libflce.a $(BUILD)/libflce.so

tests: $(BUILD)/test_cpu $(BUILD)/test_gpu $(BUILD)/test_train_gpu $(BUILD)/test_attention_gpu $(BUILD)/test_bpe \
       $(BUILD)/test_gpt2_cpu $(BUILD)/test_llama_cpu \
       $(BUILD)/test_llmc $(BUILD)/test_train_host $(BUILD)/test_hf $(BUILD)/hf_roundtrip $(BUILD)/bpe_encode \
       $(BUILD)/test_hf_tokenizer

$(BUILD):
	mkdir -p $(BUILD)

# --- the flce library -------------------------------------------------------------------
# flce_plan.c: configuration, planner and cost model, plain C (no GPU needed); flce.cu: the API
# and a call's dispatch; flce_lt.cu: the cuBLASLt path; flce_sm90.cu: the Hopper path
FLCE_CUDA_OBJS := $(BUILD)/flce.o $(BUILD)/flce_lt.o $(BUILD)/flce_sm90.o
FLCE_CUDA_PIC_OBJS := $(FLCE_CUDA_OBJS:.o=_pic.o)

$(BUILD)/flce_plan.o: flce/flce_plan.c flce/flce.h flce/flce_internal.h | $(BUILD)
	$(CC) $(CFLAGS) -c $< -o $@

$(FLCE_CUDA_OBJS): $(BUILD)/%.o: flce/%.cu $(FLCE_HEADERS) | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@

$(BUILD)/libflce.a: $(BUILD)/flce_plan.o $(FLCE_CUDA_OBJS)
	rm -f $@
	ar rcs $@ $^

# the shared library, for bindings that load it at run time (flce/python, through ctypes): the
# same sources compiled position-independent. It carries the static CUDA runtime, whose symbols
# --exclude-libs keeps out of its exports, so that in a process that has loaded another CUDA
# runtime (PyTorch's) flce's calls cannot bind to that one.
$(BUILD)/flce_plan_pic.o: flce/flce_plan.c flce/flce.h flce/flce_internal.h | $(BUILD)
	$(CC) $(CFLAGS) -fPIC -c $< -o $@

$(FLCE_CUDA_PIC_OBJS): $(BUILD)/%_pic.o: flce/%.cu $(FLCE_HEADERS) | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) -Xcompiler -fPIC -c $< -o $@

$(BUILD)/libflce.so: $(BUILD)/flce_plan_pic.o $(FLCE_CUDA_PIC_OBJS)
	$(NVCC) $(NVCC_ARCH) -shared -o $@ $^ $(NVCC_LIBS) -Xlinker --exclude-libs,ALL

$(BUILD)/flce_ref.o: flce/flce_ref.c flce/flce_ref.h flce/flce.h | $(BUILD)
	$(CC) $(CFLAGS) -c $< -o $@

# --- the trainer ------------------------------------------------------------------------
# Several GPUs when NCCL is installed (-DMULTI_GPU: -pi fs and -pi tcp, llmc/multi_gpu.h), and
# with OpenMPI too also under mpirun (-DUSE_MPI: -pi mpi). NO_USE_MPI=1 leaves MPI out,
# NO_MULTI_GPU=1 builds a single-GPU trainer anyway. build/train_gpt_nompi: the trainer as
# NO_USE_MPI=1 builds it, beside ./train_gpt (make test-multigpu runs both).
OPENMPI_DIR ?= /usr/lib/x86_64-linux-gnu/openmpi
NCCL_H := $(firstword $(wildcard /usr/include/nccl.h /usr/local/include/nccl.h $(CUDA_ROOT)/include/nccl.h))
ifeq ($(NO_MULTI_GPU),)
ifneq ($(NCCL_H),)
TRAIN_NCCL := -DMULTI_GPU -lnccl
TRAIN_MULTI_GPU := $(TRAIN_NCCL)
ifeq ($(NO_USE_MPI),)
ifneq ($(wildcard $(OPENMPI_DIR)/include/mpi.h),)
TRAIN_MULTI_GPU += -DUSE_MPI -DOMPI_SKIP_MPICXX -I$(OPENMPI_DIR)/include -L$(OPENMPI_DIR)/lib -lmpi
endif
endif
endif
endif

train_gpt: train_gpt.cu $(LLMC_HEADERS) $(LLMC_CUDA_HEADERS) $(FLCE_HEADERS) $(BUILD)/libflce.a
	$(NVCC) $(NVCC_FLAGS) $(CJSON_CFLAGS) -I. -o $@ train_gpt.cu $(BUILD)/libflce.a $(NVCC_LIBS) $(TRAIN_MULTI_GPU) \
	    $(CJSON_LIBS)

$(BUILD)/train_gpt_nompi: train_gpt.cu $(LLMC_HEADERS) $(LLMC_CUDA_HEADERS) $(FLCE_HEADERS) $(BUILD)/libflce.a
	$(NVCC) $(NVCC_FLAGS) $(CJSON_CFLAGS) -I. -o $@ train_gpt.cu $(BUILD)/libflce.a $(NVCC_LIBS) $(TRAIN_NCCL) $(CJSON_LIBS)

$(BUILD)/gpt2_ref.o: test/gpt2_ref.c test/gpt2_ref.h flce/flce_ref.h | $(BUILD)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/test_train_gpu: test/test_train_gpu.cu train_gpt.cu $(wildcard test/gpu_*.cuh) $(LLMC_HEADERS) \
                         $(LLMC_CUDA_HEADERS) $(TEST_HEADERS) $(BUILD)/gpt2_ref.o $(BUILD)/flce_ref.o $(BUILD)/libflce.a
	$(NVCC) $(NVCC_FLAGS) $(CJSON_CFLAGS) -I. -o $@ test/test_train_gpu.cu $(BUILD)/gpt2_ref.o $(BUILD)/flce_ref.o \
	    $(BUILD)/libflce.a $(NVCC_LIBS) $(CJSON_LIBS)

# --- dev/: the FLCE strategies side by side -------------------------------------------
dev: $(BUILD)/flce_bench $(BUILD)/flce_plans $(BUILD)/gemm_algos $(BUILD)/gemm_sm90 $(BUILD)/attention_bench $(BUILD)/matmul_bench $(KTRACE) \
     $(if $(and $(NCCL_H),$(if $(NO_MULTI_GPU),,1)),$(BUILD)/flce_vp_bench)

# a CUDA program's timeline at its own clocks (CUPTI, loaded with LD_PRELOAD): scripts/ktrace_report.py.
# CUPTI sits beside the toolkit's headers and libraries (CUDA 13) or in extras/CUPTI (11, 12);
# without it the library is not built and make test skips its checks
$(BUILD)/libktrace.so: dev/ktrace.c | $(BUILD)
	@[ -n "$(CUPTI_INC)" ] && [ -n "$(CUPTI_LIB)" ] || { echo "no CUPTI (cupti.h, libcupti.so) in $(CUDA_ROOT)"; exit 1; }
	$(CC) $(CFLAGS) -fPIC -shared -I$(CUPTI_INC) -o $@ $< -L$(CUPTI_LIB) -Xlinker -rpath=$(CUPTI_LIB) -lcupti -lpthread

# vocab-parallel flce on the GPUs of one host (NCCL), against one GPU; built where nccl.h is found
$(BUILD)/flce_vp_bench: dev/flce_vp_bench.cu $(wildcard dev/*.cuh) $(FLCE_HEADERS) $(BUILD)/libflce.a
	$(NVCC) $(NVCC_FLAGS) -o $@ $< $(BUILD)/libflce.a $(NVCC_LIBS) -lnccl -lpthread

# the planner's choices on any machine (no GPU): the planner's object alone
$(BUILD)/flce_plans: dev/flce_plans.c dev/shapes.h $(BUILD)/flce_plan.o flce/flce.h flce/flce_internal.h | $(BUILD)
	$(CC) $(CFLAGS) -o $@ dev/flce_plans.c $(BUILD)/flce_plan.o -lm

$(BUILD)/flce_bench: dev/flce_bench.cu dev/shapes.h $(wildcard dev/*.cuh) $(FLCE_HEADERS) $(BUILD)/libflce.a
	$(NVCC) $(NVCC_FLAGS) -o $@ dev/flce_bench.cu $(BUILD)/libflce.a $(NVCC_LIBS)

$(BUILD)/gemm_algos: dev/gemm_algos.cu $(wildcard dev/*.cuh) $(FLCE_HEADERS) $(BUILD)/libflce.a
	$(NVCC) $(NVCC_FLAGS) -o $@ dev/gemm_algos.cu $(BUILD)/libflce.a $(NVCC_LIBS)

$(BUILD)/gemm_sm90: dev/gemm_sm90.cu dev/common.cuh flce/flce.h test/test_util.h $(COMMON_HEADERS) | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) -o $@ dev/gemm_sm90.cu $(NVCC_LIBS)

# the trainer's linear layers on cuBLASLt and on our Hopper GEMM
$(BUILD)/matmul_bench: dev/matmul_bench.cu dev/common.cuh $(LLMC_CUDA_HEADERS) llmc/bf16.h $(FLCE_HEADERS) $(BUILD)/libflce.a
	$(NVCC) $(NVCC_FLAGS) -o $@ dev/matmul_bench.cu $(BUILD)/libflce.a $(NVCC_LIBS)

$(BUILD)/attention_bench: dev/attention_bench.cu dev/common.cuh flce/flce.h test/test_util.h $(LLMC_CUDA_HEADERS) llmc/bf16.h \
                          llmc/rand.h | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) -o $@ dev/attention_bench.cu $(NVCC_LIBS)

# --- tests ------------------------------------------------------------------------------
$(BUILD)/test_cpu.o: test/test_cpu.c $(TEST_HEADERS) flce/flce.h flce/flce_internal.h | $(BUILD)
	$(CC) $(CFLAGS) -pthread -DFLCE_HAVE_LIB -c $< -o $@

# (the vocabulary-parallel checks run their ranks as threads: test/vp_comm.h)
$(BUILD)/test_cpu: $(BUILD)/test_cpu.o $(BUILD)/flce_ref.o $(BUILD)/libflce.a
	$(NVCC) $(NVCC_ARCH) -o $@ $^ $(NVCC_LIBS) -lpthread

# the attention kernels' GPU test alone (test_train_gpu runs it too)
$(BUILD)/test_attention_gpu: test/test_attention_gpu.cu test/gpu_kernels_attention.cuh test/test_util.h \
                             $(LLMC_CUDA_HEADERS) | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) -o $@ test/test_attention_gpu.cu $(NVCC_LIBS)

# vocab parallel on every GPU of the host through NCCL where the build finds it (the trainer's test of nccl.h)
TEST_GPU_NCCL := $(if $(and $(NCCL_H),$(if $(NO_MULTI_GPU),,1)),-DFLCE_TEST_NCCL -lnccl)
$(BUILD)/test_gpu: test/test_gpu.cu $(TEST_HEADERS) $(COMMON_HEADERS) $(BUILD)/flce_ref.o $(BUILD)/libflce.a
	$(NVCC) $(NVCC_FLAGS) -o $@ test/test_gpu.cu $(BUILD)/flce_ref.o $(BUILD)/libflce.a $(NVCC_LIBS) -lpthread \
	    $(TEST_GPU_NCCL)

$(BUILD)/test_bpe: test/test_bpe.c data/bpe.h data/bpe_unicode.h llmc/utils.h llmc/shard.h llmc/tokenizer.h test/test_util.h | $(BUILD)
	$(CC) $(CFLAGS) -Idata -o $@ $< -lm

# Hugging Face tokenizer.json (data/hf_tokenizer.h) against tokenizers' ids in test/fixtures/hf_tokenizers;
# it also runs build/bpe_encode -t
HF_TOKENIZER_HEADERS := data/hf_tokenizer.h data/bpe.h data/bpe_unicode.h data/unicode_nfc.h llmc/utils.h
$(BUILD)/test_hf_tokenizer: test/test_hf_tokenizer.c $(HF_TOKENIZER_HEADERS) llmc/shard.h llmc/tokenizer.h \
                            llmc/tokenizer_json.h test/test_util.h | $(BUILD)
	$(CC) $(CFLAGS) $(CJSON_CFLAGS) -o $@ $< $(CJSON_LIBS) -lm

$(BUILD)/test_gpt2_cpu: test/test_gpt2_cpu.c test/gpt2_ref.c test/gpt2_ref.h $(BUILD)/flce_ref.o test/test_util.h | $(BUILD)
	$(CC) $(CFLAGS) -o $@ test/test_gpt2_cpu.c test/gpt2_ref.c $(BUILD)/flce_ref.o -lm

# the Llama / Qwen2.5 family: llmc/llama.h and its CPU reference (test/llama_ref.c)
$(BUILD)/test_llama_cpu: test/test_llama_cpu.c test/llama_ref.c test/llama_ref.h $(LLMC_HEADERS) test/test_util.h test/test_files.h | $(BUILD)
	$(CC) $(CFLAGS) $(CJSON_CFLAGS) -o $@ test/test_llama_cpu.c test/llama_ref.c -lm $(CJSON_LIBS)

# Hugging Face checkpoints: llmc/safetensors.h, llmc/hf_config.h, llmc/hf_model.h, and the tool
# that reads a model directory into our table and writes it back (test/hf_roundtrip.c)
$(BUILD)/test_hf: test/test_hf.c $(LLMC_HEADERS) test/test_util.h test/test_files.h | $(BUILD)
	$(CC) $(CFLAGS) $(CJSON_CFLAGS) -o $@ $< -lm $(CJSON_LIBS)

$(BUILD)/hf_roundtrip: test/hf_roundtrip.c $(LLMC_HEADERS) | $(BUILD)
	$(CC) $(CFLAGS) $(CJSON_CFLAGS) -o $@ $< -lm $(CJSON_LIBS)

$(BUILD)/test_llmc: test/test_llmc.c $(LLMC_HEADERS) test/test_util.h test/test_files.h | $(BUILD)
	$(CC) $(CFLAGS) -o $@ $< -lm

# the trainer's host logic; it also runs ./train_gpt with bad flags (no GPU needed)
$(BUILD)/test_train_host: test/test_train_host.c $(LLMC_HEADERS) test/test_util.h test/test_files.h | $(BUILD)
	$(CC) $(CFLAGS) $(CJSON_CFLAGS) -o $@ $< -lm $(CJSON_LIBS)

# the last line of a test run sums the suites' "N passed, M failed" lines; a suite that dies
# before its own summary line counts as a failure. $(1): how many suites, $(2): their log
sum_suites = awk '/^[0-9]+ passed, [0-9]+ failed$$/ {p += $$1; f += $$3; n++} \
                  END {if (n != $(1)) f++; print p " passed, " f " failed"; exit (f > 0 || p == 0)}' $(2)

# every CPU suite
CPU_SUITES := $(BUILD)/test_cpu test/fixtures; $(BUILD)/test_bpe; $(BUILD)/test_hf_tokenizer; $(BUILD)/test_gpt2_cpu test/fixtures; \
              $(BUILD)/test_llama_cpu; $(BUILD)/test_llmc; $(BUILD)/test_train_host ./train_gpt; \
              FLCE_LIBRARY=$(BUILD)/libflce.so python3 flce/python/tests/test_cpu.py; \
              $(BUILD)/test_hf; python3 test/test_hf_reference.py $(BUILD)/hf_roundtrip; python3 test/test_plot_log.py; \
              python3 test/test_bench_peers.py; python3 test/test_ktrace_report.py $(KTRACE); \
              python3 test/test_flce_plans.py $(BUILD)/flce_plans
N_CPU_SUITES := 14
test: $(BUILD)/test_cpu $(BUILD)/test_bpe $(BUILD)/test_hf_tokenizer $(BUILD)/bpe_encode $(BUILD)/test_gpt2_cpu $(BUILD)/test_llama_cpu \
      $(BUILD)/test_llmc $(BUILD)/test_train_host train_gpt $(BUILD)/libflce.so $(BUILD)/test_hf $(BUILD)/hf_roundtrip \
      $(BUILD)/flce_plans $(KTRACE)
	@{ $(CPU_SUITES); } 2>&1 | tee $(BUILD)/test.log; $(call sum_suites,$(N_CPU_SUITES),$(BUILD)/test.log)

# --- on a GPU machine ----------------------------------------------------------------------
# Each target runs what it needs, building it first where it is missing or out of date
# (NO_BUILD=1: never, for binaries built elsewhere and carried with a copy of the sources that
# looks newer), logs into $(OUT) when set, else gpu_logs/, and ends with "N passed, M failed".
GPU_LOGS := $(or $(OUT),gpu_logs)
gpu_needs = $(if $(NO_BUILD),,$(1))
.PHONY: test-multigpu bench bench-train bench-peers

# the library's suite, the trainer's, and the Python binding's (pytest; its summary counted as
# a suite's "N passed, M failed"). The Llama / Qwen family's reference comes from transformers,
# run there (python3 with torch and transformers): scripts/export_llama_fixture.py writes it into
# LLAMA_FIXTURE_DIR first. NCCL's NVLink multicast stays off (the library's vocab-parallel checks
# run NCCL over every GPU of the host), as in scripts/gpu_common.sh
LLAMA_FIXTURE_DIR ?= $(BUILD)/llama_fixtures
pytest_suite = awk '{print} / in [0-9.]+m?s/ {n = 1; p = f = 0; for (i = 2; i <= NF; i++) \
                    {if ($$i ~ /^passed/) p = $$(i - 1); if ($$i ~ /^(failed|errors?)/) f += $$(i - 1)}} \
                    END {if (n) print p + 0 " passed, " f + 0 " failed"}'
test-gpu: $(call gpu_needs,$(BUILD)/test_gpu $(BUILD)/test_train_gpu $(BUILD)/libflce.so)
	@mkdir -p $(GPU_LOGS); export NCCL_NVLS_ENABLE=0; \
	 { $(BUILD)/test_gpu test/fixtures; python3 scripts/export_llama_fixture.py $(LLAMA_FIXTURE_DIR); \
	   LLAMA_FIXTURE_DIR=$(LLAMA_FIXTURE_DIR) $(BUILD)/test_train_gpu; \
	   FLCE_LIBRARY=$(BUILD)/libflce.so python3 -m pytest -q -p no:cacheprovider flce/python/tests/test_gpu.py | \
	   $(pytest_suite); } 2>&1 | tee $(GPU_LOGS)/test_gpu.log; \
	 grep -E '^FAIL' $(GPU_LOGS)/test_gpu.log | head -40; $(call sum_suites,3,$(GPU_LOGS)/test_gpu.log)

# the trainer on several GPUs: mpirun on MG_NP (default 2) ranks, -pi fs|tcp pairs, a build
# without MPI, failures, ZeRO-1, the overlap, -tp 1 (scripts/test_multigpu.sh CHECK... runs some)
test-multigpu: $(call gpu_needs,train_gpt $(BUILD)/train_gpt_nompi)
	@OUT=$(GPU_LOGS) bash scripts/test_multigpu.sh

# dev/flce_bench (-c, then every version at the four shapes), gemm_sm90, attention_bench and
# matmul_bench (scripts/bench.sh)
bench: $(call gpu_needs,$(BUILD)/flce_bench $(BUILD)/gemm_sm90 $(BUILD)/attention_bench $(BUILD)/matmul_bench)
	@OUT=$(GPU_LOGS) bash scripts/bench.sh

# the trainer at GPT-2 124M's B = 4, 64, 256, a large vocabulary, the published Llama 3.2 and
# Qwen2.5 shapes, flce's flags, and a step profile (scripts/train_runs.sh RUN... runs others)
bench-train: $(call gpu_needs,train_gpt)
	@OUT=$(GPU_LOGS) bash scripts/train_runs.sh

# flce through its binding against the Python peers, from the wheels carried in .whl/
# (scripts/bench_peers.sh; scripts/bench_peers.py's header says which and how)
bench-peers: $(call gpu_needs,$(BUILD)/libflce.so $(BUILD)/flce_bench)
	@OUT=$(GPU_LOGS) bash scripts/bench_peers.sh

# --- data: Tiny Shakespeare through the C GPT-2 BPE encoder (or, -t, a tokenizer.json) --
$(BUILD)/bpe_encode: data/bpe_encode.c $(HF_TOKENIZER_HEADERS) llmc/shard.h llmc/tokenizer.h | $(BUILD)
	$(CC) -O2 -std=c11 -Wall -Wextra -Werror $(CJSON_CFLAGS) -o $@ $< $(CJSON_LIBS) -lm

data: $(BUILD)/bpe_encode
	$(BUILD)/bpe_encode -i data/tinyshakespeare.txt -e data/gpt2/encoder.json -m data/gpt2/vocab.bpe -o data

clean:
	rm -rf $(BUILD) train_gpt

# --- fuzzing ------------------------------------------------------------------------------
# make fuzz [FUZZ_SECONDS=60]: one libFuzzer target per reader of outside input (test/fuzz/,
# test/fuzz/README.md), each run FUZZ_SECONDS seconds after replaying its regression inputs;
# "N passed, M failed" at the end, non-zero on any finding. Without clang's libFuzzer the same
# targets run under test/fuzz/driver.c's mutation loop (gcc, ASan + UBSan).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := gpt2 llama checkpoint shard tokenizer bpe train_config safetensors hf_config hf_tokenizer \
                hf_tokenizer_encode
FUZZ_ENGINE ?= $(shell echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; return (int)(n & 0); }' | \
                 clang -fsanitize=fuzzer -x c - -o /dev/null >/dev/null 2>&1 && echo libfuzzer || echo builtin)
FUZZ_BUILD := $(BUILD)/fuzz
FUZZ_FLAGS := -g -O1 -std=c11 -D_DEFAULT_SOURCE -Wall -Wextra -Werror -Iflce -Itest -Idata $(CJSON_CFLAGS) -fno-sanitize-recover=all
comma := ,
FUZZ_CC_LIBFUZZER = clang $(FUZZ_FLAGS) -fsanitize=fuzzer$(comma)address$(comma)undefined
FUZZ_CC_BUILTIN = $(CC) $(FUZZ_FLAGS) -fsanitize=address$(comma)undefined test/fuzz/driver.c
FUZZ_BINS := $(addprefix $(FUZZ_BUILD)/fuzz_,$(FUZZ_TARGETS))

$(FUZZ_BUILD)/fuzz_%: test/fuzz/fuzz_%.c test/fuzz/fuzz_common.h test/fuzz/driver.c $(LLMC_HEADERS) $(HF_TOKENIZER_HEADERS) \
                      llmc/tokenizer_json.h
	@mkdir -p $(FUZZ_BUILD)
	$(if $(filter libfuzzer,$(FUZZ_ENGINE)),$(FUZZ_CC_LIBFUZZER),$(FUZZ_CC_BUILTIN)) -o $@ $< -lm $(CJSON_LIBS)

.PHONY: fuzz fuzz-build fuzz-merge
fuzz-build: $(FUZZ_BINS)
fuzz: $(FUZZ_BINS)
	@echo "fuzzing with $(FUZZ_ENGINE), $(FUZZ_SECONDS) s per target"
	@test/fuzz/run.sh $(FUZZ_ENGINE) $(FUZZ_SECONDS) $(FUZZ_BUILD) $(FUZZ_TARGETS)

# make fuzz-merge (libFuzzer): the inputs of the last make fuzz that add coverage, copied into
# test/fuzz/corpus/<target>/ (to commit: every later run starts from them)
fuzz-merge: $(FUZZ_BINS)
	@test $(FUZZ_ENGINE) = libfuzzer || { echo "fuzz-merge needs clang's libFuzzer"; exit 1; }
	@test/fuzz/run.sh merge $(FUZZ_BUILD) $(FUZZ_TARGETS)
