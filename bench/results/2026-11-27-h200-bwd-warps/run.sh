set -e; export QATTN_BIN=$PWD/out/gpu-py/qattn QATTN_HOME=$PWD LD_LIBRARY_PATH=$PWD/out/gpu-py/lib QATTN_VERBOSE=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt; mkdir -p /tmp/bn
(time bash tests/gpu/build_bwd_kernels.sh /tmp/bn --bin out/gpu-py -j 16 --extra 'bwd_d128_none_s1|--preset llama3-8b --mask none --tiles 64,128,8,1' --extra 'bwd_d128_causal_s1|--preset llama3-8b --tiles 64,128,8,1' --extra 'bwd_d64_causal_s1|--preset llama3.2-1b --tiles 128,128,8,1' --extra 'bwd_mla_causal_s1|--preset deepseek-v3-mla-prefill --tiles 64,64,4,1') > $OUT/build.txt 2>&1 || true
cat $OUT/build.txt; (cd /tmp/bn && tar czf $OUT/kernels_tl_logs.tgz *.tl *.log)
timeout 500 python3 tests/gpu/bwd_check.py /tmp/bn/bwd_*.so out/bwdab/old_*.so --planted /tmp/bn/neg_*.so --bench --csv $OUT/results.csv > $OUT/bwd_check.txt 2>&1; echo rc=$?
grep -E "numerics|NOT|planted" $OUT/bwd_check.txt; python3 -c "
import csv
for r in csv.DictReader(open('$OUT/results.csv')): print(r['kernel'][:28].ljust(28), r['shape'].ljust(28), r['mask'][:6], '%.1f'%float(r['qattn_tflops']), '%.1f'%float(r['cudnn_tflops']), '%.1f'%float(r['fa2_tflops']))"
