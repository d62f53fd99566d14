// The CUDA build's kernels on the host, for the tests of machines without a GPU: a block's threads
// are fibers (ucontext) on the calling thread, __syncthreads a barrier of the block, a warp shuffle
// an exchange through 32 slots between two barriers of the warp, __shared__ a static (blocks run
// one after another), device memory host memory. It checks the kernels' logic (indexing,
// reductions, the order of every sum, the draws, the faults), not the hardware's behaviour:
// bench/gpu_check.sh does that on a GPU.
// Fibers, not std::threads: the run is deterministic, a few times faster, and threads that wait at
// different barriers (a divergent __syncthreads) stop the test with a message instead of hanging.
// Between barriers the threads run from the last one down, so a read that misses its barrier sees
// the shared value from before thread 0's write.
#pragma once

#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

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
inline dim3 threadIdx, blockIdx;

namespace emulation {

// A barrier whose threads may leave (as a returned GPU thread does).
struct Barrier {
  explicit Barrier(int threads) : expected(threads) {}
  void arrive_and_wait();
  void arrive_and_drop() {
    if (--expected == arrived && arrived > 0) next_phase();
  }
  void next_phase() {
    arrived = 0;
    ++phase;
  }
  int expected, arrived = 0;
  uint64_t phase = 0;
};

struct Warp {
  Barrier barrier{32};
  uint64_t slot[32];
};
struct Block {
  explicit Block(int threads) : barrier(threads), warps(threads / 32) {}
  Barrier barrier;
  std::vector<Warp> warps;
};
inline Block* block = nullptr;

// One GPU thread: its context and stack, and the barrier phase it waits for the end of.
struct Fiber {
  static constexpr size_t kStack = 1 << 18;  // the sanitizers' frames are larger
  ucontext_t context;
  std::unique_ptr<char[]> stack{new char[kStack]};
  const Barrier* waits_at = nullptr;
  uint64_t phase = 0;
  bool done = false;
  void* fake_stack = nullptr;  // AddressSanitizer's bookkeeping across switches
};

// The fibers of the running block and the scheduler's own context.
struct Team {
  std::vector<Fiber> fibers;
  ucontext_t scheduler;
  const void* scheduler_stack = nullptr;
  size_t scheduler_stack_size = 0;
  std::function<void()> body;  // the kernel with its arguments
};
inline Team* team = nullptr;

inline void start_switch([[maybe_unused]] void** fake_stack, [[maybe_unused]] const void* bottom,
                         [[maybe_unused]] size_t size) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_start_switch_fiber(fake_stack, bottom, size);
#endif
}
inline void finish_switch([[maybe_unused]] void* fake_stack, [[maybe_unused]] const void** bottom,
                          [[maybe_unused]] size_t* size) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(fake_stack, bottom, size);
#endif
}

// Back to the scheduler until the barrier's phase has ended.
inline void Barrier::arrive_and_wait() {
  if (++arrived == expected) return next_phase();
  Fiber& f = team->fibers[threadIdx.x];
  f.waits_at = this;
  f.phase = phase;
  start_switch(&f.fake_stack, team->scheduler_stack, team->scheduler_stack_size);
  swapcontext(&f.context, &team->scheduler);
  finish_switch(f.fake_stack, nullptr, nullptr);
}

inline void fiber_main() {
  Fiber& f = team->fibers[threadIdx.x];
  finish_switch(nullptr, &team->scheduler_stack, &team->scheduler_stack_size);
  team->body();
  // A returned thread no longer holds the others at a barrier (as on the device).
  block->warps[threadIdx.x / 32].barrier.arrive_and_drop();
  block->barrier.arrive_and_drop();
  f.done = true;
  start_switch(nullptr, team->scheduler_stack, team->scheduler_stack_size);  // this stack ends
  setcontext(&team->scheduler);
}

// Runs every fiber whose barrier has moved on, from the last down, until all have returned.
inline void run_block() {
  for (;;) {
    bool ran = false, all_done = true;
    for (int t = static_cast<int>(team->fibers.size()) - 1; t >= 0; --t) {
      Fiber& f = team->fibers[t];
      if (f.done) continue;
      all_done = false;
      if (f.waits_at != nullptr && f.waits_at->phase == f.phase) continue;
      f.waits_at = nullptr;
      threadIdx.x = static_cast<unsigned>(t);
      void* fake_stack = nullptr;
      start_switch(&fake_stack, f.stack.get(), Fiber::kStack);
      swapcontext(&team->scheduler, &f.context);
      finish_switch(fake_stack, nullptr, nullptr);
      ran = true;
    }
    if (all_done) return;
    if (!ran) {
      std::fprintf(stderr, "cuda_emulation: block %u deadlocks: its threads wait at different barriers\n",
                   blockIdx.x);
      std::abort();
    }
  }
}

// Runs kernel(args...) over `blocks` blocks of `threads` threads, one block after another.
template <class... Params>
void launch(void (*kernel)(Params...), int64_t blocks, int threads, Params... args) {
  Team fibers;
  fibers.fibers.resize(threads);
  fibers.body = [&] { kernel(args...); };
  team = &fibers;
  for (int64_t b = 0; b < blocks; ++b) {
    Block state(threads);
    block = &state;
    blockIdx.x = static_cast<unsigned>(b);
    for (Fiber& f : fibers.fibers) {
      f.done = false;
      f.waits_at = nullptr;
      getcontext(&f.context);
      f.context.uc_stack.ss_sp = f.stack.get();
      f.context.uc_stack.ss_size = Fiber::kStack;
      f.context.uc_link = nullptr;
      makecontext(&f.context, fiber_main, 0);
    }
    run_block();
  }
  team = nullptr;
  block = nullptr;
}

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
inline uint32_t atomicOr(uint32_t* p, uint32_t v) { return std::exchange(*p, *p | v); }

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
inline unsigned atomicAdd(unsigned* p, unsigned v) { return std::exchange(*p, *p + v); }
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
