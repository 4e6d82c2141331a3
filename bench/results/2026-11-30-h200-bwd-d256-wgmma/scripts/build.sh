#!/bin/bash
# The TL files of out/d256w/tl translated (out/gpu-py/qattn_translate) and built into out/d256w, all at once:
# tests/gpu/build_bwd_kernels.sh with each file as a --tl library and none of its own configs. (The
# logs of this folder were made by an inline copy of the same translate + nvcc commands.)
args=()
for f in out/d256w/tl/*.tl; do args+=(--tl "$(basename "$f" .tl)=$f"); done
exec bash tests/gpu/build_bwd_kernels.sh out/d256w --bin out/gpu-py --only '^$' "${args[@]}"
