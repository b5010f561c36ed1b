"""Bring your own model and data: ``--model MODULE:FACTORY``, ``--data MODULE:FACTORY``.

    andrea-diag cascade --model mypkg.models:make_model --data mypkg.corpus:load --size tiny

Both are import specs, ``package.module:attribute`` (the attribute may be dotted,
``mod:Class.build``), imported the way ``python -c "import package.module"`` would from the
current directory. They are recorded in ``config.json`` (``model_factory``, ``data_factory``), so
``--resume``, checkpoints and every sweep cell rebuild the same thing.

A spec read back from a run directory (``--resume``) is untrusted: the run may come from
someone else, with a ``payload.py`` beside its ``config.json``, or name any installed function
(``os:abort``, ``sys:exit``). It is neither imported nor called on the run's word
(:func:`mark_recorded`): one line names it, and the user who trusts it gives it again on the
command line (``--resume DIR --model mod:make``: :func:`trust_spec`), which imports it as a
fresh run would.

**Model factory.** ``factory(config)`` is called with the size preset, a frozen
:class:`~andrea_diag.config.ModelConfig` with the fields ``name`` (a preset of ``MODEL_PRESETS``),
``d_model``, ``n_layer``, ``n_head``, ``block_size`` (the longest sequence the run feeds:
``--seq-len`` is at most this), ``vocab_size`` (8449, the toolkit tokenizer's size) and
``mlp_ratio`` (``vocab_size`` is ``--vocab-size`` when the data is token ids). It returns a ``torch.nn.Module`` whose ``forward(ids)`` takes int64 token ids
``(B, T)`` and returns logits ``(B, T, vocab_size)`` as a tensor (for a Hugging Face model, return
``.logits``; ``--hf-config`` does that for you). The trainer seeds torch with ``--seed`` right
before calling the factory, so every arm starts from the same initial weights, as with the
toolkit's own GPT. Use the preset's fields to ladder your architecture over ``--size``, or ignore
them. Dropout, if your model has any, draws from the same seeded stream in every arm.

**Data factory.** ``factory()`` is called with no arguments and returns a mapping from source
names to documents: ``{"repo-docs": ["doc one", "doc two", ...]}``. Keys are among the three
source names the bandit mixes (``repo-docs``, ``gutenberg``, ``hermes3-general``); a source the
mapping leaves out keeps its default text, exactly like ``--source NAME=PATH`` (a line says so;
``--sources only`` drops it). A value is a sequence of strings (documents) or a
:class:`~andrea_diag.data.corpus.Source`. The tokenizer is trained on the result (and cached by
its bytes), and both arms replay one batch plan, so batches are identical across arms. A value
may instead be token ids, a 1-D integer ``torch.Tensor`` or ``numpy.ndarray``, with
``--vocab-size``: then every value must be (no text shares their vocabulary), only the given
sources are used, and the tokenizer is skipped (``data/token_ids.py``; docs/extending.md).

Every mistake in a spec, a factory or what it returns is one :class:`~andrea_diag.errors.UserError`
(exit code 2), raised before any output exists. The run sheet (``summary.json``) and
``config.json`` record where the model and data came from: the spec, the module's file and the
distribution version when the module belongs to an installed package.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.metadata
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from andrea_diag.errors import UserError
from andrea_diag.host_memory import available_memory

if TYPE_CHECKING:
    from andrea_diag.config import RunConfig

CHECK_BATCH = 2  # rows of the shape check's ids
CHECK_TOKENS = 8  # tokens per row of the shape check (or seq_len, when shorter)
# specs read back from a run directory's config.json, with that directory: never imported or
# called unless typed again (see the module docstring)
_RECORDED: dict[str, Path] = {}


def mark_recorded(spec: str, run_dir: Path) -> None:
    """``spec`` came from ``run_dir``'s own files: never import it from the cwd or the run."""
    _RECORDED[spec] = Path(run_dir)


def trust_spec(spec: str | None) -> None:
    """``spec`` was given again on the command line: imported as a fresh run's would be."""
    if spec:
        _RECORDED.pop(spec, None)


def _import(module_name: str) -> Any:
    if "" not in sys.path and "." not in sys.path:
        # the console script does not put the working directory on sys.path; `python -m` does
        sys.path.insert(0, "")
    return importlib.import_module(module_name)


