# Sourced (from the repository root, on the device machine) by the GPU runs that use the Python
# package: the carried CUTLASS headers extracted to .cutlass (out/carry/cutlass.tar.xz), and the
# package pointed at the carried compiler (out/gpu-py: the stripped qattn and its libraries), this
# tree's device runtime and a kernel cache in /tmp (QATTN_CACHE_DIR may be set before).
[ -d .cutlass/include/cute ] || { mkdir -p .cutlass && tar -xJf out/carry/cutlass.tar.xz; }
export QATTN_BIN=$PWD/out/gpu-py/qattn QATTN_HOME=$PWD QATTN_CUTLASS_INCLUDE=$PWD/.cutlass/include \
  LD_LIBRARY_PATH=$PWD/out/gpu-py/lib QATTN_CACHE_DIR=${QATTN_CACHE_DIR:-/tmp/qc} PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 \
  QATTN_VERBOSE=0
