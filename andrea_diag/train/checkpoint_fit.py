"""What a checkpoint must be before a byte of its tensor data is read: its size against the
memory free and against what the run it is to fill needs, its names, and each model and
optimizer tensor's dtype and shape.

    need = need_for(cfg)                   # the toolkit GPT and its optimizer, on the meta device
    check_file_size(path, need)            # by stat: a 40 GiB sparse file is refused unopened
    head = Header.of(f, path)              # safetensors' own header reader (safe_open): no data
    check_layout(path, head, tree, need)   # the model's and the optimizer's tensors, one by one

A run directory is untrusted input (``checkpoint.py``). A safetensors header declares every
tensor's dtype and shape, and safetensors checks that the file holds those bytes, not that they
are few: a header declaring a tensor of many GiB over a sparse file (which costs its maker
nothing) was mapped and read whole at ``--resume``, until the memory ran out; a tensor of the
wrong shape was read whole before ``load_state_dict`` refused it, and one of another dtype was
cast without a word. :class:`Need` is what the model and optimizer being resumed hold, from the
live objects (:meth:`Need.of`: the trainer's, or a ``--model``/``--hf-config`` one built on the
meta device by ``experiments/resume.py``) or, for the toolkit GPT, built on the meta device from
the run's config (:func:`need_for`, no memory); a model that cannot be built so is known by its
parameter count alone (:meth:`Need.of_count`, a byte budget) until the trainer's check. The file's size bounds its
declared tensors too: safetensors refuses a file its header does not cover exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import torch

from andrea_diag.config import RunConfig
from andrea_diag.errors import UserError
from andrea_diag.host_memory import available_memory
from andrea_diag.model import GPT
from andrea_diag.rundir import check_size
from andrea_diag.train.optim import build_optimizer
from andrea_diag.train.state_codec import encoded_items, tensor_ref

STATE_KEY = "state"  # the JSON document's tensor (checkpoint.py writes it)
# the JSON document: RNG states, batch plan, probe windows (a tiny run's is 33 kB; one that
# grows with the run is a few bytes an update): read before the tensors, so it has a cap
MAX_DOC_BYTES = 64 << 20
# tensors beside the model and optimizer (RNG states, lock-in prompts, clipper windows) and
# the safetensors header
SLACK_BYTES = 64 << 20
# what a checkpoint holds per parameter beyond the model's own tensors: Adam's m and v, the
# optimizer-state probe's two shadow buffers (probes/shadow.py), and one spare, so a
# component that starts saving a copy does not refuse every resume (keep in sync past that)
PER_PARAM = 5
SHADOW_ITEMSIZE = 4  # the shadow buffers are fp32 whatever the parameters' dtype
WIDEST = 8  # bytes per element of a model known by its count alone (a factory's): float64
COPIES = 2  # the file's tensors, and the state they become while the trainer loads them
# safetensors' dtype names (a header's "dtype") of the torch dtypes a checkpoint may hold
TORCH_NAMES = {torch.bool: "BOOL", torch.uint8: "U8", torch.int8: "I8", torch.int16: "I16",
               torch.uint16: "U16", torch.float16: "F16", torch.bfloat16: "BF16",
               torch.int32: "I32", torch.uint32: "U32", torch.float32: "F32",
               torch.int64: "I64", torch.uint64: "U64", torch.float64: "F64",
               torch.complex64: "C64", torch.float8_e5m2: "F8_E5M2",
               torch.float8_e4m3fn: "F8_E4M3"}  # fmt: skip
ITEMSIZE = {name: torch.empty(0, dtype=d).element_size() for d, name in TORCH_NAMES.items()}
MOMENTS = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")  # Adam's per-parameter state: its shape

Spec = tuple[str, tuple[int, ...]]  # a tensor's safetensors dtype name and shape


def spec_of(t: torch.Tensor) -> Spec:
    return TORCH_NAMES.get(t.dtype, str(t.dtype)), tuple(t.shape)


def nbytes(spec: Spec) -> int:
    return math.prod(spec[1]) * ITEMSIZE.get(spec[0], WIDEST)


def shown(spec: Spec) -> str:
    return f"{spec[0]} {list(spec[1])}"


@dataclass(frozen=True)
class Need:
    """What a checkpoint is to fill: the model's tensors (state_dict name -> spec) and the
    optimizer's parameters in its order (None: not known before the model is built), and the
    most bytes a checkpoint of them can hold."""

    model: dict[str, Spec] | None
    params: list[Spec] | None
    max_bytes: int

    @classmethod
    def of(cls, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Need:
        """From the objects themselves (meta tensors too): shapes and dtypes, no data."""
        tensors = {k: spec_of(v) for k, v in model.state_dict().items()}
        params = [spec_of(p) for g in optimizer.param_groups for p in g["params"]]
        per_param = sum(math.prod(s) * max(ITEMSIZE.get(d, WIDEST), SHADOW_ITEMSIZE)
                        for d, s in params)  # fmt: skip
        total = sum(map(nbytes, tensors.values())) + PER_PARAM * per_param
        return cls(tensors, params, total + MAX_DOC_BYTES + SLACK_BYTES)

    @classmethod
    def of_count(cls, n_params: int) -> Need:
        """A model known by its parameter count alone: a budget, widest dtype assumed."""
        total = n_params * WIDEST * (1 + PER_PARAM)
        return cls(None, None, total + MAX_DOC_BYTES + SLACK_BYTES)


def need_for(cfg: RunConfig) -> Need | None:
    """The toolkit GPT's need, built on the meta device (no memory, no data) with the
    trainer's own builders (factories.build_model's GPT, optim.build_optimizer: their
    parameter order is the optimizer state's). None for a ``--model`` or ``--hf-config``
    model, which only the user's code builds."""
    if cfg.model_factory or cfg.hf_config:
        return None
    with torch.device("meta"):
        model = GPT(cfg.model)
    return need_of(model, cfg)


