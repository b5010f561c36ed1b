// Experiment: one AdamW step with the clip scale folded in (k_step_inc + k_adamw_clipped),
// reached by ClippedAdamW (andrea_diag/clip/fused_adamw.py) and the "clip+adamw" bench case.
// The gradient is read once and never written, so an active clip costs only the norm pass on
// top of the update (reports/bench-kernels/FUSED-ADAMW.md).
//     nvcc -arch=sm_90 -I csrc -c csrc/dev/adamw.cu -o /tmp/adamw.o
#include "dev.h"

#include <cmath>

#include "multi_tensor.cuh"

namespace andrea_clip {
namespace {

// Four consecutive gradient elements as floats: one 16-byte load for fp32, one 8-byte load for
// bf16/fp16. __ldcs (evict-first): each gradient is read exactly once by this kernel.
template <typename T>
__device__ __forceinline__ float4 load4(const T* g, int i);
template <>
__device__ __forceinline__ float4 load4<float>(const float* g, int i) {
  return __ldcs(reinterpret_cast<const float4*>(g) + i);
}
template <>
__device__ __forceinline__ float4 load4<__nv_bfloat16>(const __nv_bfloat16* g, int i) {
  const uint2 r = __ldcs(reinterpret_cast<const uint2*>(g) + i);
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&r.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&r.y));
  return make_float4(a.x, a.y, b.x, b.y);
}
template <>
__device__ __forceinline__ float4 load4<__half>(const __half* g, int i) {
  const uint2 r = __ldcs(reinterpret_cast<const uint2*>(g) + i);
  const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&r.x));
  const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&r.y));
  return make_float4(a.x, a.y, b.x, b.y);
}

struct AdamCoef {
  float s;          // clip scale (exactly 1 when the norm is below max_norm)
  float lrwd;       // lr * weight_decay (decoupled decay: p -= lr * wd * p)
  float b1, omb1;   // beta1, 1 - beta1
  float b2, omb2;   // beta2, 1 - beta2
  float step_size;  // lr / (1 - beta1^step), computed in float64 once per block
  float bc2_sqrt;   // sqrt(1 - beta2^step), ditto
  float eps;
};

// torch's fused AdamW order of operations (decay, moments, bias-corrected step), in fp32.
__device__ __forceinline__ void adam_elem(float& p, float& m, float& v, float g,
                                          const AdamCoef& c) {
  g *= c.s;
  p -= c.lrwd * p;
  m = c.b1 * m + c.omb1 * g;
  v = c.b2 * v + c.omb2 * g * g;
  const float denom = sqrtf(v) / c.bc2_sqrt + c.eps;
  p -= c.step_size * m / denom;
}

__device__ __forceinline__ void adam4(float4& p, float4& m, float4& v, const float4& g,
                                      const AdamCoef& c) {
  adam_elem(p.x, m.x, v.x, g.x, c);
  adam_elem(p.y, m.y, v.y, g.y, c);
  adam_elem(p.z, m.z, v.z, g.z, c);
  adam_elem(p.w, m.w, v.w, g.w, c);
}

constexpr int kAdamUnroll = 2;  // 2 x (g, p, m, v) 16-byte loads in flight per thread

