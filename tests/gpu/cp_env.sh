# Sourced by the context-parallel suites (cp_suite.sh, cp_scaling_suite.sh) after ROOT, OUT and PYBIN
# are set: the environment every rank runs in (the carried compiler and its libraries, the source
# tree's package, NVLink multicast off: the device notes say why), NGPU, and OUT/device.txt.
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export QATTN_BIN="$PYBIN/qattn" QATTN_HOME="$ROOT" QATTN_CUTLASS_INCLUDE="${QATTN_CUTLASS_INCLUDE:-$ROOT/.cutlass/include}" \
  LD_LIBRARY_PATH="$PYBIN/lib" QATTN_CACHE_DIR="${QATTN_CACHE_DIR:-/tmp/qattn-cache}" PYTHON=python3 \
  PYTHONPATH="$ROOT/python" QATTN_VERBOSE=0 OMP_NUM_THREADS=4
NGPU=$(nvidia-smi -L | wc -l)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/device.txt"
