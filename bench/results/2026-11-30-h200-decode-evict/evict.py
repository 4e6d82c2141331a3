#!/usr/bin/env python3
"""Writes a copy of device/ whose 4-D TMA loads (the K / V tiles of the sm90 kernels; packed Q loads
are 5-D) carry an L2 cache hint: `createpolicy.fractional.L2::evict_first` (fraction 1.0) and
`.L2::cache_hint` on `cp.async.bulk.tensor.4d` — keys a decoding block streams once need not stay in
L2. A measuring copy: the variant libraries are compiled against it (build.sh).

    python3 evict.py SRC_DEVICE_DIR DST_DEVICE_DIR
"""
import shutil
import sys

src, dst = sys.argv[1], sys.argv[2]
shutil.copytree(src, dst, dirs_exist_ok=True)
p = dst + "/qattn/sm90/ptx.cuh"
s = open(p).read()
old = '''      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];"
      ::"r"(smem_u32(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");'''
new = '''      "{\\n.reg .b64 pol;\\ncreatepolicy.fractional.L2::evict_first.b64 pol, 1.0;\\n"
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%3, %4, %5, %6}], [%2], pol;\\n}"
      ::"r"(smem_u32(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");'''
if old not in s:
    sys.exit("evict.py: tma_load_4d not found")
open(p, "w").write(s.replace(old, new, 1))