def load_factory(spec: str, option: str) -> Callable[..., Any]:
    """Import ``package.module:attribute`` and return the callable it names."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name.strip() or not attr.strip():
        raise UserError(
            f"{option} {spec!r} is not an import spec",
            hint=f"write {option} package.module:factory, e.g. {option} mymodels:make_model",
        )
    recorded = _RECORDED.get(spec)
    if recorded is not None:  # the run's word only: any installed function could be named
        raise UserError(
            f"{option} {spec!r} is named by the run's config.json in {recorded}; a run "
            "directory is untrusted, so a factory it names is not imported or called",
            hint=f"if you trust it, give it again: --resume {recorded} {option} {spec}",
        )
    try:
        obj: Any = _import(module_name.strip())
    except ImportError as exc:
        raise UserError(
            f"{option} {spec!r}: cannot import {module_name!r} ({exc})",
            hint="run from the folder that holds it, or put it on PYTHONPATH",
        ) from None
    except Exception as exc:  # the user's module raised while importing
        raise UserError(
            f"{option} {spec!r}: importing {module_name!r} raised {type(exc).__name__}: {exc}"
        ) from None
    except SystemExit as exc:  # not an Exception: it ended the command, the reason unsaid
        raise UserError(f"{option} {spec!r}: importing {module_name!r} {_exited(exc)}") from None
    for part in attr.strip().split("."):
        if not hasattr(obj, part):
            raise UserError(f"{option} {spec!r}: {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise UserError(f"{option} {spec!r}: {attr!r} is a {type(obj).__name__}, not a callable")
    return obj


@functools.cache
def _distributions() -> Mapping[str, list[str]]:
    """Top-level module -> distributions; cached: it reads every installed package's file list."""
    return importlib.metadata.packages_distributions()


def spec_origin(spec: str) -> dict[str, Any]:
    """Where a factory came from: the spec, the module's file, its distribution and version."""
    module_name = spec.partition(":")[0].strip()
    module = sys.modules.get(module_name)
    out: dict[str, Any] = {"spec": spec, "module_file": getattr(module, "__file__", None)}
    top = module_name.split(".")[0]
    dists = _distributions().get(top, [])
    if dists:
        out["package"] = dists[0]
        out["version"] = importlib.metadata.version(dists[0])
    return out


def _call(factory: Callable[..., Any], option: str, spec: str, *args: Any) -> Any:
    try:
        return factory(*args)
    except UserError:
        raise
    except Exception as exc:
        raise UserError(
            f"{option} {spec!r}: the factory raised {type(exc).__name__}: {exc}"
        ) from None
    except SystemExit as exc:  # `--model sys:exit` printed the size preset and exited 1
        raise UserError(f"{option} {spec!r}: the factory {_exited(exc)}") from None


def _exited(exc: SystemExit) -> str:
    """A factory's (or its module's) ``sys.exit(...)``, said: its code, cut short."""
    code = repr(exc.code)
    return f"called sys.exit({code if len(code) <= 80 else code[:77] + '...'})"


def build_model(cfg: RunConfig, *, checked: bool = True) -> torch.nn.Module:
    """The arm's model: the toolkit GPT, ``--hf-config``'s model, or ``--model``'s factory.

    Called right after ``torch.manual_seed(cfg.seed)``: what the factory draws is the same in
    every arm. The model's forward is checked on a small batch (under a forked RNG, so the
    check draws nothing from the run's stream); ``checked=False`` builds it only (on the meta
    device, where no forward runs: a resume's checkpoint check, experiments/resume.py).
    """
    if cfg.hf_config:
        from andrea_diag.integrations.hf_model import build_hf_model

        option, spec = "--hf-config", cfg.hf_config
        model = build_hf_model(spec, cfg.model, cfg.seq_len or cfg.model.block_size)
    elif cfg.model_factory:
        option, spec = "--model", cfg.model_factory
        model = _call(load_factory(spec, option), option, spec, cfg.model)
        if not isinstance(model, torch.nn.Module):
            raise UserError(
                f"--model {spec!r} returned a {type(model).__name__}, not a torch.nn.Module"
            )
    else:
        from andrea_diag.model import GPT

        return GPT(cfg.model)
    if not checked:
        return model
    # the trainer optimises what requires a gradient: with nothing, it failed deep in training
    # (an unpack error, or backward's "does not require grad"), after the run dir was written
    if not any(p.requires_grad for p in model.parameters()):
        raise UserError(
            f"{option} {spec!r} returned a model with no trainable parameters",
            hint="register its weights as torch.nn.Parameter with requires_grad=True",
        )
    check_forward(model, cfg, option, spec)
    return model


