// The Hopper launch code's L2 promotion rule (device/qattn/sm90/tensor_map.h, kv_l2_promotion), on
// the host: K and V are promoted by 128 bytes exactly when a launch has one query tile per (batch,
// head), by 256 bytes otherwise; the same launches stream K and V (kv_streamed: evict-first loads). And the C ABI's `splits` (ABI 8) as check_fwd_params takes it: a
// kernel that splits the keys takes 0 (one part) to 65535 and needs the LSE; every other kernel
// refuses more than one part. And the TL integer arithmetic (intmath.cuh) against exact floor / ceil,
// and a ragged launch's live tiles numbered densely (ragged_tile) against the launch's own order.
// Built and run by emit_compile_test (the CUDA headers, no GPU).
#include <cmath>
#include <cstdio>
#include <vector>

#include "qattn/host.cuh"
#include "qattn/intmath.cuh"
#include "qattn/sm90/tensor_map.h"

// check_fwd_params of a valid (batch 2, heads 8 / 2, 1 x 4096, d 128) call with `splits` parts.
static int check_splits(int splits, bool split_kernel, bool with_lse) {
  static unsigned char buf[64] __attribute__((aligned(16)));
  qattn_fwd_params p{};
  p.abi_version = QATTN_ABI_VERSION;
  p.q = p.k = p.v = buf;
  p.o = buf;
  p.lse = with_lse ? reinterpret_cast<float*>(buf) : nullptr;
  p.q_row_stride = p.k_row_stride = p.v_row_stride = p.o_row_stride = 1024;
  p.q_head_stride = p.k_head_stride = p.v_head_stride = p.o_head_stride = 128;
  p.batch = 2, p.heads_q = 8, p.heads_kv = 2, p.seqlen_q = 1, p.seqlen_k = 4096, p.d_qk = p.d_v = 128;
  p.softmax_scale = 0.088f;
  p.splits = splits;
  return qattn::host::check_fwd_params(&p, 128, 128, 2, 2, true, 0u, split_kernel);
}

