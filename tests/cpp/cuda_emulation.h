// The CUDA build's kernels on host threads, for the tests of machines without a GPU: each block's
// threads are std::threads, __syncthreads a barrier of the block, a warp shuffle an exchange
// through 32 slots between two barriers of the warp, __shared__ a static (blocks run one after
// another), device memory host memory. It checks the kernels' logic (indexing, reductions, the
// order of every sum, the draws, the faults), not the hardware's behaviour: bench/gpu_check.sh
// does that on a GPU.
#pragma once

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __launch_bounds__(...)

using std::fmax;
using std::fmin;
using std::isfinite;
using std::max;
using std::min;

struct dim3 {
  unsigned x = 0, y = 0, z = 0;
};
inline thread_local dim3 threadIdx, blockIdx;

namespace emulation {

struct Warp {
  std::barrier<> barrier{32};
  uint64_t slot[32];
};
struct Block {
  explicit Block(int threads) : barrier(threads), warps(threads / 32) {}
  std::barrier<> barrier;
  std::vector<Warp> warps;
};
inline thread_local Block* block = nullptr;

template <class T>
T exchange(T v, int source_lane) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "a shuffle moves at most 64 bits");
  Warp& w = block->warps[threadIdx.x / 32];
  std::memcpy(&w.slot[threadIdx.x % 32], &v, sizeof(T));
  w.barrier.arrive_and_wait();
  T r;
  std::memcpy(&r, &w.slot[source_lane], sizeof(T));
  w.barrier.arrive_and_wait();
  return r;
}

// Runs kernel(args...) over `blocks` blocks of `threads` threads, one block after another, on
// one team of threads.
template <class... Params>
void launch(void (*kernel)(Params...), int64_t blocks, int threads, Params... args) {
  std::vector<std::unique_ptr<Block>> states;
  for (int64_t b = 0; b < blocks; ++b) states.push_back(std::make_unique<Block>(threads));
  std::barrier<> next_block(threads);
  std::vector<std::thread> team;
  team.reserve(threads);
  for (int t = 0; t < threads; ++t)
    team.emplace_back([&, t] {
      threadIdx.x = static_cast<unsigned>(t);
      for (int64_t b = 0; b < blocks; ++b) {
        blockIdx.x = static_cast<unsigned>(b);
        block = states[b].get();
        kernel(args...);
        // A returned thread no longer holds the others at a barrier (as on the device).
        block->warps[t / 32].barrier.arrive_and_drop();
        block->barrier.arrive_and_drop();
        next_block.arrive_and_wait();  // the block's __shared__ statics are the next one's
      }
    });
  for (std::thread& t : team) t.join();
}

}  // namespace emulation

inline void __syncthreads() { emulation::block->barrier.arrive_and_wait(); }

template <class T>
T __shfl_xor_sync(unsigned, T v, int mask) {
  return emulation::exchange(v, static_cast<int>(threadIdx.x % 32) ^ mask);
}
template <class T>
T __shfl_down_sync(unsigned, T v, int delta) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  return emulation::exchange(v, lane + delta < 32 ? lane + delta : lane);
}
inline uint32_t atomicOr(uint32_t* p, uint32_t v) { return std::atomic_ref<uint32_t>(*p).fetch_or(v); }

// The runtime API the host side calls, over host memory.
using cudaStream_t = void*;
enum cudaError_t { cudaSuccess = 0, cudaErrorMemoryAllocation = 2 };
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2 };
inline const char* cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "out of memory"; }
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
template <class T>
cudaError_t cudaMallocAsync(T** p, size_t n, cudaStream_t) {
  *p = static_cast<T*>(std::malloc(n));
  return *p != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
inline cudaError_t cudaFreeAsync(void* p, cudaStream_t) {
  std::free(p);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind, cudaStream_t) {
  std::memcpy(d, s, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t) {
  std::memset(d, v, n);
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return std::atomic_ref<unsigned>(*p).fetch_add(v); }
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline unsigned __ballot_sync(unsigned, bool predicate) {
  emulation::Warp& w = emulation::block->warps[threadIdx.x / 32];
  w.slot[threadIdx.x % 32] = predicate;
  w.barrier.arrive_and_wait();
  unsigned mask = 0;
  for (int lane = 0; lane < 32; ++lane) mask |= static_cast<unsigned>(w.slot[lane] != 0) << lane;
  w.barrier.arrive_and_wait();
  return mask;
}
