// The Hopper launch code's L2 promotion rule (device/qattn/sm90/tensor_map.h, kv_l2_promotion), on
// the host: K and V are promoted by 128 bytes exactly when a launch has one query tile per (batch,
// head), by 256 bytes otherwise. Built and run by emit_compile_test (the CUDA headers, no GPU).
#include <cstdio>

#include "qattn/sm90/tensor_map.h"

int main() {
  using qattn::sm90::kv_l2_promotion;
  const auto s = CU_TENSOR_MAP_L2_PROMOTION_L2_128B, p = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  struct Case {
    long long seqlen_q;
    int pack, bm;
    bool ragged;
    CUtensorMapL2promotion want;
    const char* what;
  } cases[] = {
      {1, 1, 128, false, s, "one token, MHA"},
      {1, 4, 128, false, s, "one token, GQA packed 4"},
      {32, 4, 128, false, s, "32 queries x 4 heads: 128 rows, one tile"},
      {33, 4, 128, false, p, "33 queries x 4 heads: two tiles"},
      {64, 2, 128, false, s, "the Python short kernel's planned shape"},
      {128, 1, 128, false, s, "one full tile"},
      {129, 1, 128, false, p, "two tiles"},
      {4096, 1, 128, false, p, "prefill"},
      {1, 1, 128, true, p, "ragged queries"},
      {64, 1, 64, false, s, "BM 64, one tile"},
      {1, 0, 128, false, s, "pack 0 (not packed) counts as 1"},
  };
  int bad = 0;
  for (const Case& c : cases) {
    const auto got = kv_l2_promotion(c.seqlen_q, c.pack, c.bm, c.ragged);
    if (got != c.want) {
      std::printf("FAIL %s: seqlen_q %lld pack %d BM %d ragged %d: promotion %d, want %d\n", c.what, c.seqlen_q, c.pack, c.bm,
                  int(c.ragged), int(got), int(c.want));
      ++bad;
    }
  }
  std::printf("launch rule: %d of %zu cases as expected\n", int(sizeof(cases) / sizeof(cases[0])) - bad,
              sizeof(cases) / sizeof(cases[0]));
  return bad ? 1 : 0;
}