# Host bytes per parameter while an arm trains on the CPU: the fp32 weight, its gradient and
# AdamW's two moments. On a GPU the host holds the weights only, while they are made.
CPU_TRAIN_BYTES, WEIGHT_BYTES = 16, 4


def check_gpt_fits(cfg: RunConfig, device_type: str) -> None:
    """One line, before any output, where the toolkit's GPT for ``cfg`` (its size with
    ``--vocab-size``) cannot fit the memory free: ``--vocab-size 2147483647`` (which token ids
    may declare) made a 549 GB embedding, a traceback from the allocator and a run folder
    holding only ``cascade.json``; a smaller huge one was killed by the kernel."""
    n = cfg.model.n_params()
    per = CPU_TRAIN_BYTES if device_type == "cpu" else WEIGHT_BYTES
    need, free = n * per, available_memory()
    if free is not None and need > free:
        what = "weights, gradients and Adam's moments" if per == CPU_TRAIN_BYTES else "weights"
        raise UserError(
            f"the {cfg.size} model with a vocabulary of {cfg.model.vocab_size:,} has {n:,} "
            f"parameters: its {what} need {need / 2**30:,.1f} GiB, more than the "
            f"{free / 2**30:,.1f} GiB of memory free",
            hint="lower --vocab-size (token ids must stay below it), or pick a smaller --size",
        )


def check_model_spec(cfg: RunConfig) -> None:
    """``--model``/``--hf-config`` checked without building the model, for a run that trains on
    another host (a Slurm job): a factory may put its model on a GPU this host lacks, and a
    large config's weights need not be made on a login node. The factory is imported and must
    be callable; the config must parse and fit ``--seq-len``."""
    if cfg.hf_config:
        from andrea_diag.integrations.hf_model import hf_config

        hf_config(cfg.hf_config, cfg.model, cfg.seq_len or cfg.model.block_size)
    elif cfg.model_factory:
        load_factory(cfg.model_factory, "--model")


def check_forward(model: torch.nn.Module, cfg: RunConfig, option: str, spec: str) -> None:
    """``model(ids (B, T))`` must return a float tensor of logits ``(B, T, vocab_size)``."""
    t = min(CHECK_TOKENS, cfg.seq_len or CHECK_TOKENS)
    device = next(model.parameters(), torch.empty(0)).device
    ids = (
        torch.arange(CHECK_BATCH * t, device=device).reshape(CHECK_BATCH, t) % cfg.model.vocab_size
    )
    want = (CHECK_BATCH, t, cfg.model.vocab_size)
    was_training = model.training
    model.eval()
    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            out = _call(model, option, f"{spec} (forward)", ids)
    finally:
        model.train(was_training)
    if not isinstance(out, torch.Tensor):
        extra = " (return its .logits)" if hasattr(out, "logits") else ""
        raise UserError(
            f"{option} {spec!r}: forward returned a {type(out).__name__}, not a logits tensor"
            f"{extra}",
            hint=f"forward(ids (B, T)) must return logits (B, T, {cfg.model.vocab_size})",
        )
    if tuple(out.shape) != want or not out.is_floating_point():
        raise UserError(
            f"{option} {spec!r}: forward(ids {tuple(ids.shape)}) returned {out.dtype} "
            f"{tuple(out.shape)}, expected float logits {want}",
            hint=f"the vocabulary is vocab_size {cfg.model.vocab_size} (the toolkit tokenizer's, "
            "or --vocab-size for token ids)",
        )


def model_origin(cfg: RunConfig, model: torch.nn.Module) -> dict[str, Any]:
    """The run sheet's ``model`` entry: what was trained and where it came from."""
    out: dict[str, Any] = {
        "class": f"{type(model).__module__}.{type(model).__qualname__}",
        "n_params": sum(p.numel() for p in model.parameters()),
    }
    if cfg.hf_config:
        from andrea_diag.integrations.hf_model import hf_origin

        return {**out, "source": "hf-config", **hf_origin(model, cfg.hf_config)}
    if cfg.model_factory:
        return {**out, "source": "factory", **spec_origin(cfg.model_factory)}
    return {**out, "source": "toolkit GPT", "preset": cfg.size}