int main() {
  using qattn::sm90::kv_l2_promotion;
  const auto s = CU_TENSOR_MAP_L2_PROMOTION_L2_128B, p = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  struct Case {
    long long seqlen_q;
    int pack, bm;
    CUtensorMapL2promotion want;
    const char* what;
  } cases[] = {
      {1, 1, 128, s, "one token, MHA"},
      {1, 4, 128, s, "one token, GQA packed 4"},
      {32, 4, 128, s, "32 queries x 4 heads: 128 rows, one tile"},
      {33, 4, 128, p, "33 queries x 4 heads: two tiles"},
      {64, 2, 128, s, "the Python short kernel's planned shape"},
      {128, 1, 128, s, "one full tile"},
      {129, 1, 128, p, "two tiles"},
      {4096, 1, 128, p, "prefill"},
      {1, 1, 128, s, "ragged queries, one each: seqlen_q is the longest sequence's"},
      {300, 1, 128, p, "ragged queries up to 300"},
      {64, 1, 64, s, "BM 64, one tile"},
      {1, 0, 128, s, "pack 0 (not packed) counts as 1"},
  };
  int bad = 0;
  for (const Case& c : cases) {
    const auto got = kv_l2_promotion(c.seqlen_q, c.pack, c.bm);
    const bool streamed = qattn::sm90::kv_streamed(c.seqlen_q, c.pack, c.bm);  // the evict-first loads, the same launches
    if (got != c.want || streamed != (c.want == s)) {
      std::printf("FAIL %s: seqlen_q %lld pack %d BM %d: promotion %d, want %d; streamed %d\n", c.what, c.seqlen_q, c.pack,
                  c.bm, int(got), int(c.want), int(streamed));
      ++bad;
    }
  }
  std::printf("launch rule: %d of %zu cases as expected\n", int(sizeof(cases) / sizeof(cases[0])) - bad,
              sizeof(cases) / sizeof(cases[0]));
  // a ragged launch's live tiles numbered densely -> the launch's tiles: in the launch's order, every
  // live tile once (sequences of 0 .. m_blocks live query tiles; heads, key parts, both orders)
  struct Dense {
    int heads, splits, m_blocks;
    bool reversed;
    std::vector<int> live;
  } dense[] = {{1, 1, 4, false, {1, 4, 0, 2}},   {3, 1, 4, true, {1, 4, 0, 2}},   {2, 3, 5, true, {5, 1, 3}},
               {2, 3, 5, false, {5, 1, 3}},      {8, 1, 16, true, {16, 1, 1, 9, 0}}, {1, 7, 1, true, {1, 0, 1}},
               {4, 2, 32, true, std::vector<int>(40, 1)}};
  int dense_bad = 0;
  for (const Dense& c : dense) {
    std::vector<int> want;  // the launch's tiles whose query tile lies within its sequence's live ones
    const int batch = int(c.live.size());
    for (int t = 0; t < batch * c.splits * c.heads * c.m_blocks; ++t) {
      const int i = t % c.m_blocks, m_block = c.reversed ? c.m_blocks - 1 - i : i, b = t / (c.m_blocks * c.heads * c.splits);
      if (m_block < c.live[b]) want.push_back(t);
    }
    std::vector<int> got;
    for (int b = 0; b < batch; ++b)
      for (int local = 0; local < c.live[b] * c.heads * c.splits; ++local)
        got.push_back(qattn::ragged_tile(b, local, c.live[b], c.heads, c.splits, c.m_blocks, c.reversed));
    if (got != want) {
      std::printf("FAIL ragged_tile (heads %d, splits %d, m_blocks %d, reversed %d): %zu tiles, want %zu\n", c.heads, c.splits,
                  c.m_blocks, int(c.reversed), got.size(), want.size());
      ++dense_bad;
    }
  }
  std::printf("dense tiles: %d of %zu cases as expected\n", int(sizeof(dense) / sizeof(dense[0])) - dense_bad, sizeof(dense) / sizeof(dense[0]));
  bad += dense_bad;
  struct Split {
    int splits;
    bool kernel, lse;
    int want;
  } splits[] = {{0, false, true, QATTN_OK},        {1, false, true, QATTN_OK},     {2, false, true, QATTN_ERR_ARG},
                {0, true, true, QATTN_OK},         {16, true, true, QATTN_OK},     {65535, true, true, QATTN_OK},
                {65536, true, true, QATTN_ERR_ARG}, {-1, true, true, QATTN_ERR_ARG}, {4, true, false, QATTN_ERR_SHAPE}};
  int split_bad = 0;
  for (const Split& c : splits) {
    const int got = check_splits(c.splits, c.kernel, c.lse);
    if (got != c.want) {
      std::printf("FAIL splits %d (split kernel %d, lse %d): status %d, want %d\n", c.splits, int(c.kernel), int(c.lse), got, c.want);
      ++split_bad;
    }
  }
  std::printf("ABI 8 splits: %d of %zu cases as expected\n", int(sizeof(splits) / sizeof(splits[0])) - split_bad,
              sizeof(splits) / sizeof(splits[0]));
  // The grid checks: check_grid (3-D launches: y and z at most 65535), check_tiles (sm90's 1-D launch
  // over the Grid's points: batch x splits past 65535 is fine)
  int grid_bad = 0;
  bool empty = false;
  grid_bad += qattn::host::check_grid(1, 8, 70000, &empty) != QATTN_ERR_SHAPE;
  grid_bad += qattn::host::check_tiles(1, 8, 70000, &empty) != QATTN_OK || empty;
  grid_bad += qattn::host::check_tiles(1, 8, 0, &empty) != QATTN_OK || !empty;
  grid_bad += qattn::host::check_grid(4, 8, 65535, &empty) != QATTN_OK || empty;
  std::printf("grid: %d of 4 cases as expected\n", 4 - grid_bad);
  // TL integer arithmetic (device/qattn/intmath.cuh) on the host: floor `/` and `%`, cdiv against
  // exact floor / ceil (the GPU side: tests/gpu/intmath_check.cu)
  int int_bad = 0, int_cases = 0;
  for (int a = -700; a <= 700; ++a)
    for (int b : {-9, -3, -1, 1, 2, 7, 64, 128, 176}) {
      ++int_cases;
      const long long f = (long long)std::floor((long double)a / b), c = (long long)std::ceil((long double)a / b);
      if (qattn::floordiv(a, b) != f || qattn::floormod(a, b) != a - f * b || qattn::cdiv(a, b) != c) {
        if (int_bad++ < 5)
          std::printf("FAIL intmath a %d b %d: floordiv %d cdiv %d, want %lld %lld\n", a, b, qattn::floordiv(a, b),
                      qattn::cdiv(a, b), f, c);
      }
    }
  std::printf("intmath: %d of %d cases as expected\n", int_cases - int_bad, int_cases);
  return bad || split_bad || int_bad || grid_bad ? 1 : 0;
}
