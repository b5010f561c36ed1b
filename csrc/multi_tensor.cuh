// The multi-tensor machinery shared by the production clipper (clip.cu) and the experiments
// (dev/): one dtype / norm dispatch macro each, the persistent grid size, the chunk walk
// (grid-stride over a TensorTable) and the fixed-shape reductions. Device code, no torch
// headers: CI compiles the .cu files with plain nvcc in seconds. The table itself is in
// tensor_table.h (host-safe), its builder in tables.h (torch side).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "tensor_table.h"

namespace andrea_clip {

// One dtype dispatch for every launcher: binds T to the element type and runs the body.
#define ANDREA_DISPATCH_DTYPE(DT, T, ...)                                   \
  [&]() -> cudaError_t {                                                    \
    switch (DT) {                                                           \
      case ::andrea_clip::DType::F32: { using T = float; return __VA_ARGS__(); } \
      case ::andrea_clip::DType::BF16: { using T = __nv_bfloat16; return __VA_ARGS__(); } \
      case ::andrea_clip::DType::F16: { using T = __half; return __VA_ARGS__(); } \
    }                                                                       \
    return cudaErrorInvalidValue;                                           \
  }()

// Same for the norm kind: binds K (a NormKind constant) and runs the body.
#define ANDREA_DISPATCH_NORM(NK, K, ...)                                    \
  [&]() -> cudaError_t {                                                    \
    switch (NK) {                                                           \
      case ::andrea_clip::NormKind::L2: { constexpr auto K = ::andrea_clip::NormKind::L2; return __VA_ARGS__(); } \
      case ::andrea_clip::NormKind::LINF: { constexpr auto K = ::andrea_clip::NormKind::LINF; return __VA_ARGS__(); } \
      case ::andrea_clip::NormKind::LP: { constexpr auto K = ::andrea_clip::NormKind::LP; return __VA_ARGS__(); } \
    }                                                                       \
    return cudaErrorInvalidValue;                                           \
  }()

// Persistent grid: every SM filled to its occupancy, never more blocks than work items. The
// chunk loops are grid-stride, so the work of a launch does not depend on this number (and
// neither do the results: each chunk's partial depends only on its data and the block shape).
template <auto Kernel>
inline cudaError_t persistent_grid(int n_items, int* grid) {
  static thread_local int cached_dev = -1, cached_sms = 0;
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  if (dev != cached_dev) {
    e = cudaDeviceGetAttribute(&cached_sms, cudaDevAttrMultiProcessorCount, dev);
    if (e != cudaSuccess) return e;
    cached_dev = dev;
  }
  // Once per kernel (same on every GPU of one kind); thread-safe static initialisation.
  static const int per_sm = [] {
    int v = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v, Kernel, kThreads, 0) != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: clear it, fall back to one block per SM
      v = 1;
    }
    return v < 1 ? 1 : v;
  }();
  const int full = cached_sms * per_sm;
  *grid = n_items < full ? n_items : full;
  if (*grid < 1) *grid = 1;
  return cudaSuccess;
}

// ---- element conversion ---------------------------------------------------------------

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// ---- reductions -------------------------------------------------------------------------

// NaN-propagating max: fmaxf drops NaN, but a NaN gradient must make the inf-norm NaN
// (torch's amax propagates it too).
template <typename F>
__device__ __forceinline__ F nan_max(F a, F b) {
  return (b > a || b != b) ? b : a;
}

// Accumulate one element into a running value of kind K.
template <NormKind K>
__device__ __forceinline__ float acc(float a, float x, float p) {
  if constexpr (K == NormKind::L2) {
    return fmaf(x, x, a);
  } else if constexpr (K == NormKind::LINF) {
    return nan_max(a, fabsf(x));
  } else {
    return a + powf(fabsf(x), p);
  }
}

template <NormKind K, typename F>
__device__ __forceinline__ F combine(F a, F b) {
  if constexpr (K == NormKind::LINF) {
    return nan_max(a, b);
  } else {
    return a + b;
  }
}

template <NormKind K, typename F>
__device__ __forceinline__ F warp_reduce(F v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = combine<K>(v, __shfl_down_sync(0xffffffffu, v, o));
  return v;  // valid in lane 0
}

// Fixed-shape tree reduction -> the same bits for the same inputs on every run.
// Result valid in thread 0. `sh` holds one value per warp.
template <NormKind K, typename F>
__device__ __forceinline__ F block_reduce(F v, F* sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_reduce<K>(v);
  __syncthreads();  // sh may still be read by a previous call
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < nw ? sh[lane] : F(0);
    v = warp_reduce<K>(v);
  }
  return v;
}

// ---- the chunk walk ---------------------------------------------------------------------

// Which (tensor, chunk) work item `b` of this launch is: the last tensor whose
// local_start <= b. Tensors in a table are non-empty, so local_start is strictly increasing.
template <int Depth>
__device__ __forceinline__ void locate(const TensorTable<Depth>& tt, int b, int& t, int& c) {
  int lo = 0, hi = tt.n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (tt.local_start[mid] <= b) lo = mid; else hi = mid - 1;
  }
  t = lo;
  c = b - tt.local_start[lo];
}

// Calls op(t, c, off, n) for every work item of this block, grid-stride: chunk c of tensor t,
// elements [off, off + n) with n <= kChunk. Returns the number of items this block did.
template <int Depth, typename Op>
__device__ __forceinline__ int for_each_chunk(const TensorTable<Depth>& tt, Op&& op) {
  const int n_items = tt.local_start[tt.n];
  int done = 0;
  for (int b = blockIdx.x; b < n_items; b += gridDim.x, ++done) {
    int t, c;
    locate(tt, b, t, c);
    const int64_t off = static_cast<int64_t>(c) * kChunk;
    const int64_t left = tt.numel[t] - off;
    op(t, c, off, left < kChunk ? static_cast<int>(left) : kChunk);
  }
  return done;
}

// Whether a pointer allows 16-byte (128-bit) vector access. Views can start anywhere.
__device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

}  // namespace andrea_clip
