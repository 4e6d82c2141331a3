#!/usr/bin/env bash
# Issue 22 on a machine with several GPUs: context parallelism (qattn.distributed) over NCCL.
#   bash tests/gpu/cp_suite.sh OUT_DIR PY_BIN_DIR [--bench SEQLENS | --bench-only SEQLENS | --train SEQLENS]
# PY_BIN_DIR: a `qattn` binary and its libraries (as scripts/build.sh makes them).
# 1. tests/python/test_distributed.py: the ring's plan on numpy and the torch.distributed code on
#    the CPU over gloo (world sizes 1-3);
# 2. tests/gpu/cp_check.py under torchrun for world sizes 1, 2 and every GPU: sharded results
#    against single-GPU qattn and an fp32 reference (numerics.csv), and a planted bug (a K/V shard
#    skipped) that every ring case must catch;
# 3. with --bench SEQLENS (or --bench-only SEQLENS: without 1 and 2): bench/bench_cp.py for world
#    sizes 2 and every GPU (results.csv; per-GPU lengths up to 256k).
# --train SEQLENS (alone): tests/gpu/cp_train_check.py (its kernels built first, one process per case)
#    under torchrun for every GPU and 2 (the ring's
#    and Ulysses' gradients against single-GPU qattn and fp32 autograd, cp_train_w*.txt), then
#    bench/bench_cp.py --passes fwd+bwd for every GPU and 2 (results.csv, bench_train.txt).
# Every torchrun's whole output stays in OUT (*.log, cp_*.txt): a failing rank's traceback is kept.
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0: the device notes say why).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="$1"; PYBIN="$(cd "$2" && pwd)"; shift 2
BENCH=""; CHECKS=1; TRAIN=""
if [ "${1:-}" = "--bench" ]; then BENCH="$2"; fi
if [ "${1:-}" = "--bench-only" ]; then BENCH="$2"; CHECKS=0; fi
if [ "${1:-}" = "--train" ]; then TRAIN="$2"; CHECKS=0; fi
# shellcheck source=tests/gpu/cp_env.sh
source "$ROOT/tests/gpu/cp_env.sh"
nvidia-smi topo -m > "$OUT/topology.txt" 2>&1 || true
rc=0
if [ "$CHECKS" = 1 ]; then
(cd "$ROOT/tests/python" && timeout 200 python3 -m pytest test_distributed.py -q -p no:cacheprovider -rs) 2>&1 \
  | tail -4 | tee "$OUT/pytest_distributed.txt"
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
timeout 300 python3 "$ROOT/tests/gpu/cp_check.py" --warm 2>&1 | tail -5 | tee "$OUT/warm.txt"
for n in $(printf '%s\n' 1 2 "$NGPU" | sort -un); do
  [ "$n" -le "$NGPU" ] || continue
  timeout 300 torchrun --nproc-per-node "$n" "$ROOT/tests/gpu/cp_check.py" --csv "$OUT/numerics.csv" \
    > "$OUT/cp_check_w$n.txt" 2>&1 || rc=1
  grep -E "^\[rank|cp_check|Error|error" "$OUT/cp_check_w$n.txt" | tail -20
done
timeout 300 torchrun --nproc-per-node 2 "$ROOT/tests/gpu/cp_check.py" --plant > "$OUT/cp_check_planted.txt" 2>&1 || rc=1
grep -E "planted|Error" "$OUT/cp_check_planted.txt" | tail -3
else
timeout 300 python3 "$ROOT/tests/gpu/cp_check.py" --warm 2>&1 | tail -5 | tee "$OUT/warm.txt"
fi
if [ -n "$TRAIN" ]; then
  # every case's kernels first, one process per case over the GPUs (the ranks then find them cached)
  ncases=$(python3 -c "import sys; sys.path.insert(0, '$ROOT/tests/gpu'); import cp_train_check as c; print(len(c.CASES))" 2>/dev/null || echo 0)
  for i in $(seq 0 $((ncases - 1))); do
    CUDA_VISIBLE_DEVICES=$((i % NGPU)) timeout 300 python3 "$ROOT/tests/gpu/cp_train_check.py" --warm "$i" > "$OUT/cp_train_warm_$i.log" 2>&1 &
  done
  wait
  for n in $(printf '%s\n' "$NGPU" 2 | sort -run); do
    timeout 300 torchrun --nproc-per-node "$n" "$ROOT/tests/gpu/cp_train_check.py" > "$OUT/cp_train_w$n.txt" 2>&1 || rc=1
    grep -E "cp_train_check|FAIL|Error" "$OUT/cp_train_w$n.txt" | tail -5
  done
  for n in $(printf '%s\n' "$NGPU" 2 | sort -run); do
    # shellcheck disable=SC2086
    timeout 400 torchrun --nproc-per-node "$n" "$ROOT/bench/bench_cp.py" "$OUT/results.csv" --seqlens "$TRAIN" \
      --passes fwd+bwd ${CP_BENCH_ARGS:-} > "$OUT/bench_train_w$n.log" 2>&1 || rc=1
    grep -E "ratio|Error|error:" "$OUT/bench_train_w$n.log" | tail -30 | tee -a "$OUT/bench_train.txt"
  done
fi
if [ -n "$BENCH" ]; then
  for n in $(printf '%s\n' 2 "$NGPU" | sort -un); do
    # shellcheck disable=SC2086
    timeout 500 torchrun --nproc-per-node "$n" "$ROOT/bench/bench_cp.py" "$OUT/results.csv" --seqlens "$BENCH" ${CP_BENCH_ARGS:-} \
      > "$OUT/bench_w$n.log" 2>&1 || rc=1
    grep -E "ratio|Error|error:" "$OUT/bench_w$n.log" | tail -30 | tee -a "$OUT/bench.txt"
  done
fi
echo "cp_suite: status $rc"
exit $rc
