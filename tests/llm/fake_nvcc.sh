#!/bin/sh
# A stand-in for nvcc in the CLI replay tests (llm_replay_test): answers --version and "builds" by
# writing a placeholder file to the -o path, so `qattn generate` runs end to end in milliseconds.
# The real nvcc is exercised by emit_compile_test and llm_nvcc_test.
if [ "$1" = "--version" ]; then
  echo "Cuda compilation tools, release 0.0, fake nvcc of the qattn LLM replay tests"
  exit 0
fi
out=""
while [ $# -gt 0 ]; do
  if [ "$1" = "-o" ]; then out="$2"; shift; fi
  shift
done
[ -n "$out" ] || { echo "fake nvcc: no -o" >&2; exit 1; }
echo "placeholder library written by tests/llm/fake_nvcc.sh" > "$out"
echo "ptxas info    : fake build"
