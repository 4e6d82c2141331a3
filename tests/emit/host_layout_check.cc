// Host-side check of the device runtime's layout algebra (built and run by emit_compile_test with
// the host compiler and the CuTe headers; no GPU). For every architecture lowering:
//  1. the TL Reshape: the accumulator fragment re-viewed by acc_to_a_* holds, at each A-operand
//     position (m, k), the accumulator element (m, k) (sm89: (m, fp8_key_of_logical(k)), the key
//     order V^T is stored in);
//  2. acc_rowcol: mode 0 of the row view walks rows (one row per index, all columns of it);
//  3. the GEMM loops of gemm.cuh: ldmatrix block c of a retiled fragment covers exactly MMA k-blocks
//     R*c .. R*c+R-1;
//  4. the lane exchange of qattn::sm90::add_acc_global_v4 (sm90/backward.cuh) on the backward's wgmma
//     accumulators: each lane of a quad pair adds four consecutive columns of one row from a multiple
//     of 4, and every element of the tile is added once;
//  5. the stage of qattn::sm90::stage_acc (add_acc_global_tma's fp32, store_acc_global_tma's 16-bit
//     elements) on the same accumulators: each value pair's shared address as the kernel forms it
//     (16 / E bases from qattn::tma_stage_offset plus constants) is the pair's place in the swizzled
//     boxes, every element is staged once, and each warpgroup's first thread issues exactly the boxes
//     its warpgroup wrote.
//  6. store_acc_smem_pairs (backward.cuh): each value pair (v, v + 1) of an accumulator fragment is two
//     neighbouring columns of one row, and in the swizzled 16-bit smem_layout (both atoms) the two
//     elements are side by side from an even element: one aligned 32-bit store.
// Prints one line per check and exits non-zero on any mismatch.
#include <cstdio>
#include <map>
#include <set>
#include <vector>

#include <cute/tensor.hpp>

#include "qattn/layout.cuh"

using namespace cute;

template <class Atom, int TK, class Reshape>
int check_reshape(const char* name, Reshape reshape, bool permuted) {
  using TiledMma = TiledMMA<MMA_Atom<Atom>, Layout<Shape<_4, _1, _1>>, Tile<_64, _16, Int<TK>>>;
  TiledMma mma;
  int bad = 0;
  for (int t = 0; t < 128; ++t) {
    auto thr = mma.get_slice(t);
    auto cC = thr.partition_C(make_identity_tensor(Shape<_128, _64>{}));
    auto cA = thr.partition_A(make_identity_tensor(Shape<_128, _64>{}));
    auto cCa = make_tensor(cC.data(), reshape(cC.layout()));
    if (size(cCa) != size(cA)) return 1000;
    for (int i = 0; i < size(cA); ++i) {
      int k = get<1>(cA(i));
      if (permuted) k = qattn::fp8_key_of_logical(k);
      if (get<0>(cA(i)) != get<0>(cCa(i)) || k != get<1>(cCa(i))) ++bad;
    }
    auto rc = make_tensor(cC.data(), qattn::acc_rowcol(cC.layout()));
    for (int r = 0; r < size<0>(rc); ++r)
      for (int c = 0; c < size<1>(rc); ++c)
        if (get<0>(rc(r, c)) != get<0>(rc(r, 0))) ++bad;
  }
  std::printf("reshape %s: %d mismatches\n", name, bad);
  return bad;
}

