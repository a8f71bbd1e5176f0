// CPU stand-in for the parts of CUDA that coiter's generated code uses, so that tests can
// run the generated kernels where no GPU is present. Every thread of a block is an OS
// thread, so warp shuffles (a barrier per warp) and atomics behave as on a GPU; blocks run
// one after another. tests/test_cuda.py includes this instead of <cuda_runtime.h> and turns
// `kernel<<<grid, block>>>(args)` into `coiter_emulate(grid, block, [&] { kernel(args); })`.
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__

typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorMemoryAllocation = 2, cudaErrorInvalidConfiguration = 9 };
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost };

struct coiter_dim3 { unsigned int x; };
thread_local coiter_dim3 threadIdx, blockIdx;

inline cudaError_t cudaMalloc(void** p, size_t n) {
  *p = malloc(n);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
inline cudaError_t cudaMemcpy(void* to, const void* from, size_t n, cudaMemcpyKind) {
  memcpy(to, from, n);
  return cudaSuccess;
}
inline cudaError_t cudaFree(void* p) { free(p); return cudaSuccess; }
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline const char* cudaGetErrorString(cudaError_t) { return "emulated CUDA error"; }

// the lanes of one warp meet at each shuffle
struct coiter_warp_state {
  std::barrier<> meet;
  unsigned long long slot[32];
  explicit coiter_warp_state(unsigned lanes) : meet(lanes) {}
};
thread_local coiter_warp_state* coiter_warp_of_thread;

template <typename T>
T __shfl_xor_sync(unsigned, T v, int lane_mask) {
  static_assert(sizeof(T) <= sizeof(unsigned long long), "shuffle of a wide type");
  coiter_warp_state& w = *coiter_warp_of_thread;
  unsigned lane = threadIdx.x % 32;
  memcpy(&w.slot[lane], &v, sizeof(T));
  w.meet.arrive_and_wait();
  T other;
  memcpy(&other, &w.slot[lane ^ lane_mask], sizeof(T));
  w.meet.arrive_and_wait();  // nobody overwrites a slot before every lane has read
  return other;
}

template <typename T>
T atomicAdd(T* p, T v) { return std::atomic_ref<T>(*p).fetch_add(v); }

inline void coiter_emulate(unsigned grid, unsigned block, const std::function<void()>& kernel) {
  for (unsigned b = 0; b < grid; b++) {
    std::vector<std::unique_ptr<coiter_warp_state>> warps;
    for (unsigned w = 0; w < block; w += 32)
      warps.emplace_back(new coiter_warp_state(std::min(32u, block - w)));
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < block; t++)
      threads.emplace_back([&, b, t] {
        blockIdx.x = b;
        threadIdx.x = t;
        coiter_warp_of_thread = warps[t / 32].get();
        kernel();
      });
    for (std::thread& t : threads) t.join();
  }
}
