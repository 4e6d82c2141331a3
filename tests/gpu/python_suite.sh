#!/usr/bin/env bash
# Everything issue 6 asks of a GPU, in one command (for a lent H100/H200 without network):
#   1. pip-install the Python package from python/ (offline: --no-deps --no-build-isolation)
#   2. build the kernels of the pytest suite and of the benchmark, in parallel (nvcc on every core)
#   3. the binding's pytest suite (tests/python: CPU tests + GPU numerics), -rs
#   4. spec -> verified kernel wall time per preset, then the one-process benchmark
#      (bench/bench_attention.py: qattn vs cuDNN, FA2, SDPA efficient, FlexAttention, FA3/4 if present)
# Writes OUT_DIR/{build.log,pytest.log,bench.log,results.csv,e2e.csv,meta.json}; then, on a machine
# with matplotlib, `python3 bench/plot.py DIR` makes the PNG plots and results.md.
# Usage: tests/gpu/python_suite.sh OUT_DIR [--quick|--full]
#   QATTN_BIN      the qattn executable (default build/qattn); QATTN_HOME the repository (default: here)
#   QATTN_CUTLASS_INCLUDE  CUTLASS headers if not findable otherwise (e.g. $PWD/.cutlass/include)
#   QATTN_SUITE_E2E        presets for step 4 (default llama3-8b,deepseek-v3-mla-prefill)
#   QATTN_SUITE_BUDGET_S   wall-time budget of the whole script (default 470 s; the benchmark
#                          stops starting new points when it is spent)
# pytest: if it is not importable, it is installed from .whl/pytest (wheels carried along, no network).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT=${1:?usage: python_suite.sh OUT_DIR [--quick|--full]}
MODE=${2:---quick}
mkdir -p "$OUT"; OUT="$(cd "$OUT" && pwd)"
export QATTN_HOME=${QATTN_HOME:-$ROOT} PYTHONUNBUFFERED=1
export QATTN_BIN=${QATTN_BIN:-$ROOT/build/qattn}
PY=${PYTHON:-python3}
export PYTHON=$PY
BUDGET=${QATTN_SUITE_BUDGET_S:-470}
E2E=${QATTN_SUITE_E2E:-llama3-8b,deepseek-v3-mla-prefill}
status=0
cd "$ROOT"

echo "== 1. the python package (from the source tree: the GPU machine has no network and no Debian -dev libraries for \`pip install .\`; the carried build/qattn is the compiler) =="
{
  echo "qattn: $QATTN_BIN ($("$QATTN_BIN" --version 2>&1 | head -1)); QATTN_HOME=$QATTN_HOME"
  nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>&1 | head -2
  if ! $PY -c "import pytest" 2>/dev/null; then
    echo "pytest missing: installing from .whl/pytest"
    $PY -m pip install --no-index --find-links "$ROOT/.whl/pytest" pytest 2>&1 | tail -2
  fi
} > "$OUT/build.log" 2>&1
export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
( cd / && $PY -c "import qattn, torch; print('qattn', qattn.__version__, 'from', qattn.__file__, '| repo', qattn.repo_root(), '| torch', torch.__version__)" ) 2>&1 | tee -a "$OUT/build.log"

echo "== 2. build the kernels (parallel) =="
( cd / && $PY - "$ROOT" "$MODE" <<'EOF'
import sys, time
root, mode = sys.argv[1], sys.argv[2]
sys.path[:0] = [root + "/tests/python", root + "/bench"]
import qattn
from gpu_kernels import TEST_KERNELS
import bench_attention as b
specs = TEST_KERNELS + b.kernel_specs(b.FULL if mode == "--full" else b.QUICK)
t = time.perf_counter()
ks = qattn.compile_many(specs, jobs=len(specs))
names = sorted({k.name for k in ks})
print(f"{len(names)} kernels ready in {time.perf_counter() - t:.0f} s: {', '.join(names)}")
print("target:", ks[0].target, "-", ks[0].target_reason)
EOF
) >> "$OUT/build.log" 2>&1 || status=1
tail -2 "$OUT/build.log"

echo "== 3. pytest (tests/python) =="
timeout 300 $PY -m pytest tests/python -rs -q -p no:cacheprovider > "$OUT/pytest.log" 2>&1 || status=1
grep -E "^(FAILED|ERROR)" "$OUT/pytest.log" | head -20
tail -1 "$OUT/pytest.log"

echo "== 4. spec -> verified kernel, then the benchmark =="
left=$((BUDGET - SECONDS)); [ "$left" -lt 90 ] && left=90
timeout $((left + 60)) $PY bench/bench_attention.py "$MODE" --out "$OUT" --e2e "$E2E" --deadline-s "$left" \
  > "$OUT/bench.log" 2>&1 || status=1
grep -E "^e2e|qattn target|deadline" "$OUT/bench.log"
sed -n '/^config /,/^wrote/p' "$OUT/bench.log" | head -80
echo "suite wall time: ${SECONDS} s"
exit $status
