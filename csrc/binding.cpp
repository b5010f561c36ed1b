// Torch binding of the production clipper (csrc/clip.cu). Loaded by andrea_diag/clip/cuda.py
// with torch.utils.cpp_extension.load; every entry point validates its inputs. An input the
// kernels cannot take but the reference can raises UnsupportedInput (a registered RuntimeError
// subclass, caught by type in cuda.py); anything else raises a plain RuntimeError.
//
// Host-sync policy: nothing here waits for the device. Tensor metadata goes to the kernels by
// value (SpanTable, TensorTable); the only device-side metadata, the int32 chunk offsets per
// tensor and the counters (per tensor, and the completion counter), is built once per
// gradient-list shape (tables.h: get_plan). Per call: the outputs and one float64 scratch.
#include <torch/extension.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "clip.h"
#include "tables.h"

namespace ac = andrea_clip;

namespace {

using Outputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

Outputs new_outputs(const at::Tensor& like, int64_t n_tensors) {
  auto f32 = at::TensorOptions().dtype(at::kFloat).device(like.device());
  return {at::empty({}, f32), at::empty({n_tensors}, f32), at::empty({}, f32),
          at::empty({}, f32.dtype(at::kBool))};
}

ac::NormOut norm_out(Outputs& o, const int32_t* offsets, int64_t n_tensors, int64_t n_partials) {
  auto& [total, per, scale, nonfinite] = o;
  return {offsets,
          static_cast<int>(n_tensors),
          static_cast<int>(n_partials),
          total.data_ptr<float>(),
          per.data_ptr<float>(),
          scale.data_ptr<float>(),
          nonfinite.data_ptr<bool>()};
}

at::Tensor new_partials(const at::Tensor& like, int64_t n) {
  return at::empty({n}, at::TensorOptions().dtype(at::kFloat).device(like.device()));
}

// ---- entry points ----------------------------------------------------------------------

at::Tensor chunk_offsets(const std::vector<at::Tensor>& grads) {
  ac::check_grads(grads);
  const c10::cuda::CUDAGuard guard(grads[0].device());
  return ac::get_plan(grads)->offsets_dev;
}

// The norm pass alone: per-chunk partials, no final reduction (benchmarks, sharded norms).
at::Tensor norm_partial(const std::vector<at::Tensor>& grads, double norm_type) {
  ac::check_grads(grads);
  const auto nk = ac::norm_kind(norm_type);
  const c10::cuda::CUDAGuard guard(grads[0].device());
  auto plan = ac::get_plan(grads);
  auto partials = new_partials(grads[0], plan->offsets.back());
  auto stream = c10::cuda::getCurrentCUDAStream();
  for (const auto& [dt, tt] : ac::build_tables<1>({&grads}, plan->offsets))
    ac::check_cuda(ac::launch_norm(tt, dt, nk, static_cast<float>(norm_type),
                                   partials.data_ptr<float>(), stream),
                   "k_grad_norm_partial launch");
  return partials;
}

Outputs norm_final(const at::Tensor& partials, const at::Tensor& offsets, double max_norm,
                   double norm_type) {
  TORCH_CHECK(partials.is_cuda() && partials.scalar_type() == at::kFloat &&
                  partials.is_contiguous() && partials.dim() == 1,
              "andrea_clip: partials must be a contiguous 1-D float32 CUDA tensor");
  TORCH_CHECK(offsets.device() == partials.device() && offsets.scalar_type() == at::kInt &&
                  offsets.is_contiguous() && offsets.dim() == 1 && offsets.numel() >= 1,
              "andrea_clip: offsets must be a contiguous 1-D int32 tensor on the partials' device");
  const auto nk = ac::norm_kind(norm_type);
  const c10::cuda::CUDAGuard guard(partials.device());
  const int64_t n_tensors = offsets.numel() - 1;
  auto out = new_outputs(partials, n_tensors);
  const auto no = norm_out(out, offsets.data_ptr<int32_t>(), n_tensors, partials.numel());
  ac::check_cuda(ac::launch_norm_final(partials.data_ptr<float>(), nk,
                                       static_cast<float>(norm_type),
                                       static_cast<float>(max_norm), no,
                                       c10::cuda::getCurrentCUDAStream()),
                 "k_grad_norm_final launch");
  return out;
}

void scale_(const std::vector<at::Tensor>& grads, const at::Tensor& scale) {
  ac::check_grads(grads);
  TORCH_CHECK(scale.device() == grads[0].device() && scale.scalar_type() == at::kFloat &&
                  scale.numel() == 1,
              "andrea_clip: scale must be a one-element float32 tensor on the gradients' device");
  const c10::cuda::CUDAGuard guard(grads[0].device());
  auto stream = c10::cuda::getCurrentCUDAStream();
  for (const auto& l : ac::build_span_tables(grads))
    ac::check_cuda(ac::launch_clip_scale(l.tt, l.dt, scale.data_ptr<float>(), l.grid,
                                         /*after_norm=*/false, stream),
                   "k_clip_scale launch");
}

// dst = src for each pair where the device flag is set (one bool on their device); no host
// sync: the launches return at once on the device when it is not.
void copy_if(const std::vector<at::Tensor>& dst, const std::vector<at::Tensor>& src,
             const at::Tensor& flag) {
  ac::check_grads(src);
  TORCH_CHECK(dst.size() == src.size(), "andrea_clip: copy_if needs as many dst as src tensors");
  for (size_t i = 0; i < src.size(); ++i)
    TORCH_CHECK(dst[i].device() == src[i].device() && dst[i].scalar_type() == src[i].scalar_type() &&
                    dst[i].numel() == src[i].numel() && dst[i].is_contiguous(),
                "andrea_clip: copy_if dst ", i, " must be a contiguous tensor like src ", i);
  TORCH_CHECK(flag.device() == src[0].device() && flag.scalar_type() == at::kBool &&
                  flag.numel() == 1,
              "andrea_clip: the copy_if flag must be one bool on the tensors' device");
  const c10::cuda::CUDAGuard guard(src[0].device());
  auto stream = c10::cuda::getCurrentCUDAStream();
  const auto plan = ac::get_plan(src);
  for (const auto& [dt, tt] : ac::build_tables<2>({&src, &dst}, plan->offsets))
    ac::check_cuda(ac::launch_copy_if(tt, dt, flag.data_ptr<bool>(), stream), "k_copy_if launch");
}

// The pipelined update's spike flag (probes/spike_bound.py): one launch, the bounds as kernel
// arguments (no host-to-device copy), the signal's mean taken on the device.
at::Tensor spike_flag(const at::Tensor& grad_norm, const at::Tensor& signal, double grad_max,
                      double signal_max) {
  TORCH_CHECK(grad_norm.is_cuda() && grad_norm.scalar_type() == at::kFloat &&
                  grad_norm.numel() == 1,
              "andrea_clip: spike_flag's grad_norm must be one float32 on a CUDA device");
  TORCH_CHECK(signal.device() == grad_norm.device() && signal.is_contiguous() &&
                  signal.numel() >= 1,
              "andrea_clip: spike_flag's signal must be a non-empty contiguous tensor beside "
              "grad_norm");
  const ac::DType dt = ac::dtype_of(signal);  // UnsupportedInput for another dtype
  TORCH_CHECK(signal.numel() <= (int64_t{1} << 30), "andrea_clip: spike_flag's signal is too long");
  const c10::cuda::CUDAGuard guard(grad_norm.device());
  auto flag = at::empty({}, grad_norm.options().dtype(at::kBool));
  ac::check_cuda(ac::launch_spike_flag(grad_norm.data_ptr<float>(), signal.data_ptr(), dt,
                                       static_cast<int>(signal.numel()),
                                       static_cast<float>(grad_max),
                                       static_cast<float>(signal_max), flag.data_ptr<bool>(),
                                       c10::cuda::getCurrentCUDAStream()),
                 "k_spike_flag launch");
  return flag;
}

// The pipelined step's skip flag (train/measure.py): one launch for what torch takes four.
at::Tensor skip_flag(const at::Tensor& nonfinite, const at::Tensor& loss,
                     const c10::optional<at::Tensor>& skip) {
  const auto one_bool = [](const at::Tensor& t, const at::Tensor& like) {
    return t.device() == like.device() && t.scalar_type() == at::kBool && t.numel() == 1;
  };
  TORCH_CHECK(loss.is_cuda() && loss.numel() == 1, "andrea_clip: skip_flag's loss must be one "
              "value on a CUDA device");
  TORCH_CHECK(one_bool(nonfinite, loss) && (!skip || one_bool(*skip, loss)),
              "andrea_clip: skip_flag's flags must be one bool each, beside the loss");
  const ac::DType dt = ac::dtype_of(loss);  // UnsupportedInput for another dtype
  const c10::cuda::CUDAGuard guard(loss.device());
  auto out = at::empty({}, loss.options().dtype(at::kFloat));
  ac::check_cuda(ac::launch_skip_flag(nonfinite.data_ptr<bool>(), loss.data_ptr(), dt,
                                      skip ? skip->data_ptr<bool>() : nullptr,
                                      out.data_ptr<float>(), c10::cuda::getCurrentCUDAStream()),
                 "k_skip_flag launch");
  return out;
}

// The shipped pipeline: the norm pass (1+ launches; the last block of the clip computes the
// scale) -> the scale pass (1+ launches, each returning at once on the device when
// nothing is clipped).
Outputs clip(const std::vector<at::Tensor>& grads, double max_norm, double norm_type, bool apply) {
  ac::check_grads(grads);
  const auto nk = ac::norm_kind(norm_type);
  const c10::cuda::CUDAGuard guard(grads[0].device());
  auto plan = ac::get_plan(grads);
  const auto n_tensors = static_cast<int64_t>(grads.size());
  const auto launches = ac::build_span_tables(grads);
  int n_blocks = 0, n_slots = 0;
  for (const auto& l : launches) {
    n_blocks += l.grid;
    n_slots = l.seg_base + l.grid + l.tt.n - 1;
  }
  // float64 scratch: one sum per (block, tensor) piece
  auto segs =
      at::empty({n_slots}, at::TensorOptions().dtype(at::kDouble).device(grads[0].device()));
  auto out = new_outputs(grads[0], n_tensors);
  auto& [total, per, scale, nonfinite] = out;
  const ac::ClipOut co{plan->offsets_dev.data_ptr<int32_t>(), static_cast<int>(n_tensors),
                       n_blocks, n_slots, segs.data_ptr<double>(), plan->seg_count(),
                       plan->done(), total.data_ptr<float>(), per.data_ptr<float>(),
                       scale.data_ptr<float>(), nonfinite.data_ptr<bool>()};
  auto stream = c10::cuda::getCurrentCUDAStream();
  const float p = static_cast<float>(norm_type), mx = static_cast<float>(max_norm);
  if (launches.empty())  // every gradient empty: no tile, so no last block; norm 0
    ac::check_cuda(ac::launch_clip_empty(nk, p, mx, co, stream), "k_clip_empty launch");
  for (const auto& l : launches)
    ac::check_cuda(ac::launch_clip_norm(l.tt, l.dt, nk, p, mx, co, l.seg_base, l.grid, stream),
                   "k_clip_norm launch");
  if (apply)
    for (const auto& l : launches)
      ac::check_cuda(ac::launch_clip_scale(l.tt, l.dt, scale.data_ptr<float>(), l.grid,
                                           /*after_norm=*/true, stream),
                     "k_clip_scale launch");
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "andrea-diag fused gradient clipper (csrc/clip.cu)";
  // Local: the dev extension registers its own; the Python face catches this type.
  py::register_local_exception<ac::Unsupported>(m, "UnsupportedInput", PyExc_RuntimeError);
  m.attr("CHUNK") = ac::kChunk;
  m.attr("MAX_TENSORS_PER_LAUNCH") = ac::kMaxTensors;
  m.def("clip", &clip, "Fused clip: returns (total_norm, per_tensor_norm, scale, nonfinite)",
        py::arg("grads"), py::arg("max_norm"), py::arg("norm_type"), py::arg("apply"));
  m.def("norm_partial", &norm_partial, "Norm pass alone: per-chunk partials (float32)");
  m.def("norm_final", &norm_final, "Final reduction alone: (total, per_tensor, scale, nonfinite)");
  m.def("scale_", &scale_, "Scale pass alone: in-place g *= scale (skipped when scale == 1)");
  m.def("copy_if", &copy_if, "dst = src where the device flag is set (k_copy_if; no host sync)",
        py::arg("dst"), py::arg("src"), py::arg("flag"));
  m.def("spike_flag", &spike_flag, "grad_norm or mean(signal) non-finite or above its bound "
        "(k_spike_flag; a 0-dim bool, no host sync)", py::arg("grad_norm"), py::arg("signal"),
        py::arg("grad_max"), py::arg("signal_max"));
  m.def("skip_flag", &skip_flag, "1.0 where the step would be skipped: a non-finite gradient "
        "or loss, or the mode's skip (k_skip_flag; 0-dim float32, no host sync)",
        py::arg("nonfinite"), py::arg("loss"), py::arg("skip") = py::none());
  m.def("chunk_offsets", &chunk_offsets, "Cached int32 chunk offsets per tensor (device)");
  m.attr("TILE") = ac::kTile;
  m.def("set_pdl", &ac::set_pdl, "Programmatic dependent launch of the scale pass on/off; "
        "returns the previous setting", py::arg("enabled"));
  m.def("pdl_enabled", &ac::pdl_enabled, "Whether the scale pass is launched with PDL");
  m.def("set_parked_pieces", &ac::set_parked_pieces, "The norm pass's pieces reduced per warp "
        "(true, the default) or per block; returns the previous setting", py::arg("enabled"));
  m.def("set_norm_load", &ac::set_norm_load, "The norm pass's loads: 0 cached (default), 1 L2 "
        "evict-first, 2 streaming; returns the previous mode (-1: unknown mode, unchanged)",
        py::arg("mode"));
}
