#!/usr/bin/env bash
# every config of the GPU checks with D by a Phase (transposed and natural forms), the A100 programs
# (translated for this GPU: mma.sync), planted bugs, deterministic repeats
set -uo pipefail
ROOT=$PWD; K=/tmp/k6; rm -rf $K; mkdir -p $K
export LD_LIBRARY_PATH=$ROOT/out/gpu-py/lib CUTLASS_INCLUDE=$ROOT/.cutlass/include
args=()
for n in a100_d128_causal a100_d64_doc_det a100_mla; do args+=(--tl "$n=$ROOT/out/ab_var/$n.tl"); done
bash tests/gpu/build_bwd_kernels.sh $K --bin out/gpu-py -j 16 "${args[@]}" \
  --extra 'nat_d128_doc_det|--preset llama3-8b --document true --deterministic true --bwd-form natural' \
  --extra 'nat_d128_window_softcap|--preset mistral-7b --window 256,0 --softcap 30 --bwd-form natural' 2>&1 | tail -30
python3 tests/gpu/bwd_check.py $(ls $K/*.so | grep -v neg_) --random 3 --planted $(ls $K/neg_*.so) --repeat 10 2>&1 | grep -v ": ok \|FAIL" | tail -40
