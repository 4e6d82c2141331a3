// qattn device runtime, Hopper (sm90a): the warp-specialised forward kernel the sm90 translation
// instantiates (src/backend/emit_sm90.cc writes the Traits from the TL program; docs/translation.md
// maps every TL statement to the piece of this file that implements it).
//
//   Role producer (warpgroup 0, setmaxnreg down): one thread issues the TMA copies: Q once, then
//       K and V of every KV tile into the STAGES-deep rings (sync.cuh), tiles in descending order so
//       the masked diagonal tiles come first.
//   Role consumer (warpgroups 1..C, setmaxnreg up): each owns 64 query rows; per KV tile
//       S = Q K^T (wgmma, shared x shared), mask, online softmax in registers, P converted in
//       place to the A operand of O += P V (wgmma, registers x shared).
//   {overlap} on the loop: the GEMM of tile j+1 is issued before the softmax of tile j, and P V of
//       tile j runs while the softmax of tile j+1 computes (FA3's intra-warpgroup overlap).
//   pingpong: two consumer warpgroups take turns issuing their GEMMs (sync.cuh, Pingpong).
//   Epilogue: O normalised, converted, staged in shared memory (its own tile, or this warpgroup's
//       rows of the Q tile) and stored with TMA; LSE from registers.
//   Grid {persistent}: one block per SM; the producer warp takes tiles from a global counter and
//       hands them to the consumers (sync.cuh, TileExchange: mbarriers, so the two consumer
//       warpgroups keep their ping-pong offset across tile boundaries).
//   {pack: heads_q / heads_kv} (T::kPackGqa, GQA packing): a tile's rows are (query, head) pairs of
//       one kv head's query heads; Q and O move through 5-D TMA maps (tma.cuh), the masks and LSE
//       map a row to its query (row / pack) and head.
//   Score / Mask declarations (variants): the Traits' Scope binds the TL names of a work tile;
//       Scope::modify runs the score statements, keep / tile_needs_mask the masks, visible the
//       loop's {skip} (prev_tile: skipped key tiles are neither loaded nor computed).
#pragma once
#include <cmath>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cute/arch/copy_sm90_desc.hpp>
#include <cute/arch/copy_sm90_tma.hpp>

#include "qattn/sm90/sync.cuh"
#include "qattn/sm90/tma.cuh"
#include "qattn/sm90/wgmma.cuh"

namespace qattn::sm90 {

// Kernel parameters (passed by value as a __grid_constant__: the tensor maps must stay in
// parameter space for TMA).
struct Params {
  CUtensorMap tma_q, tma_k, tma_v, tma_o;
  float* lse;                 // (batch, heads_q, seqlen_q) or nullptr
  int seqlen_q, seqlen_k, heads_q, group;  // group = heads_q / heads_kv
  int heads_kv, batch;
  int pack;                   // TL {pack}: query heads per tile group (T::kPackGqa; 1 otherwise)
  float scale_log2;           // the TL Multiply factors of S after its last Modify, folded into Exp2
  float scale;                // scale_log2 * ln 2: the natural-log factor of the row max (LSE)
  float softmax_scale;        // TL builtin softmax_scale (Score declarations, Multiply factors)
  int window_left, window_right;
  int num_tiles;              // the TL Grid's points (m_block, head, batch); the launch has <= this many blocks
  int* tile_counter;          // persistent: the next-tile counter (0 at launch; the last fetch resets it)
  const void* aux[4];
};

template <bool kBf16>
__device__ __forceinline__ uint32_t pack2(float a, float b) {
  if constexpr (kBf16) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&h);
  } else {
    __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&h);
  }
}

// Quad reductions: the 4 threads of an accumulator row.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffff, x, 1);
  return x + __shfl_xor_sync(0xffffffff, x, 2);
}

// Calls f(x, q, k) for every element x (a reference) of this thread's part of a (64, BN) score
// tile in the wgmma accumulator layout: qa and qb are the query indices of the thread's two rows
// (rows r and r + 8; qb = qa + 8 unless the tile packs heads), col0 the tile's first key index, c
// the thread's column pair within each 8-column group.
template <int NS, class F>
__device__ __forceinline__ void for_each_score(float (&s)[NS], int qa, int qb, int col0, int c, F&& f) {
#pragma unroll
  for (int i = 0; i < NS / 4; ++i) {
    const int k = col0 + 8 * i + 2 * c;
#pragma unroll
    for (int e = 0; e < 4; ++e) f(s[4 * i + e], e >= 2 ? qb : qa, k + (e & 1));
  }
}

