// Host-side interface of the fused gradient clipper (kernels/clip.cu). No torch headers here:
// CI compile-checks clip.cu with `nvcc -arch=sm_90 -c kernels/clip.cu` in seconds, and
// binding.cpp (the torch side) includes this header to launch the kernels.
//
// Layout contract shared with andrea_diag/clip/reference.py (keep in sync):
//   * every tensor is cut into chunks of kChunk elements; chunk j of tensor t is work item
//     offsets[t] + j, and partials[offsets[t] + j] holds its sum of |g|^p (max |g| for p = inf);
//   * offsets is the exclusive prefix sum of ceil(numel / kChunk), length n_tensors + 1;
//   * scale = min(1, max_norm / (norm + kEps)), computed in float32 like torch (NaN propagates).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace andrea_clip {

constexpr int kChunk = 16384;   // elements per work item; == reference.CHUNK (see README)
constexpr int kThreads = 512;   // threads per block; 32 fp32 elements per thread per chunk
constexpr int kMaxTensors = 160;  // per launch: keeps TensorList under the 4 KB param limit
constexpr float kEps = 1e-6f;   // == reference.EPS == torch's clip_grad_norm_ epsilon

enum class DType : int { F32 = 0, BF16 = 1, F16 = 2 };
enum class NormKind : int { L2 = 0, LINF = 1, LP = 2 };

// Passed to kernels BY VALUE (apex multi_tensor_apply style): no device-side pointer table, so
// building it needs no H2D copy and no host sync, and CUDA graphs capture it in the kernel
// node. 160 * (8 + 8 + 4 + 4) + 4 + 4 = 3848 bytes; lists longer than 160 tensors (or with
// several dtypes) are split into several launches by the binding.
struct TensorList {
  void* ptr[kMaxTensors];
  int64_t numel[kMaxTensors];
  int32_t local_start[kMaxTensors + 1];  // prefix of chunk counts inside this launch
  int32_t global_start[kMaxTensors];     // slot of the tensor's first chunk in `partials`
  int32_t n;                             // tensors in this launch (all non-empty)
};

// Stage 1: grid = local_start[n] blocks, one (tensor, chunk) each.
cudaError_t launch_norm_partial(const TensorList& tl, DType dt, NormKind nk, float p,
                                float* partials, cudaStream_t stream);

// Stage 2: one block; deterministic (fixed-order float64 sums, no atomics).
cudaError_t launch_norm_final(const float* partials, int n_partials, const int32_t* offsets,
                              int n_tensors, NormKind nk, float p, float max_norm,
                              float* total, float* per_tensor, float* scale, bool* nonfinite,
                              cudaStream_t stream);

// Stage 3: in place g *= *scale; every block returns at once when *scale == 1.
cudaError_t launch_scale(const TensorList& tl, DType dt, const float* scale,
                         cudaStream_t stream);

// All three stages in ONE cooperative launch (persistent grid + one grid barrier). Needs every
// tensor in one TensorList (one dtype, <= kMaxTensors non-empty tensors). `barrier` is two
// zero-initialised uint32 words that the kernel leaves ready for the next call.
cudaError_t launch_clip_single(const TensorList& tl, DType dt, NormKind nk, float p,
                               float max_norm, bool apply, float* partials, int n_partials,
                               const int32_t* offsets, int n_tensors, float* total,
                               float* per_tensor, float* scale, bool* nonfinite,
                               unsigned* barrier, cudaStream_t stream);

// ---- AdamW with the clip folded in (k_adamw_clipped) -------------------------------------
// g' = g * (*scale) inside the update, so the clipped gradient is never written back; every
// block returns at once when *nonfinite is set (the step is skipped, no host sync).

constexpr int kMaxAdamTensors = 80;  // 80 * (4 * 8 + 8 + 4) + 4 + 4 + 4 = 3532 bytes < 4 KB
constexpr int kMaxStepTensors = 480; // StepList: 480 * 8 + 4 = 3844 bytes < 4 KB

// By value, like TensorList: grads (any DType), fp32 params / exp_avg / exp_avg_sq, and each
// tensor's fp32 step counter (torch AdamW keeps one 0-dim step tensor per parameter).
struct AdamList {
  const void* g[kMaxAdamTensors];
  float* p[kMaxAdamTensors];
  float* m[kMaxAdamTensors];
  float* v[kMaxAdamTensors];
  const float* step[kMaxAdamTensors];  // already incremented by launch_step_inc
  int64_t numel[kMaxAdamTensors];
  int32_t local_start[kMaxAdamTensors + 1];  // prefix of chunk counts inside this launch
  int32_t n;                                  // tensors in this launch (all non-empty)
};

struct StepList {
  float* step[kMaxStepTensors];
  int32_t n;
};

struct AdamHyper {
  float lr, beta1, beta2, eps, weight_decay;
};

// step[i] += 1 for every tensor unless *nonfinite (one block; run before launch_adamw_clipped).
cudaError_t launch_step_inc(const StepList& sl, const bool* nonfinite, cudaStream_t stream);

// One AdamW step over every element of the list, reading the clip scale and the skip flag
// from device memory. grid = local_start[n] blocks, one (tensor, kChunk chunk) each.
cudaError_t launch_adamw_clipped(const AdamList& al, DType grad_dt, AdamHyper h,
                                 const float* scale, const bool* nonfinite, cudaStream_t stream);

}  // namespace andrea_clip