// One (tensor, chunk) item: n <= kChunk elements of g, p, m, v from the item's start.
template <typename T>
__device__ void adam_chunk(const T* __restrict__ g, float* __restrict__ p, float* __restrict__ m,
                           float* __restrict__ v, int n, const AdamCoef& k) {
  // kChunk * sizeof(float) is a multiple of 16, so a chunk is aligned iff its tensor is.
  const bool aligned =
      (((reinterpret_cast<uintptr_t>(p) | reinterpret_cast<uintptr_t>(m) |
         reinterpret_cast<uintptr_t>(v)) & 15u) == 0) &&
      ((reinterpret_cast<uintptr_t>(g) & (4 * sizeof(T) - 1)) == 0);
  const int n4 = aligned ? n / 4 : 0;
  float4* p4 = reinterpret_cast<float4*>(p);
  float4* m4 = reinterpret_cast<float4*>(m);
  float4* v4 = reinterpret_cast<float4*>(v);
  int i = threadIdx.x;
  for (; i + (kAdamUnroll - 1) * kThreads < n4; i += kAdamUnroll * kThreads) {
    float4 gg[kAdamUnroll], pp[kAdamUnroll], mm[kAdamUnroll], vv[kAdamUnroll];
#pragma unroll
    for (int u = 0; u < kAdamUnroll; ++u) {  // all loads first (memory-level parallelism)
      const int j = i + u * kThreads;
      gg[u] = load4<T>(g, j);
      pp[u] = p4[j];
      mm[u] = m4[j];
      vv[u] = v4[j];
    }
#pragma unroll
    for (int u = 0; u < kAdamUnroll; ++u) {
      const int j = i + u * kThreads;
      adam4(pp[u], mm[u], vv[u], gg[u], k);
      p4[j] = pp[u];
      m4[j] = mm[u];
      v4[j] = vv[u];
    }
  }
  for (; i < n4; i += kThreads) {
    const float4 gg = load4<T>(g, i);
    float4 pp = p4[i], mm = m4[i], vv = v4[i];
    adam4(pp, mm, vv, gg, k);
    p4[i] = pp;
    m4[i] = mm;
    v4[i] = vv;
  }
  for (int j = n4 * 4 + threadIdx.x; j < n; j += kThreads) {  // tail / unaligned views
    float pj = p[j], mj = m[j], vj = v[j];
    adam_elem(pj, mj, vj, to_f(g[j]), k);
    p[j] = pj;
    m[j] = mj;
    v[j] = vj;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    k_adamw_clipped(const __grid_constant__ AdamTable at, AdamHyper h, const float* scale,
                    const bool* nonfinite) {
  // Uniform over the grid: a non-finite norm skips the whole update (params, moments; the step
  // counters were not incremented either), decided on the device so the host never waits.
  if (*nonfinite) return;
  __shared__ float sh_coef[2];
  AdamCoef k;
  k.s = *scale;
  k.lrwd = h.lr * h.weight_decay;
  k.b1 = h.beta1;
  k.omb1 = 1.0f - h.beta1;
  k.b2 = h.beta2;
  k.omb2 = 1.0f - h.beta2;
  k.eps = h.eps;
  for_each_chunk(at, [&](int t, int, int64_t off, int n) {
    __syncthreads();  // the previous item's readers of sh_coef are done
    if (threadIdx.x == 0) {
      // Bias corrections in float64 like torch (1 - 0.999^1 loses ~1e-4 relative in fp32).
      const double st = static_cast<double>(*static_cast<const float*>(at.ptr[4][t]));
      sh_coef[0] = static_cast<float>(static_cast<double>(h.lr) /
                                      (1.0 - pow(static_cast<double>(h.beta1), st)));
      sh_coef[1] = static_cast<float>(sqrt(1.0 - pow(static_cast<double>(h.beta2), st)));
    }
    __syncthreads();
    k.step_size = sh_coef[0];
    k.bc2_sqrt = sh_coef[1];
    adam_chunk<T>(static_cast<const T*>(at.ptr[0][t]) + off, static_cast<float*>(at.ptr[1][t]) + off,
                  static_cast<float*>(at.ptr[2][t]) + off, static_cast<float*>(at.ptr[3][t]) + off,
                  n, k);
  });
}

// torch's fused AdamW increments every step counter before its kernel; here the increment is
// skipped on a non-finite norm (torch's found_inf path adds 1 and subtracts it back).
__global__ void k_step_inc(const __grid_constant__ StepTable st, const bool* nonfinite) {
  if (*nonfinite) return;
  for (int i = threadIdx.x; i < st.n; i += blockDim.x) *static_cast<float*>(st.ptr[0][i]) += 1.0f;
}

}  // namespace

cudaError_t launch_step_inc(const StepTable& st, const bool* nonfinite, cudaStream_t stream) {
  if (st.n == 0) return cudaSuccess;
  k_step_inc<<<1, 128, 0, stream>>>(st, nonfinite);
  return cudaGetLastError();
}

cudaError_t launch_adamw_clipped(const AdamTable& at, DType grad_dt, AdamHyper h,
                                 const float* scale, const bool* nonfinite,
                                 cudaStream_t stream) {
  const int n_items = at.local_start[at.n];
  if (n_items == 0) return cudaSuccess;
  return ANDREA_DISPATCH_DTYPE(grad_dt, T, [&] {
    int grid = 0;
    const cudaError_t e = persistent_grid<k_adamw_clipped<T>>(n_items, &grid);
    if (e != cudaSuccess) return e;
    k_adamw_clipped<T><<<grid, kThreads, 0, stream>>>(at, h, scale, nonfinite);
    return cudaGetLastError();
  });
}

}  // namespace andrea_clip
