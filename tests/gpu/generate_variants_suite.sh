#!/usr/bin/env bash
# `qattn generate` on a GPU for specs with variants (its GPU step: python -m qattn.verify with the
# spec's variants, then timing), then tests/gpu/verify_variants.py on the same artifacts.
#   bash tests/gpu/generate_variants_suite.sh   (OUT: where the logs go; out/gpu-py: the compiler)
export QATTN_BIN=$PWD/out/gpu-py/qattn QATTN_HOME=$PWD QATTN_CUTLASS_INCLUDE=$PWD/.cutlass/include LD_LIBRARY_PATH=$PWD/out/gpu-py/lib QATTN_CACHE_DIR=/tmp/qcv PYTHON=python3 PYTHONPATH=$PWD/python
W=/tmp/gv; mkdir -p $W $OUT
gen() { local n=$1; shift; ( $QATTN_BIN generate "$@" --out $W/$n > $OUT/gen_$n.txt 2>&1; echo "$n rc $?" >> $OUT/gen_$n.txt ) ; }
gen alibi_doc_softcap --preset llama3-8b --gpu h100 --alibi --document --softcap 30 &
gen prefix_relbias --preset llama3.2-1b --gpu h100 --prefix-lm 64 --relative-bias 32 &
gen gemma2 --preset gemma2-9b --gpu h100 &
gen mistral --preset mistral-7b --gpu h100 &
gen custom --preset llama3-8b --gpu h100 --mask-mod "kv_idx <= q_idx + seqlen_k - seqlen_q and kv_idx % 3 < 2" &
wait
for f in $OUT/gen_*.txt; do echo "== $f"; grep -E "rc [0-9]+$|passed|FAIL|GEN0|verify on|custom score" $f | head -6; done
python3 tests/gpu/verify_variants.py $W 2>&1 | tail -4
