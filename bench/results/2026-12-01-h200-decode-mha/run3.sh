#!/usr/bin/env bash
# Third device call (carried: out/carry, out/gpu-py): Nsight Compute on probe.py's MHA decoding kernel over
# the contiguous cache and over pages of 16 (the second contiguous / paged pair), the sections that say
# where a memory-bound kernel's time goes.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
python3 bench/results/2026-12-01-h200-decode-mha/probe.py > "$OUT/probe.txt" 2>&1; echo "probe exit $?"; cat "$OUT/probe.txt"
timeout 300 ncu --clock-control none -k 'regex:sm90' --launch-skip 2 --launch-count 2 --set full -o /tmp/mha \
  python3 bench/results/2026-12-01-h200-decode-mha/probe.py > "$OUT/ncu_run.txt" 2>&1; echo "ncu exit $?"; tail -3 "$OUT/ncu_run.txt"
ncu -i /tmp/mha.ncu-rep --page details --csv > "$OUT/details.csv" 2>&1
ncu -i /tmp/mha.ncu-rep --page raw --csv --metrics dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sector_hit_rate.pct,gpu__time_duration.sum,l1tex__m_xbar2l1tex_read_bytes.sum,lts__t_requests_srcunit_tex.sum,smsp__cycles_active.avg > "$OUT/raw.csv" 2>&1
python3 - "$OUT/details.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
keep = ("Duration", "DRAM Throughput", "Memory Throughput", "L2 Hit Rate", "L1/TEX Hit Rate", "Achieved Occupancy",
        "Registers Per Thread", "Grid Size", "Block Size", "Mem Busy", "Max Bandwidth", "L2 Compression", "Elapsed Cycles",
        "One or More Eligible", "Issued Warp Per Scheduler", "Dynamic Shared Memory Per Block")
for r in rows:
    if r.get("Metric Name") in keep:
        print(r.get("ID"), r.get("Kernel Name", "")[:40], r.get("Section Name"), r.get("Metric Name"), r.get("Metric Value"), r.get("Metric Unit"))
PY