// TL `Compute Mask S at [m_block, j] with M` (the kernel's mask and every Mask declaration) on this
// thread's part of a (64, BN) score tile. v: the Traits' Scope of the work tile (the TL names).
template <class T, int NS>
__device__ __forceinline__ void mask_tile(float (&s)[NS], int qa, int qb, int col0, int c, typename T::Scope const& v) {
  for_each_score(s, qa, qb, col0, c, [&](float& x, int q, int k) {
    if (!v.keep(q, k)) x = -INFINITY;
  });
}

// The next key tile below n the loop visits ({skip: M}: tiles the Mask's `empty when` clause
// classifies as empty are neither loaded nor computed); < n_begin when there is none.
template <class T>
__device__ __forceinline__ int prev_tile(int n, int n_begin, typename T::Scope const& v) {
  do {
    --n;
  } while (n >= n_begin && !v.visible(n));
  return n;
}

// TL RowMax / Max / Subtract / Exp2 / RowSum / Rescale l / Add: the online softmax of one score
// tile in place (S becomes P, unnormalised). alpha receives the rescale factor of O per row. The
// row sums stay per-thread partial sums (the quad reduction happens once, in the epilogue).
template <bool kFirst, int NS>
__device__ __forceinline__ void online_softmax(float (&s)[NS], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                               float scale_log2) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = m[h];
#pragma unroll
    for (int i = 0; i < NS / 4; ++i) mx = fmaxf(mx, fmaxf(s[4 * i + 2 * h], s[4 * i + 2 * h + 1]));
    mx = quad_max(mx);
    const float ms = mx == -INFINITY ? 0.f : mx * scale_log2;
    alpha[h] = kFirst ? 1.f : exp2f(m[h] * scale_log2 - ms);
    m[h] = mx;
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < NS / 4; ++i) {
      s[4 * i + 2 * h] = exp2f(s[4 * i + 2 * h] * scale_log2 - ms);
      s[4 * i + 2 * h + 1] = exp2f(s[4 * i + 2 * h + 1] * scale_log2 - ms);
      sum += s[4 * i + 2 * h] + s[4 * i + 2 * h + 1];
    }
    l[h] = kFirst ? sum : l[h] * alpha[h] + sum;
  }
}

// TL `Compute Rescale O, alpha`.
template <int NO>
__device__ __forceinline__ void rescale(float (&o)[NO], float const (&alpha)[2]) {
#pragma unroll
  for (int i = 0; i < NO / 4; ++i) {
    o[4 * i + 0] *= alpha[0];
    o[4 * i + 1] *= alpha[0];
    o[4 * i + 2] *= alpha[1];
    o[4 * i + 3] *= alpha[1];
  }
}

// TL `Compute Convert P and get Pc` + `Reshape Pc from (MMA_C, ..) to (MMA_A, ..)`: the wgmma
// accumulator layout of P is the register-A layout of the next GEMM, two values per register.
template <bool kBf16, int NS>
__device__ __forceinline__ void convert_p(float const (&s)[NS], uint32_t (&pf)[NS / 2]) {
#pragma unroll
  for (int i = 0; i < NS / 2; ++i) pf[i] = pack2<kBf16>(s[2 * i], s[2 * i + 1]);
}

// Shared memory: Q tile, the K and V rings, the O staging tile of the epilogue (its own buffer when
// T::kSeparateO, else this warpgroup's rows of the Q tile), the mbarriers.
template <class T>
struct SmemPlan {
  using Element = typename T::Element;
  static constexpr int kDqkP = (T::kDqk + 63) / 64 * 64, kDvP = (T::kDv + 63) / 64 * 64;
  static constexpr int kQ = T::kBM * kDqkP;                  // elements
  static constexpr int kK = T::kBN * kDqkP, kV = T::kBN * kDvP;
  static constexpr int kO = T::kSeparateO ? T::kBM * kDvP : 0;
  static constexpr int kTileBytes = (kQ + T::kStages * (kK + kV) + kO) * int(sizeof(Element));
  static constexpr int kBarriers = 8 * (2 + 4 * T::kStages) + TileExchange<T::kConsumers>::kBytes;  // + the persistent tile exchange
  static constexpr int kBytes = 1024 /* alignment slack */ + kTileBytes + kBarriers;
};