template <class Atom, int TK, class T, class CopyA, class CopyB, int M, int N, int K>
int check_k_blocks(const char* name) {
  using TiledMma = TiledMMA<MMA_Atom<Atom>, Layout<Shape<_4, _1, _1>>, Tile<_64, _16, Int<TK>>>;
  TiledMma mma;
  int bad = 0;
  auto sA = make_tensor(make_gmem_ptr(static_cast<T*>(nullptr)), make_layout(Shape<Int<M>, Int<K>>{}, GenRowMajor{}));
  auto sB = make_tensor(make_gmem_ptr(static_cast<T*>(nullptr)), make_layout(Shape<Int<N>, Int<K>>{}, GenRowMajor{}));
  for (int t = 0; t < 128; ++t) {
    auto thr = mma.get_slice(t);
    auto fA = thr.partition_fragment_A(sA);
    auto fB = thr.partition_fragment_B(sB);
    auto vA = make_tiled_copy_A(Copy_Atom<CopyA, T>{}, mma).get_thread_slice(t).retile_D(fA);
    auto vB = make_tiled_copy_B(Copy_Atom<CopyB, T>{}, mma).get_thread_slice(t).retile_D(fB);
    auto same = [&](auto& frag, auto& view) {
      const int km = size<2>(frag), kc = size<2>(view);
      if (km % kc) return 1;
      int b = 0;
      for (int c = 0; c < kc; ++c) {
        std::set<long> a, m;
        for (int i = 0; i < size(view(_, _, c)); ++i) a.insert(long(&view(_, _, c)(i) - &frag(0)));
        for (int r = 0; r < km / kc; ++r)
          for (int i = 0; i < size(frag(_, _, c * (km / kc) + r)); ++i) m.insert(long(&frag(_, _, c * (km / kc) + r)(i) - &frag(0)));
        if (a != m) ++b;
      }
      return b;
    };
    bad += same(fA, vA) + same(fB, vB);
  }
  std::printf("k-blocks %s: %d mismatches\n", name, bad);
  return bad;
}

// The backward's register tiles in wgmma mode, as src/backend/bwd/abi.cc writes them (8 warps):
// Mma<R> 16-row warps along M, MmaCols<R, C, WGN> the warpgroups side by side along N.
namespace bwd {
constexpr int kWarps = 8;
template <int R, int WM = (R / 16 < kWarps ? R / 16 : kWarps)>
using Mma = TiledMMA<MMA_Atom<SM80_16x8x16_F32BF16BF16F32_TN>, Layout<Shape<Int<WM>, Int<kWarps / WM>, _1>>,
                     Tile<Int<16 * WM>, Int<16 * (kWarps / WM)>, _16>>;
template <int R, int C, int WGN>
using MmaCols = TiledMMA<MMA_Atom<SM80_16x8x16_F32BF16BF16F32_TN>, Layout<Shape<Int<kWarps / WGN>, Int<WGN>, _1>>,
                         Tile<Int<R>, Layout<Shape<_8, Int<WGN>, Int<C / (8 * WGN)>>, Stride<_1, Int<C / WGN>, _8>>, _16>>;
}  // namespace bwd

// add_acc_global_v4's exchange for the block pair jp and row half h: an even lane adds its pair
// v0 = 8 jp + 2 h then lane ^ 1's pair v0; an odd lane lane ^ 1's pair v1 = v0 + 4 then its own.
template <class TiledMma, int M, int N>
int check_v4_exchange(const char* name) {
  TiledMma mma;
  std::vector<int> seen(M * N, 0);
  int bad = 0;
  for (int t = 0; t < int(size(mma)); ++t) {
    auto c = mma.get_slice(t).partition_C(make_identity_tensor(Shape<Int<M>, Int<N>>{}));
    auto p = mma.get_slice(t ^ 1).partition_C(make_identity_tensor(Shape<Int<M>, Int<N>>{}));
    if (size<0>(c) != 4 || size<1>(c) != 1 || size<2>(c) % 2 != 0) {  // add_acc_global_v4's condition
      std::printf("v4 %s: fragment %d x %d x %d is not the wgmma layout\n", name, int(size<0>(c)), int(size<1>(c)), int(size<2>(c)));
      return 1;
    }
    for (int jp = 0; jp < int(size(c)) / 8; ++jp)
      for (int h = 0; h < 2; ++h) {
        const int v0 = 8 * jp + 2 * h, v1 = v0 + 4;
        const bool odd = t & 1;
        const int row[4] = {odd ? int(get<0>(p(v1))) : int(get<0>(c(v0))), odd ? int(get<0>(p(v1 + 1))) : int(get<0>(c(v0 + 1))),
                            odd ? int(get<0>(c(v1))) : int(get<0>(p(v0))), odd ? int(get<0>(c(v1 + 1))) : int(get<0>(p(v0 + 1)))};
        const int col[4] = {odd ? int(get<1>(p(v1))) : int(get<1>(c(v0))), odd ? int(get<1>(p(v1 + 1))) : int(get<1>(c(v0 + 1))),
                            odd ? int(get<1>(c(v1))) : int(get<1>(p(v0))), odd ? int(get<1>(c(v1 + 1))) : int(get<1>(p(v0 + 1)))};
        // the kernel's address: the kept pair's column, two before it for an odd lane
        const int at = odd ? int(get<1>(c(v1))) - 2 : int(get<1>(c(v0)));
        if (at % 4 != 0 || col[0] != at) ++bad;
        for (int k = 0; k < 4; ++k) {
          if (row[k] != row[0] || col[k] != at + k) ++bad;
          if (row[k] >= 0 && row[k] < M && col[k] >= 0 && col[k] < N) ++seen[row[k] * N + col[k]];
        }
      }
  }
  for (int n : seen)
    if (n != 1) ++bad;
  std::printf("v4 %s: %d mismatches\n", name, bad);
  return bad;
}

