// qattn device runtime, Hopper (sm90a): TL `Role consumer warpgroups NW ... split columns`.
// The NW consumer warpgroups share every row of a 64-row query tile (DeepSeek's absorbed MLA decode:
// 128 query heads of d_qk 576 over one latent KV cache whose first 512 columns are V, an O of 64 x
// 512 fp32 that one warpgroup cannot hold): warpgroup cw computes key columns [cw BN / NW, ...) of
// the score tile and columns [cw DV / NW, ...) of O. What crosses the warpgroups goes through
// shared memory, ordered by one named barrier of all their threads (kBarSplit):
//   combine_rows  a row vector (RowMax: the running maximum; the row sums at the end) combined over
//                 the warpgroups
//   store_p       TL `Copy Pc from register to shared`: this warpgroup's columns of P into the
//                 swizzled (64, BN) tile that the second GEMM reads whole
//   gemm_ss_mn    TL `Compute GEMM Pc, V and accumulate O` with V a view of K's slot (`{view: K}`):
//                 A = the P tile (K-major), B = the view's columns [col0, col0 + N) read MN-major
//   store_o_split TL `Copy O ...`: each warpgroup stages its columns, one thread stores the tile
// Every warpgroup runs the same sequence of these (the rows, the key tiles and the TL statements are
// the same for all), so the barriers pair up.
#pragma once
#include <cstdint>

#include "qattn/sm90/ptx.cuh"
#include "qattn/sm90/score.cuh"
#include "qattn/sm90/sync.cuh"
#include "qattn/sm90/tile.cuh"
#include "qattn/sm90/tma.cuh"
#include "qattn/sm90/wgmma.cuh"

namespace qattn::sm90 {

// The row vector x (this thread's rows r and r + 8) combined with the other warpgroups' values of the
// same rows: the quad's first thread writes both to its warpgroup's slice of the exchange, all meet at
// the barrier, each reads the others'. `turn` alternates the exchange's two halves, so the next
// combine's writes never meet this one's reads (a warpgroup writes half t only after every warpgroup
// passed the barrier of the combine before, after its reads of half t).
template <class Op, int NW, bool P>
__device__ __forceinline__ void combine_rows(float (&x)[2], float* xchg, int& turn, const RowMap<P>& rows, int cw) {
  float* half = xchg + (turn & 1) * NW * 64;  // the kernel's exchange holds 2 x NW x 64 floats
  if (rows.c == 0) {
    half[cw * 64 + rows.r] = x[0];
    half[cw * 64 + rows.r + 8] = x[1];
  }
  ptx::bar_sync(kBarSplit, 128 * NW);
#pragma unroll
  for (int w = 0; w < NW; ++w)
    if (w != cw)
#pragma unroll
      for (int h = 0; h < 2; ++h) x[h] = Op{}(x[h], half[w * 64 + rows.r + 8 * h]);
  ++turn;
}

// This warpgroup's converted columns [col0, col0 + 2 NP) of P (the register-A layout of a 64-row
// wgmma: register 2 i + h holds row r + 8 h, columns 8 i + 2 c and + 1) into the swizzled (64, BN)
// tile; then every warpgroup's columns are there (the barrier) and visible to wgmma (the fence).
// kBarrierFirst (a pipelined loop, TL {overlap}: another warpgroup's P V GEMM of the previous key tile
// may still read the tile): the warpgroups meet before the stores too (each has waited for its own).
template <int BN, int NW, bool kBarrierFirst = false, int NP, bool P, class Element>
__device__ __forceinline__ void store_p(const uint32_t (&pc)[NP], Element* sP, int col0, const RowMap<P>& rows) {
  static_assert(4 * NP * NW == BN, "P: NW slices of the (64, BN) tile, 2 columns of 2 rows per register pair");
  if constexpr (kBarrierFirst) ptx::bar_sync(kBarSplit, 128 * NW);
  unsigned char* s = reinterpret_cast<unsigned char*>(sP);
#pragma unroll
  for (int i = 0; i < NP / 2; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      *reinterpret_cast<uint32_t*>(s + swizzled_offset<64>(rows.r + 8 * h, col0 + 8 * i + 2 * rows.c, 2)) = pc[2 * i + h];
  ptx::fence_async_shared();  // generic-proxy writes -> visible to wgmma (the async proxy)
  ptx::bar_sync(kBarSplit, 128 * NW);
}

// O(64 x N) += P(64 x K_DIM) V[:, col0 .. col0 + N): A a (64, K_DIM) tile read K-major, B a view of a
// (B_ROWS = K_DIM, cols) slot read MN-major from column col0 (a multiple of 64). One commit group.
template <class Atom, int K_DIM, class Element, int N>
__device__ __forceinline__ void gemm_ss_mn(const Element* a, const Element* b, int col0, float (&acc)[N]) {
  fence_regs(acc);
  wgmma_fence();
  const uint64_t da0 = operand_desc<false, 64>(a, 0), db0 = operand_desc<true, K_DIM>(b, col0);
#pragma unroll
  for (int k = 0; k < K_DIM / 16; ++k) {
    const uint64_t da = da0 + operand_step<false, 64, Element>(k), db = db0 + operand_step<true, K_DIM, Element>(k);
    Atom::ss(da, db, acc, true);
  }
  wgmma_commit();
}

// TL `Copy O (BM, d_v) ... from register to global`: this warpgroup's columns [cw DV / NW, ...) of the
// 64 rows, converted, into the staging tile (Q's rows: the block has read Q for the last time); when
// every warpgroup's are there, thread 0 of warpgroup 0 stores the tile by TMA and waits until the copy
// engine has read it (the caller's release of Q, which the producer's next load of Q waits for,
// follows).
template <int DV, int NW, bool kBf16, bool kPack, int N, class Element>
__device__ __forceinline__ void store_o_split(const float (&o)[N], Element* sO, const RowMap<kPack>& rows, int tid, int cw,
                                              const CUtensorMap* map, int head, int batch) {
  static_assert(N * NW == DV / 2, "O: NW column slices of a (64, DV) tile");
  unsigned char* so = reinterpret_cast<unsigned char*>(sO);
  const int col0 = cw * (DV / NW);
#pragma unroll
  for (int i = 0; i < N / 4; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      *reinterpret_cast<uint32_t*>(so + swizzled_offset<64>(rows.r + 8 * h, col0 + 8 * i + 2 * rows.c, 2)) =
          pack2<kBf16>(o[4 * i + 2 * h], o[4 * i + 2 * h + 1]);
  ptx::fence_async_shared();  // generic-proxy writes -> visible to the copy engine
  ptx::bar_sync(kBarSplit, 128 * NW);
  if (cw == 0 && tid == 0) {
    if constexpr (kPack) tma_store_packed<64, DV>(map, sO, 0, rows.tile_row0, head, batch, rows.pack);
    else tma_store_rows<64, DV>(map, sO, 0, rows.tile_row0, head, batch);
    ptx::tma_store_wait<0>();
  }
}

}  // namespace qattn::sm90
