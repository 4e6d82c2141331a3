#!/usr/bin/env bash
# Issue 22's scaling figures on a machine with several GPUs, in one command: the ring's forward with
# several sm_margin values (the SMs a step's kernel leaves to the NCCL transfer in flight), then
# forward and forward + backward against torch's context_parallel (cuDNN) and qattn on one GPU.
#   bash tests/gpu/cp_scaling_suite.sh OUT_DIR PY_BIN_DIR [MARGINS]      (MARGINS default 4,8,16)
# 1. tests/python/test_distributed.py (gloo, world sizes 1-3: the ring's launches get sm_margin while a
#    transfer is in flight, and only then);
# 2. every kernel the runs use, built first in parallel processes (forward with LSE, the TL combine,
#    the backward, causal and not: bf16 d128 MHA);
# 3. bench/bench_cp.py at every GPU: fwd at 128k and 256k with qattn-ring-m<M> for each margin; fwd+bwd
#    at 128k and 256k; fwd at 512k and 1M (results.csv, bench_*.log).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="$1"; PYBIN="$(cd "$2" && pwd)"; MARGINS="${3:-4,8,16}"
# shellcheck source=tests/gpu/cp_env.sh
source "$ROOT/tests/gpu/cp_env.sh"
rc=0
(cd "$ROOT/tests/python" && timeout 200 python3 -m pytest test_distributed.py -q -p no:cacheprovider -rs) 2>&1 \
  | tail -4 | tee "$OUT/pytest_distributed.txt"
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
echo "== kernels == ($SECONDS s)"
i=0
for causal in True False '"top_left"'; do  # the single-GPU kernels, and the ring's top-left causal launches
  CUDA_VISIBLE_DEVICES=$((i % NGPU)) timeout 300 python3 - "$causal" > "$OUT/warm_$i.log" 2>&1 <<'PY' &
import sys, torch, qattn
causal = eval(sys.argv[1])
q, k, v = (torch.randn(1, 1024, 16, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
o = qattn.attention(q, k, v, causal=causal)            # the forward with its LSE (autograd saves it)
torch.autograd.grad(o, (q, k, v), torch.randn_like(o))  # the backward
with torch.no_grad():
    qattn.attention(q, k, v, causal=causal, return_lse=True)
print("warm", sys.argv[1], "ok", flush=True)
PY
  i=$((i + 1))
done
wait
cat "$OUT"/warm_*.log | grep -E "warm|Error" | head -4
run() {  # LOG ARGS...
  local log=$1; shift
  timeout 280 torchrun --nproc-per-node "$NGPU" "$ROOT/bench/bench_cp.py" "$OUT/results.csv" "$@" > "$OUT/$log" 2>&1 || rc=1
  grep -E "ratio|Error|error:" "$OUT/$log" | tail -40
}
impls_m=$(echo "$MARGINS" | tr ',' '\n' | sed 's/^/qattn-ring-m/' | paste -sd,)
echo "== fwd, 128k and 256k, the ring with sm_margin $MARGINS == ($SECONDS s)"
run bench_fwd_margins.log --seqlens 131072,262144 --impls "qattn-ring,$impls_m,qattn-ulysses,torch-cp"
echo "== fwd+bwd, 128k and 256k == ($SECONDS s)"
run bench_train.log --seqlens 131072,262144 --passes fwd+bwd --impls "qattn-ring,qattn-ulysses,torch-cp"
echo "== fwd, 512k and 1M == ($SECONDS s)"
run bench_fwd_long.log --seqlens 524288,1048576 --impls "qattn-ring,$impls_m,qattn-ulysses,torch-cp"
echo "cp_scaling_suite: status $rc in $SECONDS s"
exit $rc