// stage_acc's stage of E-byte elements (threads of 2 warpgroups; boxes of W = 128 / E columns): the
// kernel's address of pair v, at[blk % (16 / E)] + (blk / (16 / E)) 8192 + half 1024 with at[j] =
// tma_stage_offset<N, E>(r, c, 4 j), against the canonical place of (row, col) in the swizzled boxes;
// each 8 KB box written by one warpgroup only, whose first thread issues boxes (r0 / 64) (N / W) +
// c0 / W + k, k < 2 kN / W.
template <class TiledMma, int M, int N, int E = 4, bool XOR2 = false>
int check_tma_stage(const char* name) {
  constexpr int W = 128 / E, kBlocks = 16 / E;
  TiledMma mma;
  std::vector<int> seen(M * N, 0), box_wg((M / 64) * (N / W), -1), issued((M / 64) * (N / W), -1);
  std::map<std::pair<int, int>, std::set<int>> chunks;  // (half warp, store) -> the 16-byte bank groups its lanes hit
  int bad = 0;
  auto canonical = [](int row, int col) {
    return ((row / 64) * (N / W) + col / W) * 8192 + (row % 64) * 128 + ((((col % W) * E / 16) ^ (row % 8)) * 16) + (col * E) % 16;
  };
  for (int t = 0; t < int(size(mma)); ++t) {
    auto tc = mma.get_slice(t).partition_C(make_identity_tensor(Shape<Int<M>, Int<N>>{}));
    const int kN = int(size(tc)), r = get<0>(tc(0)), c = get<1>(tc(0));
    if (size<0>(tc) != 4 || size<1>(tc) != 1 || (2 * kN) % W != 0) {
      std::printf("tma stage %s: fragment is not the wgmma layout\n", name);
      return 1;
    }
    const bool odd = XOR2 && (r & 1);  // (stage_acc's XOR2: an odd row's thread stores pair v ^ 8 at block blk ^ 2's base)
    for (int v = 0; v < kN; v += 2) {
      const int blk = v / 4, half = (v / 2) % 2, u = odd ? v ^ 8 : v;
      const int at = qattn::tma_stage_offset<N, E>(r, c, 4 * ((blk % kBlocks) ^ (odd ? 2 : 0))) + (blk / kBlocks) * 8192 + half * 1024;
      const int row = int(get<0>(tc(u))), col = int(get<1>(tc(u)));
      if (int(get<0>(tc(u + 1))) != row || int(get<1>(tc(u + 1))) != col + 1 || col % 2 != 0) ++bad;
      if (at != canonical(row, col) || at != qattn::tma_stage_offset<N, E>(r, c, u)) ++bad;
      chunks[{t / 16, v}].insert((at % 128) / 16);
      for (int e = 0; e < 2; ++e) ++seen[row * N + col + e];
      int& owner = box_wg[at / 8192];
      if (owner == -1) owner = t / 128;
      if (owner != t / 128) ++bad;
    }
    if (t % 128 == 0)
      for (int k = 0; k < 2 * kN / W; ++k) {
        const int b = (r / 64) * (N / W) + c / W + k;
        if (b >= int(issued.size()) || issued[b] != -1) {
          ++bad;
          continue;
        }
        issued[b] = t / 128;
      }
  }
  for (int n : seen)
    if (n != 1) ++bad;
  for (size_t b = 0; b < issued.size(); ++b)
    if (issued[b] != box_wg[b]) ++bad;
  // a half warp's 16 lanes store 8 bytes (fp32) or a warp's 32 lanes 4 bytes (16-bit): 128 bytes, one
  // wavefront when they cover the 8 bank groups once; XOR2 must make every fp32 store conflict-free
  int conflicted = 0;
  for (const auto& [key, groups] : chunks) conflicted += int(groups.size()) < (E == 4 ? 8 : 4);
  if (XOR2 && conflicted) bad += conflicted;
  std::printf("tma stage %s: %d mismatches, %d of %d half-warp stores with bank conflicts\n", name, bad, conflicted, int(chunks.size()));
  return bad;
}

