// qattn device runtime, Hopper (sm90a): TL `Merge split ... end` in a forward program that splits
// the keys (docs/tl.md, "Merging the parts in the kernel"). Each consumer warpgroup, after storing
// its rows of its part (O by one TMA store, LSE by its threads), counts the part in a counter of its
// rows of the tile; the warpgroup that counts the last part merges every part of those rows (the
// Merge body, lowered onto row-distributed tiles: qattn/rowwise.cuh) into the merged O and LSE.
// Rows are independent, so the rows of one warpgroup are merged by whichever warpgroup stored them
// last, never waiting for another block: no second launch, no spinning.
//
// Memory order: the store of the part is complete (the bulk store's writes performed, not just its
// source read) and fenced before the count (release: __threadfence then the atomic); the warpgroup
// that counts the last part fences again before it reads the others' parts (acquire) with plain
// loads, which the memory model orders after the other blocks' stores.
// Counters: one int per (tile without its part, consumer warpgroup), zero at launch; the last part
// sets it back to 0, so the next launch (or a CUDA graph's replay) finds it zero.
#pragma once
#include "qattn/sm90/ptx.cuh"
#include "qattn/sm90/sync.cuh"

namespace qattn::sm90 {

// True in every thread of the warpgroup (tid 0..127, named barrier `bar`) when its count was the
// last of `parts`. kTmaO: O was stored by a bulk store issued by the warpgroup's thread 0.
template <bool kTmaO>
__device__ __forceinline__ bool merge_arrive(int* counter, int parts, int bar, int tid) {
  if (kTmaO && tid == 0) {
    ptx::tma_store_done<0>();  // the part's O rows are written
    ptx::fence_async_global();
  }
  __threadfence();  // this thread's LSE (and O) writes before the count
  ptx::bar_sync(bar, 128);
  bool last = false;
  if (tid == 0) {
    last = atomicAdd(counter, 1) == parts - 1;
    if (last) atomicExch(counter, 0);  // every part has counted: zero for the next launch
  }
  last = ptx::bar_or(bar, 128, last);
  if (last) __threadfence();
  return last;
}

}  // namespace qattn::sm90
