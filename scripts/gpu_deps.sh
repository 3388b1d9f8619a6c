#!/usr/bin/env bash
# Unpacks the C libraries a GPU machine without apt needs into .deps/ (ignored by git), to be
# carried there: Debian's libcjson1 and libcjson-dev (cJSON, for the Hugging Face readers).
# scripts/gpu_common.sh and the Makefile find them through CJSON_DIR=.deps/cjson; a binary built
# elsewhere runs with LD_LIBRARY_PATH=.deps/cjson/usr/lib/x86_64-linux-gnu.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps/debs .deps/cjson
(cd .deps/debs && apt-get download libcjson1 libcjson-dev)
for d in .deps/debs/libcjson*.deb; do dpkg -x "$d" .deps/cjson; done
ls .deps/cjson/usr/lib/x86_64-linux-gnu/
