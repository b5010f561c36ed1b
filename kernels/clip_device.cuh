// Device building blocks of the clip: one chunk's norm partial, one chunk's in-place scale and
// the float64 final reduction. Shared by the production kernels (clip.cu) and the
// single-launch experiment (dev/clip_single.cu), so both give the same bits.
#pragma once

#include <cmath>
#include <cstdint>

#include "clip.h"
#include "multi_tensor.cuh"

namespace andrea_clip {

constexpr int kUnroll = 4;  // independent 16-byte loads in flight per thread (memory-level ILP)

// Sum of |x|^p (or max |x|) over one chunk of n <= kChunk elements; result in thread 0.
// 128-bit loads when the chunk is 16-byte aligned (kChunk * sizeof(T) is a multiple of 16, so
// a chunk is aligned iff its tensor is); a scalar loop takes the tail and unaligned views.
template <typename T, NormKind K>
__device__ float chunk_reduce(const T* __restrict__ g, int n, float p, float* sh) {
  constexpr int V = 16 / sizeof(T);  // elements per 16-byte load
  float a[kUnroll] = {0.f, 0.f, 0.f, 0.f};
  const int nvec = aligned16(g) ? n / V : 0;
  const uint4* gv = reinterpret_cast<const uint4*>(g);
  int i = threadIdx.x;
  // unroll 1: the 4 loads per trip are the memory parallelism; unrolling the trips as well
  // only raises register pressure (spills at 3 blocks per SM).
#pragma unroll 1
  for (; i + (kUnroll - 1) * kThreads < nvec; i += kUnroll * kThreads) {
    uint4 r[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) r[u] = __ldg(gv + i + u * kThreads);  // all loads first
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const T* e = reinterpret_cast<const T*>(&r[u]);
#pragma unroll
      for (int k = 0; k < V; ++k) a[u] = acc<K>(a[u], to_f(e[k]), p);
    }
  }
  for (; i < nvec; i += kThreads) {
    const uint4 r = __ldg(gv + i);
    const T* e = reinterpret_cast<const T*>(&r);
#pragma unroll
    for (int k = 0; k < V; ++k) a[0] = acc<K>(a[0], to_f(e[k]), p);
  }
  for (int j = nvec * V + threadIdx.x; j < n; j += kThreads) a[1] = acc<K>(a[1], to_f(g[j]), p);
  const float v = combine<K>(combine<K>(a[0], a[1]), combine<K>(a[2], a[3]));
  return block_reduce<K>(v, sh);
}

// In place g[i] = g[i] * s over one chunk (computed in fp32, rounded once to T).
template <typename T>
__device__ void chunk_scale(T* __restrict__ g, int n, float s) {
  constexpr int V = 16 / sizeof(T);
  const int nvec = aligned16(g) ? n / V : 0;
  uint4* gv = reinterpret_cast<uint4*>(g);
  int i = threadIdx.x;
  for (; i + (kUnroll - 1) * kThreads < nvec; i += kUnroll * kThreads) {
    uint4 r[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) r[u] = gv[i + u * kThreads];  // all loads first
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      T* e = reinterpret_cast<T*>(&r[u]);
#pragma unroll
      for (int k = 0; k < V; ++k) e[k] = from_f<T>(to_f(e[k]) * s);
      gv[i + u * kThreads] = r[u];
    }
  }
  for (; i < nvec; i += kThreads) {
    uint4 r = gv[i];
    T* e = reinterpret_cast<T*>(&r);
#pragma unroll
    for (int k = 0; k < V; ++k) e[k] = from_f<T>(to_f(e[k]) * s);
    gv[i] = r;
  }
  for (int j = nvec * V + threadIdx.x; j < n; j += kThreads) g[j] = from_f<T>(to_f(g[j]) * s);
}

template <NormKind K>
__device__ __forceinline__ double root(double s, float p) {
  if constexpr (K == NormKind::L2) return sqrt(s);
  else if constexpr (K == NormKind::LINF) return s;
  else return pow(s, 1.0 / static_cast<double>(p));
}

// torch: clip_coef = max_norm / (total + 1e-6); clamp(max=1) (NaN stays NaN, so a NaN norm
// poisons the gradients exactly as torch's does unless error_if_nonfinite stops it first).
__device__ __forceinline__ float scale_of(float norm, float max_norm) {
  const float coef = max_norm / (norm + kEps);
  return coef != coef ? coef : fminf(coef, 1.0f);
}

// Sum (max for inf) in float64 of x[j], x[j + stride], ... below `end`, in a fixed order.
// Eight loads are issued before any add: the final reduction is one block walking thousands
// of partials, and with one dependent load per add it was latency-bound (~27 us at 120m, H200
// 2026-11-30). Slots past `end` read as 0, the identity of both sums and maxes of |g| terms.
template <NormKind K>
__device__ __forceinline__ double strided_sum(const float* x, int j, int end, int stride) {
  constexpr int U = 8;
  double s = 0.0;
  for (; j < end; j += U * stride) {
    float v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int k = j + u * stride;
      // __ldcg: other blocks wrote these slots in this launch; read them from L2, not L1.
      v[u] = k < end ? __ldcg(x + k) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) s = combine<K>(s, static_cast<double>(v[u]));
  }
  return s;
}

// Total of all partials in float64, fixed order (thread-strided then a fixed tree). Every
// thread of the block gets the result (broadcast through shared memory).
template <NormKind K>
__device__ double total_of(const float* partials, int n_partials, double* shd) {
  double s = strided_sum<K>(partials, threadIdx.x, n_partials, blockDim.x);
  s = block_reduce<K>(s, shd);
  __syncthreads();
  if (threadIdx.x == 0) shd[0] = s;
  __syncthreads();
  return shd[0];
}

// Per-tensor norms: warp w handles tensors w, w + nwarps, ...; float64, fixed order.
template <NormKind K>
__device__ void per_tensor_norms(const float* partials, const int32_t* offsets, int n_tensors,
                                 float p, float* per_tensor) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int t = warp; t < n_tensors; t += nw) {
    double s = strided_sum<K>(partials, offsets[t] + lane, offsets[t + 1], 32);
    s = warp_reduce<K>(s);
    if (lane == 0) per_tensor[t] = static_cast<float>(root<K>(s, p));
  }
}

// The final reduction by one whole block: total, per-tensor norms, flag and scale.
template <NormKind K>
__device__ void final_block(const float* partials, float p, float max_norm, const NormOut& o,
                            double* shd) {
  per_tensor_norms<K>(partials, o.offsets, o.n_tensors, p, o.per_tensor);
  const double s = total_of<K>(partials, o.n_partials, shd);
  if (threadIdx.x == 0) {
    const float norm = static_cast<float>(root<K>(s, p));
    *o.total = norm;
    *o.nonfinite = !isfinite(norm);
    *o.scale = scale_of(norm, max_norm);
  }
}

}  // namespace andrea_clip
