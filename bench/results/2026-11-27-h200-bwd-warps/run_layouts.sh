set -e; export QATTN_BIN=$PWD/out/gpu-py/qattn QATTN_HOME=$PWD LD_LIBRARY_PATH=$PWD/out/gpu-py/lib QATTN_VERBOSE=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt; mkdir -p /tmp/bn
(time bash tests/gpu/build_bwd_kernels.sh /tmp/bn --bin out/gpu-py -j 16 \
  --extra 'bwd_d128_none_default_layouts|--preset llama3-8b --mask none|s/ {warps_m: [0-9]*}//' \
  --extra 'bwd_d128_causal_default_layouts|--preset llama3-8b|s/ {warps_m: [0-9]*}//' \
  --extra 'bwd_d64_causal_wm4|--preset llama3.2-1b|s/and get S$/and get S {warps_m: 4}/;s/and get dP$/and get dP {warps_m: 4}/;s/and get dQ$/and get dQ {warps_m: 4}/;s/^\(Allocate [dOLSEKV]* in register .*\)$/\1 {warps_m: 4}/;s/^  Reshape dSc from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K)$/  Copy dSc from shared to register/' \
  --extra 'bwd_d64_none_mha_wm4|--preset llama3.2-1b --mask none --heads 16,16|s/and get S$/and get S {warps_m: 4}/;s/and get dP$/and get dP {warps_m: 4}/;s/and get dQ$/and get dQ {warps_m: 4}/;s/^\(Allocate [dOLSEKV]* in register .*\)$/\1 {warps_m: 4}/;s/^  Reshape dSc from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_K)$/  Copy dSc from shared to register/' \
  ) > $OUT/build.txt 2>&1 || true
cat $OUT/build.txt; (cd /tmp/bn && tar czf $OUT/kernels_tl_logs.tgz *.tl *.log); grep -c warps_m /tmp/bn/bwd_d64_causal_wm4.tl /tmp/bn/bwd_d128_none.tl /tmp/bn/bwd_d128_none_default_layouts.tl || true
timeout 480 python3 tests/gpu/bwd_check.py /tmp/bn/bwd_*.so --planted /tmp/bn/neg_*.so --bench --csv $OUT/results.csv > $OUT/bwd_check.txt 2>&1; echo rc=$?
grep -E "numerics|NOT|planted" $OUT/bwd_check.txt; python3 -c "
import csv
for r in csv.DictReader(open('$OUT/results.csv')): print(r['kernel'][:32].ljust(32), r['shape'].ljust(28), r['mask'][:6], '%.1f'%float(r['qattn_tflops']), '%.1f'%float(r['cudnn_tflops']), '%.1f'%float(r['fa2_tflops']))"
