#!/usr/bin/env bash
# The committed flce fixtures (test/fixtures) against a fresh export: scripts/export_fixtures.py
# (PyTorch, fp64 on the CPU) into /tmp/fixtures_again, compared by scripts/compare_fixtures.py
# (inputs bitwise, PyTorch's outputs within a tolerance). Needs torch (the GPU machine has it).
#   scripts/dev/fixtures_check.sh
source "$(dirname "$0")/../gpu_common.sh"
step fixtures bash -c 'python3 scripts/export_fixtures.py /tmp/fixtures_again && python3 scripts/compare_fixtures.py test/fixtures /tmp/fixtures_again'
finish fixtures-check
