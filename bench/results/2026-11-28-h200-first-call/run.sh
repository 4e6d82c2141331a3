#!/usr/bin/env bash
# The device command of this folder's run (NVIDIA H200, 2026-11-28), from the repository root with
# out/ carried: out/gpu-py (this commit's qattn and qattn_translate, Release, stripped, their Debian
# libraries in out/gpu-py/lib), out/old (the parent commit 07e98f6's qattn, qattn_translate and
# device/), out/carry/cutlass.tar.xz (CUTLASS 4.2's include tree, for the parent's kernels).
mkdir -p $OUT/r; [ -d .cutlass ] || tar -xJf out/carry/cutlass.tar.xz; export LD_LIBRARY_PATH=$PWD/out/gpu-py/lib
(QATTN_KIR_ONLY='^(sm90|neg_sm90)' timeout 430 bash tests/gpu/kir_suite.sh all $OUT/r/kir $PWD/out/gpu-py $PWD/out/old 2>&1 | tee $OUT/r/kir.log)
(timeout 140 bash tests/gpu/first_call_suite.sh $OUT/r/fc $PWD/out/gpu-py 5 2>&1 | tee $OUT/r/fc.log)
