#!/usr/bin/env bash
# Call 4: `qattn generate` for absorbed-MLA specs through the GPU step (qattn.verify's KV-cache check with
# v = k, python/qattn/_kvcache_check.py), and the roles 40 / 232 (out/var: the planner writing them for
# split columns) against the planner's 48 / 224 in one process.
#   bash bench/results/2026-11-30-h200-mla-decode/run4.sh   (out/carry, out/gpu-py, out/var carried)
set -u
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/device.txt"
MLA="--preset deepseek-v3-mla-prefill --heads 128/1 --head-dim 576/512 --v-from-k true"
for args in "--kv-cache paged --seqlen 1/4096 --mask none" "--kv-cache lengths --seqlen 2/4096" "--kv-cache paged --seqlen 1/8192 --mask none --split-keys true"; do
  echo "== qattn generate $MLA $args" >> "$OUT/generate.txt"
  # shellcheck disable=SC2086
  timeout 150 "$QATTN_BIN" generate $MLA $args --out /tmp/mla-gen > /tmp/mla-gen.log 2>&1; echo "rc $?" >> "$OUT/generate.txt"
  tail -6 /tmp/mla-gen.log >> "$OUT/generate.txt"
done
cat "$OUT/generate.txt"
timeout 300 python3 bench/bench_mla_decode.py "$OUT/results.csv" --rounds 9 --also var=device:out/var/qattn > "$OUT/bench.txt" 2>&1; echo "bench rc $?" >> "$OUT/status.txt"
grep -v Warning "$OUT/bench.txt" | grep -v "return F.scaled" | grep -v "not run" | grep -v "torch\|efficient" | tail -30
cat "$OUT/status.txt"
