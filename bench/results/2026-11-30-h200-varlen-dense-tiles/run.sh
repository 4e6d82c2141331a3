#!/usr/bin/env bash
# The ragged kernel's live tiles numbered densely (DenseTiles, Scheduler<..., true>: no dead tile is fetched).
# Runtimes in one process (bench_runtimes.py, --also): this tree; main = main at 80aab2f (the leader checks each
# fetched tile and fetches past dead ones, next_live_tile); idlewg = main at 0100c3a (the idle warpgroup's
# shadow, every dead tile fetched); parent = main at 868152d (neither); nopf / nodec: this tree's device with
# nopf.patch / nodec.patch (A/B variants, see the README). Carry out/carry, out/gpu-py, out/ab, out/parent.
#   calls 1-2 (call1/, call2/; this tree then also fetched each next number as its tile began: README):
#     bash run.sh serve "main nopf";  bash run.sh prefill "main nopf parent"
#   call 3: bash run.sh prefill "main idlewg parent" && bash run.sh eq "nodec main idlewg parent"
#   call 4: bash run.sh eq "nodec nodecold nodecnf idlewg parent", then the reverse order (bench_eq1 / bench_eq)
#   call 5: bash run.sh eq "nocode nodec inl idlewg parent", then the reverse order
#   call 6 (the landed form): bash run.sh serve "main parent" && bash run.sh prefill "main parent"
#   call 7 (the next number fetched during a tile's last key tile; dense = main at b0e968a, without it):
#     bash run.sh prefill "dense parent" && NOTEST=1 bash run.sh serve "dense parent"
#   call 8: bash run.sh eq "nocode nocodepad parent", then the reverse order (this tree = dense)
#   call 9 (the counts in shared memory; dense = main at b0e968a, counts in registers):
#     bash run.sh serve "dense parent" && bash run.sh prefill "dense parent"
#   call 10: bash run.sh eq "nodiv dense parent", then the reverse order (this tree = call 9's)
#   call 11 (the counts read in two rounds of int4 loads; dense = b0e968a):
#     bash run.sh serve "dense parent" && bash run.sh prefill "dense parent"
set -u
source tests/gpu/device_env.sh
. tests/gpu/pytest_env.sh
export OMP_NUM_THREADS=1
D=bench/results/2026-11-30-h200-varlen-dense-tiles
ALSO=""
for r in $2; do
  case $r in
    parent) ALSO="$ALSO --also parent=$PWD/out/parent/device:$PWD/out/parent/qattn" ;;
    *) if [ -x out/ab/$r/qattn ]; then ALSO="$ALSO --also $r=$PWD/out/ab/$r/device:$PWD/out/ab/$r/qattn"
       else ALSO="$ALSO --also $r=$PWD/out/ab/$r/device"; fi ;;
  esac
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
S=$(date +%s)
if [ "$1" = serve ]; then
  [ -n "${NOTEST:-}" ] || timeout 220 python3 -m pytest -q -x tests/python/test_varlen.py > $OUT/pytest.txt 2>&1
  rc=$?; tail -3 $OUT/pytest.txt; echo "pytest rc=$rc $(( $(date +%s) - S )) s"; [ $rc = 0 ] || grep -B5 -A30 "Error\|FAILED" $OUT/pytest.txt | head -60
  [ -n "${NOTEST:-}" ] || timeout 60 python3 bench/results/2026-11-30-h200-varlen-dead-tiles/probe.py > $OUT/probe.txt 2>&1; tail -3 $OUT/probe.txt
  timeout 250 python3 bench/bench_varlen.py $OUT/results_serve.csv --rounds 5 \
    --rows serve_gqa_64x4k+512,serve_gqa_128x2k+2k,serve_gqa64_32x8k+1k,serve_mqa_32x8k+1k,serve_mqa_4x32k+256 $ALSO > $OUT/bench_serve.txt 2>&1
  echo "bench rc=$? $(( $(date +%s) - S )) s"; tail -6 $OUT/bench_serve.txt
elif [ "$1" = prefill ]; then
  timeout 400 python3 bench/bench_varlen.py $OUT/results_prefill.csv --rounds 9 \
    --rows mix_uniform_128,mix_lognormal_32,eq_8x2k,eq_32x512,mix_one_long $ALSO > $OUT/bench_prefill.txt 2>&1
  echo "bench rc=$? $(( $(date +%s) - S )) s"; tail -6 $OUT/bench_prefill.txt
else  # equal lengths only (every tile live: nodec.patch's kernels are right only there)
  timeout 300 python3 bench/bench_varlen.py $OUT/results_eq.csv --rounds 9 --rows eq_8x2k,eq_32x512 $ALSO > $OUT/bench_eq.txt 2>&1
  echo "bench rc=$? $(( $(date +%s) - S )) s"; tail -3 $OUT/bench_eq.txt
fi