template <class TiledMma, int M, int N, int ATOM>
int check_smem_pairs(const char* name) {
  TiledMma mma;
  const auto sl = qattn::smem_layout<bfloat16_t, M, N, ATOM>();
  std::vector<int> seen(M * N, 0);
  int bad = 0;
  for (int t = 0; t < int(size(mma)); ++t) {
    auto tc = mma.get_slice(t).partition_C(make_identity_tensor(Shape<Int<M>, Int<N>>{}));
    if (int(size<0>(tc)) % 2 != 0) return 1000;
    for (int v = 0; v < int(size(tc)); v += 2) {
      const int r = int(get<0>(tc(v))), c = int(get<1>(tc(v)));
      const int at = int(sl(r, c)), at1 = int(sl(int(get<0>(tc(v + 1))), int(get<1>(tc(v + 1)))));
      if (int(get<0>(tc(v + 1))) != r || int(get<1>(tc(v + 1))) != c + 1 || at % 2 != 0 || at1 != at + 1) ++bad;
      ++seen[at], ++seen[at1];
    }
  }
  for (int x : seen) bad += x != 1;
  std::printf("smem pairs %s: %d mismatches\n", name, bad);
  return bad;
}

int main() {
  int bad = 0;
  bad += check_reshape<SM80_16x8x16_F32BF16BF16F32_TN, 16>("sm80 m16n8k16", [](auto l) { return qattn::acc_to_a_m16n8k16(l); }, false);
  bad += check_reshape<SM75_16x8x8_F32F16F16F32_TN, 16>("sm75 m16n8k8", [](auto l) { return qattn::acc_to_a_m16n8k8(l); }, false);
  bad += check_reshape<SM89_16x8x32_F32E4M3E4M3F32_TN, 32>("sm89 m16n8k32", [](auto l) { return qattn::acc_to_a_m16n8k32(l); }, true);
  bad += check_k_blocks<SM80_16x8x16_F32BF16BF16F32_TN, 16, bfloat16_t, SM75_U32x4_LDSM_N, SM75_U32x4_LDSM_N, 128, 64, 128>("sm80 Q K^T");
  bad += check_k_blocks<SM80_16x8x16_F32BF16BF16F32_TN, 16, bfloat16_t, SM75_U32x4_LDSM_N, SM75_U16x8_LDSM_T, 128, 128, 64>("sm80 P V");
  bad += check_k_blocks<SM75_16x8x8_F32F16F16F32_TN, 16, half_t, SM75_U32x4_LDSM_N, SM75_U32x4_LDSM_N, 64, 64, 128>("sm75 Q K^T");
  bad += check_k_blocks<SM75_16x8x8_F32F16F16F32_TN, 16, half_t, SM75_U32x4_LDSM_N, SM75_U16x8_LDSM_T, 64, 128, 64>("sm75 P V");
  bad += check_k_blocks<SM89_16x8x32_F32E4M3E4M3F32_TN, 32, float_e4m3_t, SM75_U32x4_LDSM_N, SM75_U32x4_LDSM_N, 128, 64, 128>("sm89 Q K^T");
  bad += check_k_blocks<SM89_16x8x32_F32E4M3E4M3F32_TN, 32, float_e4m3_t, SM75_U32x4_LDSM_N, SM75_U32x4_LDSM_N, 128, 128, 64>("sm89 P V^T");
  bad += check_v4_exchange<bwd::Mma<128>, 128, 64>("d64 dQ: Mma<128> (128, 64)");
  bad += check_v4_exchange<bwd::Mma<128>, 128, 128>("dK / dV: Mma<128> (128, 128)");
  bad += check_v4_exchange<bwd::Mma<128>, 128, 192>("MLA dK: Mma<128> (128, 192)");
  bad += check_v4_exchange<bwd::MmaCols<64, 128, 2>, 64, 128>("d128 dQ: MmaCols<64, 128, 2>");
  bad += check_v4_exchange<bwd::MmaCols<64, 192, 2>, 64, 192>("d192 / MLA dQ: MmaCols<64, 192, 2>");
  bad += check_v4_exchange<bwd::MmaCols<64, 256, 2>, 64, 256>("d256 dQ, dK: MmaCols<64, 256, 2>");
  bad += check_tma_stage<bwd::Mma<128>, 128, 64>("d64 dQ: Mma<128> (128, 64)");
  bad += check_tma_stage<bwd::MmaCols<64, 128, 2>, 64, 128>("d128 dQ: MmaCols<64, 128, 2>");
  bad += check_tma_stage<bwd::MmaCols<64, 192, 2>, 64, 192>("d192 / MLA dQ: MmaCols<64, 192, 2>");
  bad += check_tma_stage<bwd::MmaCols<64, 256, 2>, 64, 256>("d256 dQ: MmaCols<64, 256, 2>");
  bad += check_tma_stage<bwd::Mma<128>, 128, 128>("GQA fp32 dK / dV: Mma<128> (128, 128)");
  bad += check_tma_stage<bwd::MmaCols<64, 128, 2>, 64, 128, 4, true>("d128 dQ, XOR2: MmaCols<64, 128, 2>");
  bad += check_tma_stage<bwd::Mma<128>, 128, 64, 4, true>("d64 dQ, XOR2: Mma<128> (128, 64)");
  bad += check_tma_stage<bwd::Mma<128>, 128, 128, 2>("16-bit dK / dV: Mma<128> (128, 128)");
  bad += check_tma_stage<bwd::Mma<128>, 128, 64, 2>("d64 16-bit dK / dV: Mma<128> (128, 64)");
  bad += check_tma_stage<bwd::MmaCols<64, 256, 2>, 64, 256, 2>("d256 16-bit dK / dV: MmaCols<64, 256, 2>");
  bad += check_smem_pairs<bwd::Mma<128>, 128, 64, 64>("d128 dS^T: Mma<128> (128, 64)");
  bad += check_smem_pairs<bwd::Mma<128>, 128, 128, 64>("d64 dS^T: Mma<128> (128, 128)");
  bad += check_smem_pairs<bwd::Mma<128>, 128, 64, 32>("64-byte swizzle: Mma<128> (128, 64)");
  bad += check_smem_pairs<bwd::MmaCols<64, 64, 2>, 64, 64, 64>("d256 P: MmaCols<64, 64, 2>");
  bad += check_smem_pairs<bwd::Mma<64, 4>, 64, 64, 64>("sm80 dS: Mma<64, 4> (64, 64)");
  return bad != 0;
}
