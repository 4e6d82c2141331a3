#!/usr/bin/env bash
# Fourth call (variants3.py, timing only): the proxy fences removed, against base / v4 / nodq in one
# process; then Nsight Compute's stall reasons for base, nof12 and nodq.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
source tests/gpu/device_env.sh
L=out/dqb/lib; ARGS=()
for v in base v4 nodq nof1 nof2 nof12 v4nof12; do for m in causal none; do ARGS+=(--cu "${v}_$m=out/dqb/${v}_$m.cu"); done; done
bash tests/gpu/build_bwd_kernels.sh $L --only '^$' "${ARGS[@]}" > "$OUT/build4.txt" 2>&1; echo "build exit $?" >> "$OUT/build4.txt"; tail -1 "$OUT/build4.txt"
timeout 300 python3 tests/gpu/bwd_check.py $L/{base,v4,nodq,nof1,nof2,nof12,v4nof12}_causal.so $L/{base,v4,nodq,nof12,v4nof12}_none.so \
  --bench --shapes '1,4,4,300,300' --bench-shapes '2,32,8,8192,8192;1,32,8,16384,16384' \
  --csv "$OUT/kernels4.csv" > "$OUT/bench4.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench4.txt"; grep -E "^\S+ \(1, 4|TFLOPS|exit" "$OUT/bench4.txt"
timeout 200 ncu --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
  -k 'regex:flash_bwd_llama3_8b_sm90$|bprop' python3 tests/gpu/profile_bwd.py $L/base_causal.so $L/nof12_causal.so $L/nodq_causal.so \
  > "$OUT/ncu4.txt" 2>&1
echo "ncu exit $?" >> "$OUT/ncu4.txt"
python3 - "$OUT/ncu4.txt" <<'PY'
import re, sys
blocks = re.split(r"\n  (?=\S)", open(sys.argv[1]).read())
for b in blocks:
    name = b.split("(")[0].strip()[-40:]
    vals = {m.group(1): float(m.group(2).replace(",", "")) for m in re.finditer(r"smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio\s+\S*\s+([\d.,]+)", b)}
    if vals:
        top = sorted(vals.items(), key=lambda kv: -kv[1])[:9]
        print(name, " ".join(f"{k}={v:.2f}" for k, v in top))
PY
