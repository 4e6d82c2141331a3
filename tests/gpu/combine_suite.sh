#!/usr/bin/env bash
# The combine step on a GPU (docs/tl.md, "Combining partial results"): `qattn generate --combine`
# through the GPU step (qattn.verify checks the library), the package's combine libraries against an
# fp64 merge (combine_check.py), the pytest subsets of the combine and the key split, and the
# decoding benchmark (TL combine vs torch merge vs cuDNN, bench/bench_split_kv.py).
#   QATTN_BIN=... bash tests/gpu/combine_suite.sh OUT_DIR
# The environment is the package's (QATTN_BIN, QATTN_CUTLASS_INCLUDE, PYTHONPATH, ...); pytest may
# come from wheels in .whl/pytest (installed to /tmp/site).
set -u
R=${1:?usage: combine_suite.sh OUT_DIR}
mkdir -p "$R"
. "$(dirname "$0")/pytest_env.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$R/device.txt"
status=0
"$QATTN_BIN" generate --preset llama3-8b --gpu h100 --combine --out /tmp/combine-gen > "$R/generate.txt" 2>&1 || status=1
echo "generate exit $?" >> "$R/generate.txt"
python3 tests/gpu/combine_check.py > "$R/combine_check.txt" 2>&1 || status=1
tail -1 "$R/combine_check.txt"
python3 -m pytest -q tests/python/test_combine.py tests/python/test_split_keys.py -rs > "$R/pytest.txt" 2>&1 || status=1
tail -1 "$R/pytest.txt"
python3 bench/bench_split_kv.py "$R/results.csv" > "$R/bench.txt" 2>&1 || status=1
cat "$R/bench.txt" | tail -20
exit $status
