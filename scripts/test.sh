#!/usr/bin/env bash
# Runs every test of qattn once: installs dependencies; builds the compiler (Release) and runs there
# the tests that drive nvcc or sweep every preset / variant (RELEASE_ONLY below: too slow, or
# impossible, under the sanitizers), the Python binding's CPU tests and `pip install .`; then builds
# under AddressSanitizer + UndefinedBehaviorSanitizer and runs every other test there (unit, golden
# TL, must-fail TL, the CLI, the hostile-input corpus tests/hostile/); then runs the three fuzz
# targets (TL parser + checker, spec reader, LLM reply extraction + TL verifiers) in parallel for
# QATTN_FUZZ_SECONDS (default 60) each. QATTN_QUICK=1 runs the whole ctest suite in the Release build
# instead and skips the sanitizer and fuzz stages.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

# The tests that run in the Release build only: emit_compile_test and llm_nvcc_test (nvcc on generated /
# LLM-written code: the sanitizer build does not even compile them, tests/CMakeLists.txt); the four
# sweeps that interpret the TL of every preset x GPU, every variant x architecture and every preset's
# backward (planMatrix.EveryPresetEveryGpu..., planVariants.EveryVariantOnSm75Sm80Sm90...,
# planVariants.TheSpecFormulasAreTheReference, planBackward.PresetsPlanCheckAndInterpret) and
# verifyTolerance.LseBoundScalesWithTheLse (one more variant plan): 15 minutes under ASan for code
# paths that the single-case plan, variant, backward, interpreter and CLI tests run under the
# sanitizers below; the examples (the CLI tests cover the same commands) and parser.RandomMutations
# (the fuzz stage mutates TL under ASan + UBSan for a minute); the interpreter's backward with the
# gradients of auxiliary inputs (Backward.AuxGradient*, the golden backward_aux_grad.tl: 418 CPU-s
# under the sanitizers, 32 s in Release; the other backward interpreter tests run its code paths
# under them). Everything else runs once, under the sanitizers (it ran in both builds before: 600
# CPU-s of CI for no extra finding).
RELEASE_ONLY='emit_compile|llm_nvcc|EveryPresetEveryGpu|EveryVariantOnSm75Sm80Sm90|TheSpecFormulasAreTheReference|planBackward\.PresetsPlanCheckAndInterpret|LseBoundScalesWithTheLse|^examples\.|RandomMutations|Backward\.AuxGradient|RunsAsExpected/backward_aux_grad'
# ... and the test programs that hold them (the others would be built for nothing here)
RELEASE_TARGETS='qattn qattn_translate emit_compile_test llm_nvcc_test parser_test plan_test plan_variants_test verify_test interp_test interp_backward_test'
if [ "${QATTN_QUICK:-0}" = "1" ]; then RELEASE_ONLY=.; RELEASE_TARGETS=""; fi

echo "== build + tests (Release${RELEASE_TARGETS:+: the nvcc tests, the sweeps, the examples}) == (${SECONDS} s)"
QATTN_TARGETS="$RELEASE_TARGETS" bash scripts/build.sh
ctest --test-dir build --output-on-failure -j2 -R "$RELEASE_ONLY" | tee build/ctest.log
# The plain closing line CI reads, from ctest's "N% tests passed, F tests failed out of T".
summary() { sed -nE 's/.*tests passed, ([0-9]+) tests failed out of ([0-9]+)/\2 \1/p' "$1" | tail -1 |
            awk '{ printf "%d passed, %d failed\n", $1 - $2, $2 }'; }

echo "== python binding (tests/python: CPU part; GPU tests skip with the reason) == (${SECONDS} s)"
PY=${PYTHON:-python3}
QATTN_BIN=${QATTN_BIN:-$PWD/build/qattn} $PY -m pytest tests/python -q -rs -p no:cacheprovider 2>&1 | tee build/pytest.log
pytest_summary() { grep -E "^=+ .*(passed|failed|skipped).* =+$|^[0-9]+ (passed|failed|skipped).* in [0-9.]+s" build/pytest.log | tail -1; }

echo "== install: pip install . into a fresh virtual environment, used from outside the repository == (${SECONDS} s)"
# The README's install command. It reuses build/ (the same Release configuration: only the
# compiler target relinks) instead of building the compiler a second time in build/pip.
VENV=$(mktemp -d)/venv
$PY -m venv --system-site-packages "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check . -Cbuild-dir=build -Ccmake.define.QATTN_TESTS=ON \
  > build/pip-install.log 2>&1 || { tail -30 build/pip-install.log; echo "pip install . failed"; exit 1; }