def need_of(model: torch.nn.Module, cfg: RunConfig) -> Need:
    """``model``'s need with the optimizer the trainer builds for it (its parameter order)."""
    lr = cfg.lr if cfg.lr is not None else cfg.recipe_cfg.lr
    return Need.of(model, build_optimizer(model, cfg.recipe_cfg, lr, torch.device("cpu")))


def check_file_size(path: Path, need: Need | None, opened: IO[Any] | None = None) -> None:
    """By ``stat`` (of ``opened``, the file as opened, when given), before safetensors maps
    the file: more than the need, or than the memory free holds ``COPIES`` of, is refused
    unread."""
    if need is not None:
        check_size(path, "checkpoint", need.max_bytes, "more than this run's model and "
                   "optimizer hold", opened)  # fmt: skip
    free = available_memory()
    if free is not None:
        check_size(path, "checkpoint", free // COPIES, "more than the memory free holds", opened)


@dataclass(frozen=True)
class Header:
    """A checkpoint's header as safetensors reads it: metadata and each tensor's spec."""

    meta: dict[str, str]
    specs: dict[str, Spec]

    @classmethod
    def of(cls, f: Any, path: Path) -> Header:
        """From an open ``safe_open`` handle: no tensor data is read. Every name is ``STATE_KEY``
        or ``t<i>`` for i below the count, and the document is a byte string under its cap."""
        specs = {}
        for name in f.keys():  # noqa: SIM118 - not a dict
            s = f.get_slice(name)
            specs[name] = (str(s.get_dtype()), tuple(int(n) for n in s.get_shape()))
        head = cls(dict(f.metadata() or {}), specs)
        n = len(specs) - (STATE_KEY in specs)
        if set(specs) - {STATE_KEY} != {f"t{i:06d}" for i in range(n)}:
            raise UserError(f"checkpoint {path} holds tensors of names we never write",
                            hint="it is not one we wrote")  # fmt: skip
        doc = specs.get(STATE_KEY)
        if doc is not None and (doc[0] != "U8" or len(doc[1]) != 1 or doc[1][0] > MAX_DOC_BYTES):
            raise UserError(f"checkpoint {path}'s state document is {shown(doc)}, not bytes "
                            f"under {MAX_DOC_BYTES >> 20} MiB", hint="it is not one we wrote")  # fmt: skip
        return head

    def tensor(self, i: int) -> Spec | None:
        return self.specs.get(f"t{i:06d}")


def _misfit(path: Path, what: str) -> UserError:
    return UserError(
        f"checkpoint {path} does not fit this run ({what})",
        hint="nothing was changed; delete the arm's checkpoints folder to restart the arm",
    )


def _spec(path: Path, head: Header, entry: Any, where: str) -> Spec:
    i = tensor_ref(entry)
    spec = head.tensor(i) if i is not None else None
    if spec is None:
        raise _misfit(path, f"{where} is no tensor of the file")
    return spec


def check_layout(path: Path, head: Header, tree: Any, need: Need) -> None:
    """Every model tensor of the run, and each Adam moment against its parameter, by name,
    dtype and shape, from the header and the JSON document: before their data is read."""
    trainer = tree.get("trainer") if isinstance(tree, dict) else None
    model = encoded_items(trainer.get("model")) if isinstance(trainer, dict) else None
    if need.model is not None:
        if model is None:
            raise _misfit(path, "it holds no model")
        got = {str(k): _spec(path, head, v, f"model tensor {k}") for k, v in model}
        for name in dict.fromkeys([*need.model, *got]):
            want, have = need.model.get(name), got.get(name)
            if want != have:
                said = "none" if have is None else shown(have)
                wanted = "none" if want is None else shown(want)
                raise _misfit(path, f"model tensor {name} is {said}, the model's {wanted}")
    opt = trainer.get("optimizer") if isinstance(trainer, dict) else None
    state = encoded_items(opt.get("state")) if isinstance(opt, dict) else None
    if need.params is None or state is None:
        return  # no optimizer state (before the first step) is torch's to judge
    for index, moments in state:
        if type(index) is not int or not 0 <= index < len(need.params):
            raise _misfit(path, f"optimizer state for parameter {index!r} of {len(need.params)}")
        for key, entry in encoded_items(moments) or []:
            if key in MOMENTS and (have := _spec(path, head, entry, key)) != need.params[index]:
                raise _misfit(path, f"optimizer {key} of parameter {index} is {shown(have)}, "
                              f"the parameter {shown(need.params[index])}")  # fmt: skip


def expected_need(config: Mapping[str, Any] | None, expect: Mapping[str, Any]) -> Need | None:
    """The need of the trainer restoring a checkpoint: from its config.json (written by this
    process) for the toolkit GPT, else from its parameter count in ``expect``."""
    if isinstance(config, Mapping):
        try:
            need = need_for(RunConfig.from_dict(dict(config)))
        except (TypeError, ValueError, KeyError, AttributeError, UserError):
            need = None  # not a config of ours: the count below still bounds the file
        if need is not None:
            return need
    n = expect.get("n_params")
    return Need.of_count(n) if isinstance(n, int) and not isinstance(n, bool) else None
