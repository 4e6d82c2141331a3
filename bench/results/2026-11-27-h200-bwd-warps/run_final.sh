set -e; export QATTN_BIN=$PWD/out/gpu-py/qattn QATTN_HOME=$PWD LD_LIBRARY_PATH=$PWD/out/gpu-py/lib QATTN_VERBOSE=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt; mkdir -p /tmp/bn
bash tests/gpu/build_bwd_kernels.sh /tmp/bn --bin out/gpu-py -j 16 --only 'bwd_d64_causal|bwd_d128_causal|bwd_d128_none|bwd_d64_none_mha|bwd_d128_window_mha|bwd_mla_causal' > $OUT/build.txt 2>&1 || true
cat $OUT/build.txt; (cd /tmp/bn && tar czf $OUT/kernels_tl_logs.tgz *.tl *.log)
timeout 480 python3 tests/gpu/bwd_check.py /tmp/bn/bwd_*.so out/bwdab/old_*.so --bench --csv $OUT/results.csv > $OUT/bwd_check.txt 2>&1; echo rc=$?
grep -E "numerics|NOT|planted" $OUT/bwd_check.txt; python3 -c "
import csv
for r in csv.DictReader(open('$OUT/results.csv')): print(r['kernel'][:32].ljust(32), r['shape'].ljust(28), r['mask'][:6], '%.1f'%float(r['qattn_tflops']), '%.1f'%float(r['cudnn_tflops']), '%.1f'%float(r['fa2_tflops']))"
