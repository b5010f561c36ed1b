"""How :class:`~andrea_diag.clip.fused_adamw.ClippedAdamW` is pickled and restored, as
``torch.optim.AdamW`` is: ``copy.deepcopy``, ``pickle`` and ``torch.save(optimizer)`` give an
optimizer that steps, and a state dict saved by an older torch loads.

torch's ``Optimizer.__getstate__`` keeps only ``defaults``, ``state`` and ``param_groups``; the
clip's own settings (``max_norm``, ``norm_type``, ``impl``) live beside them, so a copy lost
them and its first ``step()`` raised ``AttributeError``. torch's ``Adam.__setstate__`` (which
``load_state_dict`` also calls) fills the group keys an older torch did not save and turns an
integer ``step`` into a tensor; ours kept such a group as it came and crashed at its step.
"""

from __future__ import annotations

from typing import Any

import torch

# The clip's settings and its last record: what a copy needs to step as the original does.
CLIP_ATTRS = ("max_norm", "norm_type", "impl", "last_clip", "last_impl")

# Group keys a torch before 2.x did not save, with the values this step runs with (AdamW's
# decay is always decoupled here; capturable keeps ``step`` on the parameter's device).
GROUP_DEFAULTS: dict[str, Any] = {
    "amsgrad": False,
    "maximize": False,
    "foreach": None,
    "capturable": True,
    "differentiable": False,
    "fused": None,
}


class AdamWPickling:
    """Mixin placed before ``torch.optim.Optimizer``: the clip's settings travel with a pickled
    or deep-copied optimizer, and restored groups get torch AdamW's keys and tensor steps."""

    def __getstate__(self) -> dict[str, Any]:
        state: dict[str, Any] = super().__getstate__()  # type: ignore[misc]
        state.update({k: self.__dict__[k] for k in CLIP_ATTRS if k in self.__dict__})
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)  # type: ignore[misc]
        self.__dict__.setdefault("last_clip", None)
        self.__dict__.setdefault("last_impl", None)
        groups: list[dict[str, Any]] = self.param_groups  # type: ignore[attr-defined]
        opt_state: dict[Any, dict[str, Any]] = self.state  # type: ignore[attr-defined]
        for group in groups:
            for key, value in GROUP_DEFAULTS.items():
                group.setdefault(key, value)
            group["decoupled_weight_decay"] = True  # as torch's AdamW.__setstate__ sets it
            for p in group["params"]:
                st = opt_state.get(p)
                if st and "step" in st and not torch.is_tensor(st["step"]):
                    # an int step (torch < 1.12): the 0-dim float32 tensor the step reads
                    st["step"] = torch.tensor(
                        float(st["step"]), dtype=torch.float32, device=p.device
                    )
