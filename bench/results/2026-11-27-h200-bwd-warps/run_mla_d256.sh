set -e; export QATTN_BIN=$PWD/out/gpu-py/qattn QATTN_HOME=$PWD LD_LIBRARY_PATH=$PWD/out/gpu-py/lib QATTN_VERBOSE=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt; mkdir -p /tmp/bn
bash tests/gpu/build_bwd_kernels.sh /tmp/bn --bin out/gpu-py -j 16 --only 'bwd_mla|bwd_d256' \
  --extra 'bwd_mla_causal_t64x64x8|--preset deepseek-v3-mla-prefill --tiles 64,64,8' \
  --extra 'bwd_mla_causal_t64x64x8s2|--preset deepseek-v3-mla-prefill --tiles 64,64,8,2' \
  --extra 'bwd_mla_causal_t64x128x8|--preset deepseek-v3-mla-prefill --tiles 64,128,8' \
  --extra 'bwd_d256_causal_t64x64x8|--preset llama3-8b --head-dim 256 --tiles 64,64,8' > $OUT/build.txt 2>&1 || true
cat $OUT/build.txt; (cd /tmp/bn && tar czf $OUT/kernels_tl_logs.tgz *.tl *.log)
timeout 300 python3 tests/gpu/bwd_check.py /tmp/bn/bwd_*.so --bench --bench-shapes "4,16,16,4096,4096;2,16,16,8192,8192" --csv $OUT/results.csv > $OUT/bwd_check.txt 2>&1; echo rc=$?
grep -E "numerics|NOT|FAIL" $OUT/bwd_check.txt | head; python3 -c "
import csv
for r in csv.DictReader(open('$OUT/results.csv')): print(r['kernel'][:32].ljust(32), r['shape'].ljust(30), r['mask'][:6], '%.1f'%float(r['qattn_tflops']), '%.1f'%float(r['cudnn_tflops']), '%.1f'%float(r['fa2_tflops']))"
