// qattn device runtime, Hopper (sm90a): the PTX instructions the Hopper kernels are built from, each
// wrapped once, written from the PTX ISA (no CuTe / CUTLASS headers: a generated forward kernel
// includes only the CUDA headers and qattn's own, which keeps its compile to seconds; issue 21).
//   mbarrier      init, arrive, arrive + expected transaction bytes, try_wait / wait on a phase parity
//                 (a debugging build's watchdog on the wait: QATTN_WATCHDOG_CYCLES)
//   named barrier bar.sync / bar.arrive with a thread count (ids: sync.cuh)
//   fences        mbarrier init -> visible to the cluster; generic-proxy shared writes -> async proxy
//   registers     setmaxnreg (warpgroup register reallocation)
//   TMA           4-D / 5-D tile loads completing on an mbarrier, tile stores and fp32 add reductions in
//                 bulk groups, their commit and wait, tensor-map prefetch
// The warpgroup MMA instructions are in wgmma_atoms.cuh.
#pragma once
#include <cstdint>
#if defined(QATTN_WATCHDOG_CYCLES)
#include <cstdio>
#endif

namespace qattn::sm90::ptx {

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// ---- mbarrier ---------------------------------------------------------------------------------
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}
// One arrive that also expects `bytes` of asynchronous (TMA) transactions in the current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
// True once the phase with parity `parity` has completed (the instruction may suspend the thread
// for a while before it answers false).
__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.b32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(smem_u32(bar)), "r"(parity)
      : "memory");
  return done != 0;
}
// An arrive on `bar` once every cp.async this thread issued so far has landed, counted against the
// phase's expected arrivals (.noinc): a ring whose slot some threads fill by cp.async and one by TMA.
__device__ __forceinline__ void cp_async_arrive_noinc(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_u32(bar)) : "memory");
}
#if defined(QATTN_WATCHDOG_CYCLES)
// A debugging build's watchdog (-DQATTN_WATCHDOG_CYCLES=N, e.g. through tests/gpu/nvcc_watchdog.sh):
// a wait on an mbarrier longer than N clock cycles prints the block, the warp, the barrier's offset
// from the 1024-aligned shared-memory base (kernel.cu's kBar* / kSched name the barriers there) and the
// phase parity it waits for, then traps, so a hung kernel becomes a failed launch with a report. How
// the four-warp paged producer's hang was found: bench/results/2026-11-29-h200-paged16.
__device__ __noinline__ void watchdog_report(uint64_t* bar, uint32_t parity) {
  extern __shared__ __align__(128) char qattn_watchdog_smem[];
  const uint32_t base = (smem_u32(qattn_watchdog_smem) + 1023u) & ~1023u;
  if (threadIdx.x % 32 == 0)
    printf("qattn watchdog: block %d warp %d waited %lld cycles on the mbarrier at shared offset %u for parity %u; trapping\n",
           int(blockIdx.x), int(threadIdx.x / 32), static_cast<long long>(QATTN_WATCHDOG_CYCLES), smem_u32(bar) - base, parity);
  __trap();
}
#endif
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
#if defined(QATTN_WATCHDOG_CYCLES)
  const long long start = clock64();
  while (!mbar_try_wait(bar, parity))
    if (clock64() - start > static_cast<long long>(QATTN_WATCHDOG_CYCLES)) watchdog_report(bar, parity);
#else
  while (!mbar_try_wait(bar, parity)) {
  }
#endif
}

// ---- named barriers ---------------------------------------------------------------------------
__device__ __forceinline__ void bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// ---- fences -----------------------------------------------------------------------------------
__device__ __forceinline__ void fence_mbar_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
// Shared-memory writes of this thread (st.shared) made visible to the async proxy (TMA, wgmma).
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// ---- warpgroup register reallocation (the kernel is __launch_bounds__(threads, 1)) --------------
template <int R>
__device__ __forceinline__ void regs_dealloc() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void regs_alloc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R));
}

// ---- TMA ----------------------------------------------------------------------------------------
__device__ __forceinline__ void tma_prefetch_map(const void* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
// The box at coordinates (c0, c1, c2, c3) of a 4-D map into shared memory at dst, completing on bar.
__device__ __forceinline__ void tma_load_4d(const void* map, uint64_t* bar, void* dst, int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];"
      ::"r"(smem_u32(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
// The same with an L2 cache hint: `policy` from l2_evict_first() (keys a block streams once).
__device__ __forceinline__ void tma_load_4d(const void* map, uint64_t* bar, void* dst, int c0, int c1, int c2, int c3, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%3, %4, %5, %6}], [%2], %7;"
      ::"r"(smem_u32(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "l"(policy)
      : "memory");
}
// An L2 cache policy under which the lines a load brings in are evicted first.
__device__ __forceinline__ uint64_t l2_evict_first() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ void tma_load_5d(const void* map, uint64_t* bar, void* dst, int c0, int c1, int c2, int c3, int c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6, %7}], [%2];"
      ::"r"(smem_u32(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}
// The box at (c0, ..) of a map written from shared memory at src (one bulk group per commit).
__device__ __forceinline__ void tma_store_4d(const void* map, const void* src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];"
               ::"l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
__device__ __forceinline__ void tma_store_5d(const void* map, const void* src, int c0, int c1, int c2, int c3, int c4) {
  asm volatile("cp.async.bulk.tensor.5d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5, %6}], [%1];"
               ::"l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
               : "memory");
}
// The box at (c0, ..) of a map added element-wise (fp32 add, atomic per element) from shared memory at
// src: a bulk reduction in the thread's bulk group (committed and waited for like a store).
__device__ __forceinline__ void tma_reduce_add_4d(const void* map, const void* src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];"
               ::"l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Waits until at most N committed store groups still read their shared source.
template <int N>
__device__ __forceinline__ void tma_store_wait() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

// The bulk stores of the thread's groups older than the newest N are complete: their writes are
// performed in global memory (tma_store_wait only waits until their source was read).
template <int N>
__device__ __forceinline__ void tma_store_done() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}
// Orders the thread's async-proxy global writes (bulk stores) before its later generic accesses.
__device__ __forceinline__ void fence_async_global() { asm volatile("fence.proxy.async.global;" ::: "memory"); }
// Named barrier `id` over `threads` threads that also ORs a predicate: true in every thread when
// any of them passed true.
__device__ __forceinline__ bool bar_or(int id, int threads, bool pred) {
  uint32_t out;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n barrier.cta.red.or.pred q, %2, %3, p;\n selp.u32 %0, 1, 0, q;\n}"
      : "=r"(out)
      : "r"(pred ? 1u : 0u), "r"(id), "r"(threads)
      : "memory");
  return out != 0;
}

}  // namespace qattn::sm90::ptx
