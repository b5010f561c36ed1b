// Host-side interface of the kernel experiments (csrc/dev/): the single cooperative launch
// and AdamW with the clip folded in. Built only by the benchmarks and ClippedAdamW, as a
// second extension (andrea_diag/clip/cuda.py: load_dev), as llm.c keeps dev/cuda/ apart from
// llmc/. No torch headers: tests/test_kernels_compile.py compiles these with plain nvcc.
#pragma once

#include <cuda_runtime.h>

#include "clip.h"

namespace andrea_clip {

// The whole clip in ONE cooperative launch (persistent grid + one grid barrier). Needs every
// tensor in one table (one dtype, <= kMaxTensors non-empty tensors). G: the production grid
// for this table (span_grid), which fixes the runs and so the bits. `barrier` is two
// zero-initialised uint32 words that the kernel leaves ready for the next call.
cudaError_t launch_clip_single(const SpanTable& tt, DType dt, NormKind nk, float p,
                               float max_norm, bool apply, const ClipOut& out, int G,
                               unsigned* barrier, cudaStream_t stream);

// ---- AdamW with the clip folded in (k_adamw_clipped) -------------------------------------
// g' = g * (*scale) inside the update, so the clipped gradient is never written back; every
// block returns at once when *nonfinite is set (the step is skipped, no host sync).

// ptr[0] grads (any DType), ptr[1..3] fp32 params / exp_avg / exp_avg_sq, ptr[4] each
// tensor's fp32 step counter (torch AdamW keeps one 0-dim step tensor per parameter).
using AdamTable = TensorTable<5>;
// The step counters alone: ptr[0][i] is a 0-dim fp32 tensor (numel unused).
using StepTable = TensorTable<1>;

struct AdamHyper {
  float lr, beta1, beta2, eps, weight_decay;
};

// step[i] += 1 for every tensor unless *nonfinite (one block; run before launch_adamw_clipped).
cudaError_t launch_step_inc(const StepTable& st, const bool* nonfinite, cudaStream_t stream);

// One AdamW step over every element of the table, reading the clip scale and the skip flag
// from device memory. Persistent grid, grid-stride over the (tensor, kChunk chunk) items.
cudaError_t launch_adamw_clipped(const AdamTable& at, DType grad_dt, AdamHyper h,
                                 const float* scale, const bool* nonfinite, cudaStream_t stream);

}  // namespace andrea_clip