// Block `t` of the 1-D grid -> (m_block, head, batch): m_block fastest, so the blocks running at
// the same time share one head's K and V in L2; causal: the longest rows first.
struct TileCoord {
  int m_block, head, batch;
};
template <class T>
__device__ __forceinline__ TileCoord tile_coord(int t, Params const& p) {
  // TL {pack}: m_block counts packed rows (pack per query) and `head` is the head group.
  const int pack = T::kPackGqa ? p.pack : 1;
  const int m_blocks = (p.seqlen_q * pack + T::kBM - 1) / T::kBM, heads = p.heads_q / pack;
  TileCoord c;
  c.m_block = t % m_blocks;
  if (T::kReverseM) c.m_block = m_blocks - 1 - c.m_block;
  t /= m_blocks;
  c.head = t % heads;
  c.batch = t / heads;
  return c;
}

// The kernel body; the generated __global__ (with __launch_bounds__(threads, 1), which setmaxnreg
// needs) calls it with its Traits. Block b runs the work tiles b, b + gridDim.x, ... (TL Grid
// `{persistent}`: one block per SM walks the tiles and the next tile's Q, K, V loads run under this
// tile's last GEMMs and epilogue; otherwise one block per tile and the loop runs once). The Q tile
// goes back to the producer when the last S = Q K^T is issued, unless the epilogue stages O in it
// (T::kSeparateO false, persistent): then after the TMA store has read it.
template <class T>
__device__ __forceinline__ void fwd_body(Params const& p) {
  using Element = typename T::Element;
  using Plan = SmemPlan<T>;
  constexpr int BM = T::kBM, BN = T::kBN, DQK = T::kDqk, DV = T::kDv, STAGES = T::kStages;
  constexpr int DQKP = Plan::kDqkP, DVP = Plan::kDvP;
  static_assert(BM == 64 * T::kConsumers, "each consumer warpgroup owns 64 query rows");
  static_assert(BN % 16 == 0 && BN <= 256 && DVP <= DQKP, "tile shape");

  extern __shared__ unsigned char smem_raw[];
  unsigned char* base = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  Element* sQ = reinterpret_cast<Element*>(base);
  Element* sK = sQ + Plan::kQ;
  Element* sV = sK + STAGES * Plan::kK;
  Element* sO = T::kSeparateO ? sV + STAGES * Plan::kV : sQ;
  constexpr bool kLateQ = T::kPersistent && !T::kSeparateO;        // Q released after the epilogue
  constexpr bool kDeferStoreWait = T::kPersistent && T::kSeparateO;  // see the epilogue
  uint64_t* bars = reinterpret_cast<uint64_t*>(base + Plan::kTileBytes);
  uint64_t* full_q = bars;
  uint64_t* empty_q = bars + 1;
  uint64_t* full_k = bars + 2;
  uint64_t* full_v = full_k + STAGES;
  uint64_t* empty_k = full_v + STAGES;
  uint64_t* empty_v = empty_k + STAGES;
  int* s_tile = reinterpret_cast<int*>(empty_v + STAGES);  // persistent: the tile-index slot (TileSlot)
  using TileSlot = TileExchange<T::kConsumers>;

  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    FullBarrier::init(full_q, 1);
    EmptyBarrier::init(empty_q, T::kConsumers);
    for (int s = 0; s < STAGES; ++s) {
      FullBarrier::init(&full_k[s], 1);
      FullBarrier::init(&full_v[s], 1);
      EmptyBarrier::init(&empty_k[s], T::kConsumers);
      EmptyBarrier::init(&empty_v[s], T::kConsumers);
    }
    if constexpr (T::kPersistent) TileSlot::init(s_tile);
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  if (wg == 0) {
    // ---- TL Role producer: the {async} Copies (warp 0 runs the loop, its lane 0 issues) ----
    cutlass::arch::warpgroup_reg_dealloc<T::kProducerRegs>();
    if (threadIdx.x < 32) {
      const bool leader = threadIdx.x == 0;
      if (leader) {
        cute::prefetch_tma_descriptor(&p.tma_q);
        cute::prefetch_tma_descriptor(&p.tma_k);
        cute::prefetch_tma_descriptor(&p.tma_v);
      }
      RingPos pos;
      uint32_t q_phase = 0;
      for (int t = int(blockIdx.x), k = 0;; ++k) {
        if (t >= p.num_tiles) {
          if constexpr (T::kPersistent) TileSlot::publish(s_tile, k, t, leader);  // no more tiles
          break;
        }
        const TileCoord tc = tile_coord<T>(t, p);
        const int kv_head = T::kPackGqa ? tc.head : tc.head / p.group;  // TL Let kv_head (packed: the Grid's head group)
        const typename T::Scope v(tc.m_block, tc.head, tc.batch, p);
        // TL for j = lo: hi (tiles outside are never loaded: causal / window skipping, {skip: M})
        const int n_begin = T::n_begin(tc.m_block, p), n_end = T::n_end(tc.m_block, p);
        // TL Copy Q (BM, d) in coordinate [m_block, 0] from global to shared {async}; when Q waits
        // for the previous tile's epilogue (kLateQ) it is issued after the tile's first K.
        bool q_issued = false, published = !T::kPersistent;
        const auto publish = [&] {
          if (!published) TileSlot::publish(s_tile, k, t, leader);
          published = true;
        };
        const auto load_q = [&] {
          EmptyBarrier::wait(empty_q, q_phase ^ 1u);
          if (leader) {
            FullBarrier::arrive_and_expect_tx(full_q, tile_bytes<BM, DQK, Element>());
            if constexpr (T::kPackGqa)
              tma_load_packed<BM, DQK>(&p.tma_q, full_q, sQ, tc.m_block * BM, tc.head, tc.batch, p.pack);
            else
              tma_load_tile<BM, DQK>(&p.tma_q, full_q, sQ, tc.m_block * BM, tc.head, tc.batch);
          }
          q_phase ^= 1u;
          q_issued = true;
        };
        if (!kLateQ) load_q();
        for (int n = prev_tile<T>(n_end, n_begin, v); n >= n_begin; n = prev_tile<T>(n, n_begin, v)) {
          // TL Copy K (BN, d) in coordinate [j, 0] from global to shared {async}: waits for the slot's release
          EmptyBarrier::wait(&empty_k[pos.slot], pos.phase ^ 1u);
          if (leader) {
            FullBarrier::arrive_and_expect_tx(&full_k[pos.slot], tile_bytes<BN, DQK, Element>());
            tma_load_tile<BN, DQK>(&p.tma_k, &full_k[pos.slot], sK + pos.slot * Plan::kK, n * BN, kv_head, tc.batch);
          }
          if (!q_issued) load_q();
          // TL Copy V (BN, d) in coordinate [j, 0] from global to shared {async}
          EmptyBarrier::wait(&empty_v[pos.slot], pos.phase ^ 1u);
          if (leader) {
            FullBarrier::arrive_and_expect_tx(&full_v[pos.slot], tile_bytes<BN, DV, Element>());
            tma_load_tile<BN, DV>(&p.tma_v, &full_v[pos.slot], sV + pos.slot * Plan::kV, n * BN, kv_head, tc.batch);
          }
          pos.advance(STAGES);
          publish();  // after the tile's first copies (no-op later)
        }
        if (!q_issued) load_q();  // no K/V tile (fully masked rows): the epilogue still runs
        publish();
        if constexpr (T::kPersistent) {
          // The next tile, first come first served (causal: the longest rows are handed out
          // first). The fetches of one launch number num_tiles; the last one resets the counter.
          int x = 0;
          if (leader) {
            x = atomicAdd(p.tile_counter, 1);
            if (x == p.num_tiles - 1) atomicExch(p.tile_counter, 0);
          }
          t = int(gridDim.x) + __shfl_sync(0xffffffffu, x, 0);
        } else {
          break;  // one block per tile
        }
      }
    }
    return;
  }

  // ---- TL Role consumer ----
  cutlass::arch::warpgroup_reg_alloc<T::kConsumerRegs>();
  using PP = Pingpong<T::kConsumers, T::kPingpong>;
  const int wgc = wg - 1, tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32, c = lane % 4;
  const int row_local = wgc * 64 + warp * 16 + lane / 4;  // this thread's first row in the Q tile
  const float sl2 = p.scale_log2;
  PP::start(wgc);
  RingPos pos, vpos;
  uint32_t q_phase = 0;
  for (int t = int(blockIdx.x), k = 0;; t = p.num_tiles, ++k) {
    if constexpr (T::kPersistent) t = TileSlot::receive(s_tile, k);  // the block's k-th tile
    if (t >= p.num_tiles) break;
    const TileCoord tc = tile_coord<T>(t, p);
    const int m_block = tc.m_block, head = tc.head, batch = tc.batch;
    const typename T::Scope v(m_block, head, batch, p);  // the TL names of this work tile
    const int n_begin = T::n_begin(m_block, p), n_end = T::n_end(m_block, p);
    const int q0 = m_block * BM + row_local;  // this thread's first row (the second is q0 + 8)
    const int wg_row0 = m_block * BM + wgc * 64;
    // The queries of the thread's two rows and of the warpgroup's 64 rows (TL {pack}: row r is query
    // r / pack of head group * pack + r % pack).
    // (Computed at each use: without packing they fold to the row indices and keep no register.)
    const int pk = T::kPackGqa ? p.pack : 1;
    const auto query = [&](int row) { return T::kPackGqa ? row / pk : row; };

    float o[DV / 2];  // TL Allocate O in register (BM, d) fp32 init 0
#pragma unroll
    for (int i = 0; i < DV / 2; ++i) o[i] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, alpha[2];  // TL m (init -inf), l (init 0)
    float s[BN / 2];
    uint32_t pf[BN / 4];

    FullBarrier::wait(full_q, q_phase);  // {wait: Q}
    q_phase ^= 1u;
    int n = prev_tile<T>(n_end, n_begin, v);
    if (n >= n_begin) {
      // First tile: S = Q K^T, softmax, P.
      FullBarrier::wait(&full_k[pos.slot], pos.phase);  // {wait: K}
      PP::wait_turn(wgc);
      fence_regs(s);
      wgmma_fence();
      gemm_ss<typename T::MmaQK, BM, BN, DQKP>(sQ, wgc * 64, sK + pos.slot * Plan::kK, s);
      wgmma_commit();
      PP::pass_turn(wgc);
      wgmma_wait<0>();
      fence_regs(s);
      if (tid == 0) EmptyBarrier::arrive(&empty_k[pos.slot]);  // {release: K}
      v.modify(s, query(q0), query(q0 + 8), n * BN, c);
      if (v.tile_needs_mask(query(wg_row0), query(wg_row0 + 63), n)) mask_tile<T>(s, query(q0), query(q0 + 8), n * BN, c, v);
      online_softmax<true>(s, m, l, alpha, sl2);
      convert_p<T::kBf16>(s, pf);
      vpos = pos;
      pos.advance(STAGES);
      for (n = prev_tile<T>(n, n_begin, v); n >= n_begin; n = prev_tile<T>(n, n_begin, v)) {
        if constexpr (T::kOverlap) {
          FullBarrier::wait(&full_k[pos.slot], pos.phase);
          PP::wait_turn(wgc);
          fence_regs(s);
          wgmma_fence();
          gemm_ss<typename T::MmaQK, BM, BN, DQKP>(sQ, wgc * 64, sK + pos.slot * Plan::kK, s);  // S(j+1)
          wgmma_commit();
          FullBarrier::wait(&full_v[vpos.slot], vpos.phase);
          fence_regs(o);
          fence_regs(pf);
          wgmma_fence();
          gemm_rs<typename T::MmaPV, BN, Element>(pf, sV + vpos.slot * Plan::kV, o);  // O += P(j) V(j)
          wgmma_commit();
          PP::pass_turn(wgc);
          wgmma_wait<1>();  // S(j+1) done; P V still running
          fence_regs(s);
          if (tid == 0) EmptyBarrier::arrive(&empty_k[pos.slot]);
          v.modify(s, query(q0), query(q0 + 8), n * BN, c);
          if (v.tile_needs_mask(query(wg_row0), query(wg_row0 + 63), n)) mask_tile<T>(s, query(q0), query(q0 + 8), n * BN, c, v);
          online_softmax<false>(s, m, l, alpha, sl2);
          wgmma_wait<0>();
          fence_regs(o);
          fence_regs(pf);
          if (tid == 0) EmptyBarrier::arrive(&empty_v[vpos.slot]);
          rescale(o, alpha);
          convert_p<T::kBf16>(s, pf);
        } else {
          // P V of the previous tile, then this tile's S: no overlap.
          FullBarrier::wait(&full_v[vpos.slot], vpos.phase);
          PP::wait_turn(wgc);
          fence_regs(o);
          wgmma_fence();
          gemm_rs<typename T::MmaPV, BN, Element>(pf, sV + vpos.slot * Plan::kV, o);
          wgmma_commit();
          wgmma_wait<0>();
          fence_regs(o);
          fence_regs(pf);
          if (tid == 0) EmptyBarrier::arrive(&empty_v[vpos.slot]);
          FullBarrier::wait(&full_k[pos.slot], pos.phase);
          fence_regs(s);
          wgmma_fence();
          gemm_ss<typename T::MmaQK, BM, BN, DQKP>(sQ, wgc * 64, sK + pos.slot * Plan::kK, s);
          wgmma_commit();
          PP::pass_turn(wgc);
          wgmma_wait<0>();
          fence_regs(s);
          if (tid == 0) EmptyBarrier::arrive(&empty_k[pos.slot]);
          v.modify(s, query(q0), query(q0 + 8), n * BN, c);
          if (v.tile_needs_mask(query(wg_row0), query(wg_row0 + 63), n)) mask_tile<T>(s, query(q0), query(q0 + 8), n * BN, c, v);
          online_softmax<false>(s, m, l, alpha, sl2);
          rescale(o, alpha);
          convert_p<T::kBf16>(s, pf);
        }
        vpos = pos;
        pos.advance(STAGES);
      }
      // Every S = Q K^T of this tile is done: Q's buffer goes back to the producer (the next
      // tile's Q load overlaps the last P V and the epilogue).
      if (!kLateQ && tid == 0) EmptyBarrier::arrive(empty_q);
      // The last tile's P V.
      FullBarrier::wait(&full_v[vpos.slot], vpos.phase);
      PP::wait_turn(wgc);
      fence_regs(o);
      fence_regs(pf);
      wgmma_fence();
      gemm_rs<typename T::MmaPV, BN, Element>(pf, sV + vpos.slot * Plan::kV, o);
      wgmma_commit();
      PP::pass_turn(wgc);
      wgmma_wait<0>();
      fence_regs(o);
      if (tid == 0) EmptyBarrier::arrive(&empty_v[vpos.slot]);
    } else if (!kLateQ && tid == 0) {
      EmptyBarrier::arrive(empty_q);  // no K/V tile (fully masked rows): Q was never read
    }

    // ---- TL Compute Normalize O, l + Copy O (BM, d) ... from register to global ----
    float inv[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[h] = quad_sum(l[h]);
      inv[h] = l[h] > 0.f ? 1.f / l[h] : 0.f;
    }
    if (T::kLse && p.lse != nullptr && c == 0) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int q = query(q0 + 8 * h), hq = T::kPackGqa ? head * pk + (q0 + 8 * h) % pk : head;
        if (q < p.seqlen_q)
          p.lse[(int64_t(batch) * p.heads_q + hq) * p.seqlen_q + q] =
              l[h] > 0.f ? m[h] * p.scale + logf(l[h]) : -INFINITY;
      }
    }
    // Stage O in this warpgroup's 64 rows of the staging tile (its own tile, or the Q tile: all
    // this warpgroup's wgmmas have read its rows), then one thread stores them with TMA. In a
    // persistent block with its own O tile that thread waits for the previous tile's store only
    // here, just before the rows are rewritten (kDeferStoreWait), not right after issuing it, so
    // the warpgroup starts its next tile while the copy engine reads the rows.
    if constexpr (T::kPersistent) {
      if (kDeferStoreWait && tid == 0) cute::tma_store_wait<0>();
      cutlass::arch::NamedBarrier::sync(128, kBarEpilogueBase + wgc);
    }
    unsigned char* so = reinterpret_cast<unsigned char*>(sO);
