// Host-side interface of the production clipper (kernels/clip.cu). No torch headers here:
// CI compile-checks clip.cu with `nvcc -arch=sm_90 -c kernels/clip.cu` in seconds, and
// binding.cpp (the torch side) includes this header to launch the kernels. The layout
// contract with andrea_diag/clip/reference.py is stated in tensor_table.h.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "tensor_table.h"

namespace andrea_clip {

using GradTable = TensorTable<1>;         // the gradients of one launch (one dtype)
constexpr int kMaxTensors = GradTable::kMax;  // 160 per launch

// Where the final reduction writes (device pointers) and what it reads. Passed by value.
struct NormOut {
  const int32_t* offsets;  // n_tensors + 1 chunk offsets (device)
  int n_tensors;
  int n_partials;  // == offsets[n_tensors]: chunks over every launch of this clip
  float* total;
  float* per_tensor;
  float* scale;
  bool* nonfinite;
  unsigned* done;  // chunks finished so far (0 between calls); nullptr: partials only
};

// The norm pass over one table: a persistent grid, grid-stride over the chunks, one float32
// partial per chunk into its fixed slot. With out.done set, the block that finishes the last
// chunk of the whole clip (over every launch of it, counted in *out.done) runs the final
// reduction and resets the counter: no second kernel, no second pass over the chunk table.
cudaError_t launch_norm(const GradTable& tt, DType dt, NormKind nk, float p, float max_norm,
                        float* partials, const NormOut& out, cudaStream_t stream);

// The final reduction alone (one block; deterministic: fixed-order float64 sums, no atomics).
// Used for a list of empty tensors and by the stage-alone entry point.
cudaError_t launch_norm_final(const float* partials, NormKind nk, float p, float max_norm,
                              const NormOut& out, cudaStream_t stream);

// In place g *= *scale (persistent grid); every block returns at once when *scale == 1.
cudaError_t launch_scale(const GradTable& tt, DType dt, const float* scale,
                         cudaStream_t stream);

}  // namespace andrea_clip
