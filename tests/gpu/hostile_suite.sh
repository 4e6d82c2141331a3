#!/usr/bin/env bash
# Issue 18 on a GPU machine, one command (< 2 minutes):
#   1. "verified" means verified on the GPU too: a Hopper kernel built from TL whose key loop stops
#      after two key tiles (build_kernels.sh neg_sm90_truncated_loop, past the TL check that now
#      refuses it) must fail `python -m qattn.verify`; a correct kernel in the same run must pass.
#   2. an LLM stage-2 reply whose host code writes a file and calls system() at load time runs in
#      the sandbox and writes nothing outside it (llm_nvcc_test Hostile*).
#   3. the TL check refuses the truncated loop in `generate` (llm_replay_test *Truncated*).
# Usage: tests/gpu/hostile_suite.sh BIN_DIR OUT_DIR
#   BIN_DIR: qattn, llm_nvcc_test, llm_replay_test (built on the CPU machine) and kernels/ with
#   neg_sm90_truncated_loop.so and a control kernel (tests/gpu/build_kernels.sh --only ...).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BIN="$(cd "$1" && pwd)"; OUT="$2"; mkdir -p "$OUT"
status=0
export LD_LIBRARY_PATH="$BIN/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"  # libraries the test binaries need beyond the machine's
echo "== 1. GPU numerics of the truncated-loop kernel (must FAIL) and a control (must pass) =="
PYTHONPATH="$ROOT/python" python3 -m qattn.verify "$BIN/kernels" 2>&1 | tee "$OUT/verify.txt" | tail -25
[ "${PIPESTATUS[0]}" = 0 ] || status=1
echo "== 2. hostile LLM host code in the sandbox =="
rm -f /tmp/qattn-hostile-*.txt
mkdir -p /tmp/cut/cute && touch /tmp/cut/cute/tensor.hpp
QATTN_HOME="$ROOT" QATTN_CUTLASS_INCLUDE=/tmp/cut PYTHON=python3 QATTN_CACHE_DIR=/tmp/qc \
  "$BIN/llm_nvcc_test" --gtest_filter='LlmNvcc.Cuda*:LlmNvcc.Hostile*' 2>&1 | tee "$OUT/sandbox.txt" | tail -25 || status=1
echo "files outside the sandbox:"; ls -la /tmp/qattn-hostile-*.txt 2>&1 | tee -a "$OUT/sandbox.txt"
ls /tmp/qattn-hostile-*.txt >/dev/null 2>&1 && status=1
echo "== 3. generate refuses the truncated loop =="
# the replay tests run the qattn binary at the path it was built at
QB="$(strings "$BIN/llm_replay_test" | grep -m1 -E '^/.*/build/qattn$' || true)"
if [ -n "$QB" ]; then mkdir -p "$(dirname "$QB")" && ln -sf "$BIN/qattn" "$QB"; fi
QATTN_HOME="$ROOT" "$BIN/llm_replay_test" --gtest_filter='*Truncated*' 2>&1 | tee "$OUT/truncated.txt" | tail -8 || status=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/device.txt"
echo "hostile suite: status $status"
exit $status