def run_sheet_origins(cfg: RunConfig, model: torch.nn.Module, data: Any) -> dict[str, Any]:
    """The run sheet's ``model`` and ``data`` entries: where each came from."""
    sources = getattr(data, "sources", {}) or {}
    entry: dict[str, Any] = {
        "factory": spec_origin(cfg.data_factory) if cfg.data_factory else None,
        "sources": {name: src.origin for name, src in sources.items()},
    }
    if getattr(data, "tokenizer", True) is None:  # token ids: their vocabulary, each file
        entry["token_ids"] = {
            "vocab_size": data.vocab_size,
            "sources": {name: src.describe() for name, src in sources.items()},
        }
    return {"model": model_origin(cfg, model), "data": entry}


def config_record(cfg: RunConfig, model: torch.nn.Module) -> dict[str, Any]:
    """``config.json``: the resolved config, the model's real parameter count and origin."""
    d = cfg.to_dict()
    d["model_config"]["n_params"] = sum(p.numel() for p in model.parameters())
    d["model_origin"] = model_origin(cfg, model)
    if cfg.data_factory:
        d["data_origin"] = spec_origin(cfg.data_factory)
    return d


def factory_sources(spec: str | None, vocab_size: int | None = None) -> dict[str, Any]:
    """``--data``'s sources by name (empty without a spec): :class:`Source` for documents,
    :class:`~andrea_diag.data.token_ids.TokenSource` for token ids (checked against
    ``vocab_size``, ``--vocab-size``); see the module docstring."""
    if not spec:
        return {}
    from andrea_diag.config import SOURCE_NAMES
    from andrea_diag.data.corpus import Source
    from andrea_diag.data.token_ids import is_token_value, token_source

    got = _call(load_factory(spec, "--data"), "--data", spec)
    if not isinstance(got, Mapping) or not got:
        raise UserError(
            f"--data {spec!r} returned {type(got).__name__}, not a non-empty mapping",
            hint='return {"repo-docs": ["document", ...]} (any of ' + ", ".join(SOURCE_NAMES) + ")",
        )
    origin = spec_origin(spec)
    where = f" ({Path(origin['module_file']).name})" if origin.get("module_file") else ""
    out: dict[str, Any] = {}
    for name, value in got.items():
        if name not in SOURCE_NAMES:
            raise UserError(
                f"--data {spec!r}: unknown source {name!r}",
                hint=f"the bandit mixes {', '.join(SOURCE_NAMES)}; name yours after one of them",
            )
        if isinstance(value, Source):
            out[name] = dataclasses.replace(value, name=name)
        elif is_token_value(value):
            out[name] = token_source(name, value, f"data factory: {spec}{where}", vocab_size)
        elif not isinstance(value, (list, tuple)) or not all(isinstance(d, str) for d in value):
            raise UserError(
                f"--data {spec!r}: source {name!r} must be a list of document strings, a "
                "Source, or a 1-D integer tensor of token ids"
            )
        elif not (docs := tuple(d for d in value if d.strip())):
            raise UserError(f"--data {spec!r}: source {name!r} contains no text")
        else:
            out[name] = Source(name, docs, f"data factory: {spec}{where}", generated=False)
    return out


def prepare_run_data(cfg: RunConfig) -> Any:
    """A resolved run config's data (``PreparedData``): ``--source``, ``--data``,
    ``--vocab-size`` and ``--sources``. Token-id sources are checked to hold one training and
    one held-out sequence, so a too-short file fails before any output exists (text keeps its
    own checks, where the batches and the eval set are drawn)."""
    from andrea_diag.data.heldout import check_fits
    from andrea_diag.data.prepare import prepare_data

    data = prepare_data(
        cfg.sources,
        seed=cfg.corpus_seed,
        given=factory_sources(cfg.data_factory, cfg.vocab_size),
        declared_vocab=cfg.vocab_size,
        only=cfg.source_mode == "only",
    )
    if cfg.seq_len and data.tokenizer is None:
        check_fits(data.streams, cfg.seq_len)
    return data
