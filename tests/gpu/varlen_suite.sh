#!/usr/bin/env bash
# Packed ragged batches on a GPU (docs/tl.md, "Ragged batches"; docs/python.md): `qattn generate
# --varlen true` through the GPU step (qattn.verify's ragged check: NaN rows past the last sequence,
# per-sequence fp64 references, outputs past the sequences untouched) for the sm90 kernel (causal and
# sliding window) and the sm80 one (run on the local Hopper GPU), ragged queries over a paged KV cache
# (both), the pytest files (qattn.attention_varlen
# and flash_attn_varlen_func against fp64 per sequence, the padded batch, CUDA graph replay), then the
# prefill benchmark (bench/bench_varlen.py: varlen vs the padded batch, the document-mask path and
# cuDNN). Set VARLEN_BENCH_ONLY=1 to skip the tests, VARLEN_TESTS_ONLY=1 to skip the benchmark.
#   QATTN_BIN=... bash tests/gpu/varlen_suite.sh OUT_DIR
set -u
R=${1:?usage: varlen_suite.sh OUT_DIR}
mkdir -p "$R"
. "$(dirname "$0")/pytest_env.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$R/device.txt"
status=0
if [ "${VARLEN_BENCH_ONLY:-0}" != 1 ]; then
  for args in "--preset llama3-8b --lse true" "--preset mistral-7b" "--preset llama2-7b --mask none --dtype fp16" \
      "--preset llama3-8b --gpu a100 --lse true" "--preset llama3-8b --kv-cache paged --seqlen 777/3000 --lse true" \
      "--preset llama3-8b --gpu a100 --kv-cache paged --seqlen 777/3000"; do
    echo "== qattn generate $args --varlen true" >> "$R/generate.txt"
    # shellcheck disable=SC2086
    "$QATTN_BIN" generate $args --varlen true --out /tmp/vl-gen > /tmp/vl-gen.log 2>&1 || status=1
    tail -6 /tmp/vl-gen.log >> "$R/generate.txt"
  done
  python3 -m pytest -q tests/python/test_varlen.py tests/python/test_flash_attn_interface.py -rs > "$R/pytest.txt" 2>&1 || status=1
  tail -3 "$R/pytest.txt"
fi
if [ "${VARLEN_TESTS_ONLY:-0}" != 1 ]; then
  python3 bench/bench_varlen.py "$R/results.csv" ${VARLEN_BENCH_ARGS:-} > "$R/bench.txt" 2>&1 || status=1
  tail -8 "$R/bench.txt"
fi
exit $status
