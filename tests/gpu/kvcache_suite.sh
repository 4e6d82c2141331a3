#!/usr/bin/env bash
# KV caches on a GPU (docs/tl.md, "KV caches"; docs/python.md): `qattn generate --kv-cache paged`
# through the GPU step (qattn.verify's KV check) for the sm90 decoding and causal kernels and the sm80
# ones (run on the local Hopper GPU), the pytest files of the KV
# cache (qattn.attention_with_kvcache against fp64 per sequence, NaN-poisoned pools, page sizes
# 0/16/64/256, splits, CUDA graphs) and of flash_attn_interface (paged caches included), then the
# decoding benchmark (bench/bench_kvcache.py: contiguous and paged caches vs qattn.attention, cuDNN and
# the copy bandwidth). Set KVCACHE_BENCH_ONLY=1 to skip the tests.
#   QATTN_BIN=... bash tests/gpu/kvcache_suite.sh OUT_DIR
set -u
R=${1:?usage: kvcache_suite.sh OUT_DIR}
mkdir -p "$R"
. "$(dirname "$0")/pytest_env.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$R/device.txt"
status=0
if [ "${KVCACHE_BENCH_ONLY:-0}" != 1 ]; then
  for args in "--preset llama3-8b --mask none --batch 8 --seqlen 1/4096" "--preset llama3-8b --batch 2 --seqlen 777/3000" \
      "--preset llama3-8b --gpu a100 --batch 2 --seqlen 777/3000" "--preset llama3-8b --gpu a100 --kv-cache lengths --seqlen 1/2048" \
      "--preset deepseek-v3-mla-prefill --heads 128/1 --head-dim 576/512 --v-from-k true --mask none --seqlen 1/4096"; do
    echo "== qattn generate $args" >> "$R/generate.txt"
    case "$args" in *--kv-cache*) kv= ;; *) kv="--kv-cache paged" ;; esac
    # shellcheck disable=SC2086
    "$QATTN_BIN" generate $args $kv --out /tmp/kv-gen > /tmp/kv-gen.log 2>&1 || status=1
    tail -4 /tmp/kv-gen.log >> "$R/generate.txt"
  done
  python3 -m pytest -q tests/python/test_kvcache.py tests/python/test_flash_attn_interface.py -rs > "$R/pytest.txt" 2>&1 || status=1
  tail -3 "$R/pytest.txt"
fi
python3 bench/bench_kvcache.py "$R/results.csv" ${KVCACHE_BENCH_ARGS:-} > "$R/bench.txt" 2>&1 || status=1
tail -12 "$R/bench.txt"
exit $status
