// Torch binding of the kernel experiments (csrc/dev/): clip_single (one cooperative launch)
// and adamw_clipped (AdamW with the clip scale folded in). A second extension,
// andrea_diag_clip_dev, built only when a benchmark or ClippedAdamW asks for it
// (andrea_diag/clip/cuda.py: load_dev). Same checks, plans and tables as the production
// binding (tables.h), so the bits of clip_single match clip's.
#include <torch/extension.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "dev.h"
#include "tables.h"

namespace ac = andrea_clip;

namespace {

using Outputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

bool single_supported(const std::vector<at::Tensor>& grads) {
  ac::check_grads(grads);
  return ac::build_span_tables(grads).size() == 1;  // all-empty lists take the pair
}

Outputs clip_single(const std::vector<at::Tensor>& grads, double max_norm, double norm_type,
                    bool apply) {
  ac::check_grads(grads);
  const auto nk = ac::norm_kind(norm_type);
  const c10::cuda::CUDAGuard guard(grads[0].device());
  auto plan = ac::get_plan(grads);
  const auto launches = ac::build_span_tables(grads);
  TORCH_CHECK(launches.size() == 1, "andrea_clip: the single-launch variant needs one dtype and at "
              "most ", std::to_string(ac::kMaxTensors), " non-empty tensors; got ",
              std::to_string(launches.size()), " launches' worth");
  const auto& l = launches[0];
  const auto n_tensors = static_cast<int64_t>(grads.size());
  auto f32 = at::TensorOptions().dtype(at::kFloat).device(grads[0].device());
  const int n_slots = l.grid + l.tt.n - 1;
  auto segs = at::empty({n_slots}, f32.dtype(at::kDouble));
  Outputs out{at::empty({}, f32), at::empty({n_tensors}, f32), at::empty({}, f32),
              at::empty({}, f32.dtype(at::kBool))};
  auto& [total, per, scale, nonfinite] = out;
  const ac::ClipOut co{plan->offsets_dev.data_ptr<int32_t>(), static_cast<int>(n_tensors),
                       l.grid, n_slots, segs.data_ptr<double>(), plan->seg_count(),
                       plan->done(), total.data_ptr<float>(), per.data_ptr<float>(),
                       scale.data_ptr<float>(), nonfinite.data_ptr<bool>()};
  ac::check_cuda(ac::launch_clip_single(l.tt, l.dt, nk, static_cast<float>(norm_type),
                                        static_cast<float>(max_norm), apply, co, l.grid,
                                        plan->done() + 1, c10::cuda::getCurrentCUDAStream()),
                 "k_clip_single launch");
  return out;
}

// ---- AdamW with the clip folded in ---------------------------------------------------------

void check_same(const at::Tensor& t, const at::Tensor& g, const char* what, size_t i) {
  TORCH_CHECK(t.defined(), "andrea_clip: ", what, " ", ac::idx(i), " is undefined");
  TORCH_CHECK(t.device() == g.device(), "andrea_clip: ", what, " ", ac::idx(i), " is on ",
              t.device().str(), " but its gradient is on ", g.device().str());
  if (t.scalar_type() != at::kFloat)
    throw ac::Unsupported(std::string("andrea_clip: ") + what + " " + ac::idx(i) +
                          " must be float32");
  if (t.layout() != at::kStrided || !t.is_contiguous())
    throw ac::Unsupported(std::string("andrea_clip: ") + what + " " + ac::idx(i) +
                          " is not contiguous");
  TORCH_CHECK(t.numel() == g.numel(), "andrea_clip: ", what, " ", ac::idx(i), " has ",
              std::to_string(t.numel()), " elements but its gradient has ",
              std::to_string(g.numel()));
}

void check_scalar(const at::Tensor& t, const at::Device& dev, at::ScalarType st, const char* what) {
  TORCH_CHECK(t.defined() && t.device() == dev && t.scalar_type() == st && t.numel() == 1,
              "andrea_clip: ", what, " must be a one-element ", c10::toString(st), " tensor on ",
              dev.str());
}

void check_adam_args(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                     const std::vector<at::Tensor>& exp_avgs,
                     const std::vector<at::Tensor>& exp_avg_sqs,
                     const std::vector<at::Tensor>& steps, double lr, double beta1, double beta2,
                     double eps, double weight_decay) {
  const size_t n = grads.size();
  TORCH_CHECK(params.size() == n && exp_avgs.size() == n && exp_avg_sqs.size() == n &&
                  steps.size() == n,
              "andrea_clip: params, grads, exp_avgs, exp_avg_sqs and steps need one entry each (got ",
              ac::idx(params.size()), ", ", ac::idx(n), ", ", ac::idx(exp_avgs.size()), ", ",
              ac::idx(exp_avg_sqs.size()), ", ", ac::idx(steps.size()), ")");
  const auto dev = grads[0].device();
  for (size_t i = 0; i < n; ++i) {
    check_same(params[i], grads[i], "param", i);
    check_same(exp_avgs[i], grads[i], "exp_avg", i);
    check_same(exp_avg_sqs[i], grads[i], "exp_avg_sq", i);
    check_scalar(steps[i], dev, at::kFloat, "step");
  }
  TORCH_CHECK(std::isfinite(lr) && lr >= 0.0, "andrea_clip: lr must be finite and >= 0, got ",
              std::to_string(lr));
  TORCH_CHECK(beta1 >= 0.0 && beta1 < 1.0 && beta2 >= 0.0 && beta2 < 1.0,
              "andrea_clip: betas must be in [0, 1), got ", std::to_string(beta1), ", ",
              std::to_string(beta2));
  TORCH_CHECK(std::isfinite(eps) && eps >= 0.0, "andrea_clip: eps must be finite and >= 0, got ",
              std::to_string(eps));
  TORCH_CHECK(std::isfinite(weight_decay) && weight_decay >= 0.0,
              "andrea_clip: weight_decay must be finite and >= 0, got ",
              std::to_string(weight_decay));
}

// One AdamW step with g' = g * scale, skipped entirely when nonfinite (both read on the
// device). steps[i] (fp32, one per parameter, torch AdamW's state["step"]) are incremented
// first unless nonfinite. Gradients are read, never written.
void adamw_clipped(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                   const std::vector<at::Tensor>& exp_avgs,
                   const std::vector<at::Tensor>& exp_avg_sqs, const std::vector<at::Tensor>& steps,
                   const at::Tensor& scale, const at::Tensor& nonfinite, double lr, double beta1,
                   double beta2, double eps, double weight_decay) {
  ac::check_grads(grads);
  check_adam_args(params, grads, exp_avgs, exp_avg_sqs, steps, lr, beta1, beta2, eps,
                  weight_decay);
  const auto dev = grads[0].device();
  check_scalar(scale, dev, at::kFloat, "scale");
  check_scalar(nonfinite, dev, at::kBool, "nonfinite");
  const c10::cuda::CUDAGuard guard(dev);
  auto stream = c10::cuda::getCurrentCUDAStream();
  const bool* nf = nonfinite.data_ptr<bool>();
  // Step counters first (every parameter with a gradient, empty ones too, as torch does).
  ac::StepTable st{};
  for (size_t i = 0; i < steps.size(); ++i) {
    st.ptr[0][st.n++] = steps[i].data_ptr();
    if (st.n == ac::StepTable::kMax || i + 1 == steps.size()) {
      ac::check_cuda(ac::launch_step_inc(st, nf, stream), "k_step_inc launch");
      st.n = 0;
    }
  }
  // Then the update: by-value tables of one grad dtype each (build_tables, depth 5).
  const ac::AdamHyper h{static_cast<float>(lr), static_cast<float>(beta1),
                        static_cast<float>(beta2), static_cast<float>(eps),
                        static_cast<float>(weight_decay)};
  auto plan = ac::get_plan(grads);
  const auto tables = ac::build_tables<5>({&grads, &params, &exp_avgs, &exp_avg_sqs, &steps},
                                          plan->offsets);
  for (const auto& [dt, tt] : tables)
    ac::check_cuda(ac::launch_adamw_clipped(tt, dt, h, scale.data_ptr<float>(), nf, stream),
                   "k_adamw_clipped launch");
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "andrea-diag kernel experiments (csrc/dev/): single-launch clip, fused AdamW";
  py::register_local_exception<ac::Unsupported>(m, "UnsupportedInput", PyExc_RuntimeError);
  m.attr("MAX_TENSORS_PER_LAUNCH") = ac::kMaxTensors;
  m.attr("MAX_ADAM_TENSORS_PER_LAUNCH") = ac::AdamTable::kMax;
  m.def("clip_single", &clip_single, "Single cooperative launch, same outputs as clip",
        py::arg("grads"), py::arg("max_norm"), py::arg("norm_type"), py::arg("apply"));
  m.def("single_supported", &single_supported, "Whether clip_single can take this list");
  m.def("adamw_clipped", &adamw_clipped,
        "AdamW step with g * scale folded in; skipped on device when nonfinite (k_adamw_clipped)",
        py::arg("params"), py::arg("grads"), py::arg("exp_avgs"), py::arg("exp_avg_sqs"),
        py::arg("steps"), py::arg("scale"), py::arg("nonfinite"), py::arg("lr"), py::arg("beta1"),
        py::arg("beta2"), py::arg("eps"), py::arg("weight_decay"));
}
