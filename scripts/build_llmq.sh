#!/usr/bin/env bash
# Builds llm.q's `train` (IST-DASLab/llmq) for Hopper (sm_90a) without network access during the
# build, for scripts/bench_llmq.sh: the binary and its library go to $LLMQ_DIR (default
# .peers/llmq, ignored by git), to be carried to the GPU machine. Run where nvcc 13 and cmake >=
# 3.28 are (llm.q asks CUDA 20 in CMake; `pip install cmake ninja` gives both).
#
#   scripts/build_llmq.sh LLMQ_SRC DEPS
#     LLMQ_SRC  a checkout of github.com/IST-DASLab/llmq (measured: b77d969)
#     DEPS      a folder with the sources llm.q's CMake would download: json (nlohmann/json),
#               cudnn-frontend, cli11, fmt, catch2 (the tags its CMakeLists.txt names)
#   CUDNN_INCLUDE_DIR, CUDNN_LIBRARY, NCCL_INCLUDE_DIR, NCCL_LIB_DIR: where cuDNN 9 and NCCL 2
#   are (default: the CUDA toolkit's folders); at run time bench_llmq.sh takes torch's copies.
set -euo pipefail
[ $# -eq 2 ] || { sed -n '2,12p' "$0"; exit 2; }
SRC=$(cd "$1" && pwd); DEPS=$(cd "$2" && pwd)
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEST=${LLMQ_DIR:-$REPO/.peers/llmq}
BUILD=${LLMQ_BUILD:-$REPO/build/llmq}
CUDA=${CUDA_HOME:-/usr/local/cuda}
for d in json cudnn-frontend cli11 fmt catch2; do
    [ -d "$DEPS/$d" ] || { echo "build_llmq.sh: $DEPS/$d is missing (llm.q's CMake needs it)"; exit 1; }
done
GEN=(); command -v ninja > /dev/null && GEN=(-G Ninja)
cmake "${GEN[@]}" -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DUSE_MPI=OFF -DUSE_CUFILE=OFF -DUSE_NVML=OFF -DBUILD_TESTS=OFF \
    -DFETCHCONTENT_FULLY_DISCONNECTED=ON \
    -DFETCHCONTENT_SOURCE_DIR_JSON="$DEPS/json" -DFETCHCONTENT_SOURCE_DIR_CUDNN-FE="$DEPS/cudnn-frontend" \
    -DFETCHCONTENT_SOURCE_DIR_CLI11="$DEPS/cli11" -DFETCHCONTENT_SOURCE_DIR_FMT="$DEPS/fmt" \
    -DFETCHCONTENT_SOURCE_DIR_CATCH2="$DEPS/catch2" \
    -DCUDNN_INCLUDE_DIR="${CUDNN_INCLUDE_DIR:-$CUDA/include}" -DCUDNN_LIBRARY="${CUDNN_LIBRARY:-$CUDA/lib64/libcudnn.so}" \
    -DNCCL_INCLUDE_DIR="${NCCL_INCLUDE_DIR:-$CUDA/include}" -DNCCL_LIB_DIR="${NCCL_LIB_DIR:-$CUDA/lib64}" \
    -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON -DCMAKE_INSTALL_RPATH='$ORIGIN/../lib'
cmake --build "$BUILD" --target train -j"${JOBS:-$(nproc)}"
mkdir -p "$DEST/bin" "$DEST/lib"   # train finds its library by its run path, $ORIGIN/../lib
cp "$BUILD/train" "$DEST/bin/train"
cp "$BUILD/libllmq-common.so" "$DEST/lib/"
strip --strip-unneeded "$DEST/bin/train" "$DEST/lib/libllmq-common.so"
echo "IST-DASLab/llmq $(git -C "$SRC" rev-parse HEAD 2>/dev/null || echo '(not a git checkout)'), built for sm_90a" \
    > "$DEST/COMMIT"
echo "build_llmq.sh: $DEST/bin/train ($(du -sh "$DEST" | cut -f1) with its library)"