check_installed() {  # in a subshell: no QATTN_HOME / QATTN_BIN / PYTHONPATH, outside the repository
  cd "$1" || return 1
  unset QATTN_HOME QATTN_BIN PYTHONPATH
  export QATTN_CACHE_DIR="$1/cache" PATH="$VENV/bin:$PATH"
  qattn --version && python -c "import qattn; e = qattn.explain('llama3-8b', gpu='h100'); print(qattn.__file__); print(str(e).splitlines()[0])"
}
install_check=$(check_installed "$(dirname "$VENV")" 2>&1) || { echo "$install_check"; echo "the installed qattn does not work"; exit 1; }
echo "$install_check"
rm -rf "$(dirname "$VENV")"
install_summary="installed with pip install . and used from outside the repository: ok"

if [ "${QATTN_QUICK:-0}" = "1" ]; then echo "python binding: $(pytest_summary)"; echo "$install_summary"; summary build/ctest.log; exit 0; fi

echo "== tests under ASan + UBSan (every test but the Release-only ones) == (${SECONDS} s)"
# -O0 with line tables only (-g1): the reports keep file:line, the build is 11% faster than with -g;
# the interpreter and the reference (src/tl, src/spec) at -O1 (CMakeLists.txt), where the suite spends its
# time: 328 s on 2 cores (with the interpreter of 07f6fbe; all -O0 before it: 879 s), a 453 s build
# (-O1 everywhere: 864 s, for a 325 s suite); the test programs' own code with ASan only, the libraries
# with both (tests/CMakeLists.txt: UBSan in gtest macros made a test file 35-50% slower to compile)
QATTN_BUILD_DIR=build-asan QATTN_BUILD_TYPE=Debug bash scripts/build.sh -DQATTN_SANITIZE=ON -DCMAKE_CXX_FLAGS_DEBUG=-g1
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --test-dir build-asan --output-on-failure -j2 -E "$RELEASE_ONLY" |
  tee build-asan/ctest.log

FUZZ_SECONDS=${QATTN_FUZZ_SECONDS:-60}
echo "== fuzzing: fuzz_tl, fuzz_spec, fuzz_reply at once, ${FUZZ_SECONDS} s each == (${SECONDS} s)"
# (line tables only, -g1, as the sanitizer build: a crash's stack keeps file:line, the build is 10% faster)
CC=clang CXX=clang++ QATTN_BUILD_DIR=build-fuzz QATTN_BUILD_TYPE=Debug QATTN_TARGETS='fuzz_tl fuzz_spec fuzz_reply' \
  bash scripts/build.sh -DQATTN_FUZZ=ON -DQATTN_TESTS=OFF -DCMAKE_CXX_FLAGS_DEBUG=-g1
# One background job per target (seed corpus copied to a scratch folder, its dictionary, crash
# files kept there); wait for all, print each one's tail, fail if any of them did not end cleanly.
work=$(mktemp -d)
declare -A fuzz_pid
for t in tl:corpus:tl.dict spec:corpus_spec:spec.dict reply:corpus_reply:reply.dict; do
  IFS=: read -r name corpus dict <<<"$t"
  mkdir -p "$work/$name/corpus" "$work/$name/crash"
  cp tests/fuzz/"$corpus"/* "$work/$name/corpus/"
  ./build-fuzz/tests/fuzz/fuzz_"$name" -max_total_time="$FUZZ_SECONDS" -timeout=120 -rss_limit_mb=2560 \
    -dict=tests/fuzz/"$dict" -print_final_stats=1 -artifact_prefix="$work/$name/crash/" "$work/$name/corpus" \
    >"$work/$name/log" 2>&1 &
  fuzz_pid[$name]=$!
done
fuzz_failed=""
for name in tl spec reply; do
  rc=0; wait "${fuzz_pid[$name]}" || rc=$?
  echo "-- fuzz_$name (exit $rc) --"; tail -n 12 "$work/$name/log"
  if [ "$rc" -ne 0 ] || [ -n "$(ls -A "$work/$name/crash")" ]; then
    fuzz_failed="$fuzz_failed fuzz_$name"
    mkdir -p build-fuzz/crashes && cp -r "$work/$name/crash" "build-fuzz/crashes/$name"
  fi
done
rm -rf "$work"
if [ -n "$fuzz_failed" ]; then echo "fuzz: crashed:$fuzz_failed (inputs under build-fuzz/crashes/)"; exit 1; fi
echo "fuzz: no crash in ${FUZZ_SECONDS} s (fuzz_tl, fuzz_spec, fuzz_reply)"
echo "== summary == (${SECONDS} s in all)"
echo "python binding: $(pytest_summary)"
echo "$install_summary"
echo -n "release-only tests: "; summary build/ctest.log
echo -n "sanitizers: "; summary build-asan/ctest.log
# the closing line: every ctest test, each run once in one of the two builds
sed -nE 's/.*tests passed, ([0-9]+) tests failed out of ([0-9]+)/\2 \1/p' build/ctest.log build-asan/ctest.log |
  awk '{ t += $1; f += $2 } END { printf "%d passed, %d failed\n", t - f, f }'

