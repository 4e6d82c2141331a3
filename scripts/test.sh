#!/usr/bin/env bash
# Runs every test of qattn: installs dependencies, builds, runs the unit/golden/must-fail suites,
# runs them again under AddressSanitizer + UndefinedBehaviorSanitizer, and fuzzes the TL parser and
# checker for QATTN_FUZZ_SECONDS (default 60). QATTN_QUICK=1 skips the sanitizer and fuzz stages.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

echo "== build + tests (Release) == (${SECONDS} s)"
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j2 | tee build/ctest.log
# The plain closing line CI reads, from ctest's "N% tests passed, F tests failed out of T".
summary() { sed -nE 's/.*tests passed, ([0-9]+) tests failed out of ([0-9]+)/\2 \1/p' "$1" | tail -1 |
            awk '{ printf "%d passed, %d failed\n", $1 - $2, $2 }'; }

echo "== python binding (tests/python: CPU part; GPU tests skip with the reason) == (${SECONDS} s)"
PY=${PYTHON:-python3}
QATTN_BIN=${QATTN_BIN:-$PWD/build/qattn} $PY -m pytest tests/python -q -rs -p no:cacheprovider 2>&1 | tee build/pytest.log
pytest_summary() { grep -E "^=+ .*(passed|failed|skipped).* =+$|^[0-9]+ (passed|failed|skipped).* in [0-9.]+s" build/pytest.log | tail -1; }

if [ "${QATTN_QUICK:-0}" = "1" ]; then echo "python binding: $(pytest_summary)"; summary build/ctest.log; exit 0; fi

echo "== tests under ASan + UBSan == (${SECONDS} s)"
# -O0 with line tables only (-g1): the reports keep file:line, the build is 11% faster than with -g
QATTN_BUILD_DIR=build-asan QATTN_BUILD_TYPE=Debug bash scripts/build.sh -DQATTN_SANITIZE=ON -DCMAKE_CXX_FLAGS_DEBUG=-g1
# Skipped here (they ran above): emit_compile_test and llm_nvcc_test (nvcc on generated / LLM-written
# code); the three sweeps that interpret the TL of every preset x GPU and every variant x
# architecture (planMatrix.EveryPresetEveryGpu..., planVariants.EveryVariantOnSm75Sm80Sm90...,
# planVariants.TheSpecFormulasAreTheReference): 15 minutes under ASan at -O0 for code paths that the
# single-case plan, variant, interpreter and CLI tests below already run under the sanitizers; the
# examples (the CLI tests cover the same commands) and parser.RandomMutations (the fuzz stage below
# mutates TL under ASan + UBSan for a minute).
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --test-dir build-asan --output-on-failure -j2 \
  -E 'emit_compile|llm_nvcc|EveryPresetEveryGpu|EveryVariantOnSm75Sm80Sm90|TheSpecFormulasAreTheReference|^examples\.|RandomMutations' |
  tee build-asan/ctest.log

echo "== fuzzing the TL parser + checker for ${QATTN_FUZZ_SECONDS:-60} s == (${SECONDS} s)"
CC=clang CXX=clang++ QATTN_BUILD_DIR=build-fuzz QATTN_BUILD_TYPE=Debug QATTN_TARGETS=fuzz_tl \
  bash scripts/build.sh -DQATTN_FUZZ=ON -DQATTN_TESTS=OFF
work=$(mktemp -d)
cp tests/fuzz/corpus/* "$work"/
./build-fuzz/tests/fuzz/fuzz_tl -max_total_time="${QATTN_FUZZ_SECONDS:-60}" -timeout=10 -rss_limit_mb=2048 \
  -dict=tests/fuzz/tl.dict -print_final_stats=1 -artifact_prefix="$work/" "$work" 2>&1 | tail -n 12
rm -rf "$work"
echo "fuzz: no crash in ${QATTN_FUZZ_SECONDS:-60} s"
echo "== summary == (${SECONDS} s in all)"
echo "python binding: $(pytest_summary)"
echo -n "sanitizers: "; summary build-asan/ctest.log
summary build/ctest.log
