#!/usr/bin/env bash
# Fifth call: the package-level training tests on the GPU at this tree (tests/python/test_gpu_training.py:
# gradients against fp32 autograd on both layouts, GQA / MQA / MLA / d256 / windows, a gradient with
# zero strides, the deterministic backward, torch.compile, opcheck, score variants, documents).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
timeout 540 python3 -m pytest -q -x -p no:cacheprovider tests/python/test_gpu_training.py > "$OUT/pytest_training.txt" 2>&1
echo "pytest exit $?" >> "$OUT/pytest_training.txt"; tail -15 "$OUT/pytest_training.txt"
