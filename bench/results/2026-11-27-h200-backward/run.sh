export QATTN_BIN=$PWD/out/gpu-py/qattn QATTN_HOME=$PWD QATTN_CUTLASS_INCLUDE=$PWD/.cutlass/include LD_LIBRARY_PATH=$PWD/out/gpu-py/lib QATTN_CACHE_DIR=/tmp/qc PYTHON=python3 PYTHONPATH=$PWD/python QATTN_VERBOSE=0 OMP_NUM_THREADS=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
S=$(date +%s); n=$(python3 bench/bench_backward.py --jobs)
for i in $(seq 0 $((n - 1))); do timeout 300 python3 bench/bench_backward.py --warm $i > /tmp/warm_$i.log 2>&1 & done; wait
echo "warm $n jobs: $(( $(date +%s) - S )) s"; grep -h "built\|Error" /tmp/warm_*.log | tail -20; cat /tmp/warm_*.log > $OUT/warm.log
timeout $((560 - $(date +%s) + S)) python3 bench/bench_backward.py $OUT/results.csv --seqlens 4096 > $OUT/bench.txt 2>&1; echo "bench rc=$? $(( $(date +%s) - S )) s"
tail -25 $OUT/bench.txt