#pragma unroll
    for (int i = 0; i < DV / 8; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t v = pack2<T::kBf16>(o[4 * i + 2 * h] * inv[h], o[4 * i + 2 * h + 1] * inv[h]);
        *reinterpret_cast<uint32_t*>(so + swizzled_offset<BM>(row_local + 8 * h, 8 * i + 2 * c, 2)) = v;
      }
    }
    cutlass::arch::fence_view_async_shared();  // generic-proxy writes -> visible to the copy engine
    cutlass::arch::NamedBarrier::sync(128, kBarEpilogueBase + wgc);
    if (tid == 0) {
      if constexpr (T::kPackGqa)
        tma_store_packed<BM, DV>(&p.tma_o, sO, wgc * 64, wg_row0, head, batch, pk);
      else
        tma_store_rows<BM, DV>(&p.tma_o, sO, wgc * 64, wg_row0, head, batch);
      if constexpr (!kDeferStoreWait) {
        cute::tma_store_wait<0>();  // the copy engine has read the staged rows
        if (kLateQ) EmptyBarrier::arrive(empty_q);
      }
    }
  }
  // The last tile's store must have read shared memory before the block exits.
  if (kDeferStoreWait && tid == 0) cute::tma_store_wait<0>();
  PP::finish(wgc);
}

}  // namespace qattn::sm90
