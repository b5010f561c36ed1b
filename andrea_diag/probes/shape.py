"""What the probes need to know about a model they did not build: layer groups, vocabulary and
position-table sizes, read from its module types and config (``SpikeMonitor`` can override each).

    groups = layer_groups(model)          # {param name: (layer, kind)}
    vocab, block = vocab_size_of(model), block_size_of(model)

**Layer groups** (the ``layer_gn/<layer>.<kind>`` columns). A *block* is a child of an
``nn.ModuleList`` / ``nn.Sequential`` that is itself a container (GPT-2's ``transformer.h.3``,
Llama's ``model.layers.3``, ``nn.TransformerEncoder``'s ``layers.3``, nanoGPT's
``transformer.h.3``): its parameters are layer ``hNN``, kind by module type:

- a norm (``nn.LayerNorm``, ``nn.RMSNorm``, or any class whose name ends in ``Norm``, such as
  nanoGPT's own ``LayerNorm`` or ``LlamaRMSNorm``) -> ``norm``;
- inside ``nn.MultiheadAttention`` or a module whose class or attribute name says attention
  (``GPT2Attention``, ``self_attn``, ``attn``) -> ``attention``;
- anything else with weights (an MLP class, ``linear1``/``linear2`` of
  ``nn.TransformerEncoderLayer``, GPT-2's ``Conv1D``) -> ``mlp``.

Outside the blocks: ``nn.Embedding`` -> ``embed.embedding``; a norm -> ``final.norm`` after the
blocks (``embed.norm`` before them); a ``Linear`` whose output size is the vocabulary, or any
module after the blocks -> ``head.head``; other modules before the blocks -> ``embed.embedding``.
A tied head shares its tensor with the embedding and is counted there (``named_parameters``
lists a shared tensor once). A model with no blocks (an MLP) gets one group per parameterised
leaf module, ``hNN.<kind>``, its last ``Linear`` the head. Our own GPT groups exactly as
:func:`andrea_diag.model.param_group_of` names it, which the trainer uses.

**Vocabulary**: ``config.vocab_size`` (``model.cfg`` or ``model.config``), else the output
embedding's rows, else the one ``nn.Embedding`` whose size a final ``Linear`` produces, else the
only ``nn.Embedding``. **Positions**: ``config.block_size`` / ``n_positions`` /
``max_position_embeddings`` / ``n_ctx``, else the one ``nn.Embedding`` that is not the token
table. None when it cannot tell: the caller says so (``SpikeMonitor`` warns and skips lock-in).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

from andrea_diag.errors import UserError
from andrea_diag.model import param_group_of

Group = tuple[str, str]
POSITION_KEYS = ("block_size", "n_positions", "max_position_embeddings", "n_ctx")
_ATTN_WORDS = ("attn", "attention")


def _config(model: nn.Module) -> Any:
    return getattr(model, "cfg", None) or getattr(model, "config", None)


def is_norm(module: nn.Module) -> bool:
    norms = (nn.LayerNorm, nn.GroupNorm, nn.modules.batchnorm._BatchNorm)
    rms = getattr(nn, "RMSNorm", None)
    return isinstance(module, norms + ((rms,) if rms else ())) or type(module).__name__.endswith(
        "Norm"
    )


def _is_attention(name: str, module: nn.Module) -> bool:
    cls = type(module).__name__.lower()
    return isinstance(module, nn.MultiheadAttention) or any(
        w in cls or w == name.lower() or name.lower().endswith("_" + w) for w in _ATTN_WORDS
    )


def _blocks(model: nn.Module) -> dict[str, int]:
    """Module path of each block -> its index (the first list of containers, outermost)."""
    out: dict[str, int] = {}
    for path, mod in model.named_modules():
        if not isinstance(mod, (nn.ModuleList, nn.Sequential)):
            continue
        if any(path == b or path.startswith(b + ".") for b in out):
            continue  # a list inside a block (experts, a Sequential MLP): part of that block
        kids = list(mod.named_children())
        if kids and all(any(True for _ in c.children()) for _, c in kids):
            offset = len(out)  # a second list (a decoder after an encoder) numbers on
            for i, (name, _) in enumerate(kids):
                out[f"{path}.{name}" if path else name] = offset + i
    return out


def _kind_in_block(model: nn.Module, block: str, owner: str) -> str:
    """attention / norm / mlp for a parameter of module ``owner`` inside ``block``."""
    mod = model.get_submodule(owner) if owner else model
    if is_norm(mod):
        return "norm"
    rel = owner[len(block) :].strip(".").split(".") if owner != block else []
    path = block
    for part in rel:  # any ancestor between the block and the owner says attention
        path = f"{path}.{part}"
        if _is_attention(part, model.get_submodule(path)):
            return "attention"
    return "mlp"


def _vocab_of_embeddings(model: nn.Module, embeds: list[nn.Embedding]) -> int | None:
    sizes = {e.num_embeddings for e in embeds}
    outs = [m.out_features for m in model.modules() if isinstance(m, nn.Linear)]
    tied = [v for v in outs[-1:] if v in sizes]  # the last Linear produces a table's size
    if tied:
        return tied[0]
    return embeds[0].num_embeddings if len(embeds) == 1 else None


def vocab_size_of(model: nn.Module) -> int | None:
    """The model's vocabulary size, or None when nothing says it (see the module docstring)."""
    v = getattr(_config(model), "vocab_size", None)
    if isinstance(v, int) and v > 0:
        return v
    get_out = getattr(model, "get_output_embeddings", None)
    head = get_out() if callable(get_out) else None
    if head is not None and getattr(head, "weight", None) is not None:
        return int(head.weight.shape[0])
    embeds = [m for m in model.modules() if isinstance(m, nn.Embedding)]
    return _vocab_of_embeddings(model, embeds) if embeds else None


def block_size_of(model: nn.Module, vocab_size: int | None = None) -> int | None:
    """The longest context the model's position table holds, or None when it has none known."""
    cfg = _config(model)
    for key in POSITION_KEYS:
        v = getattr(cfg, key, None) if cfg is not None else None
        if isinstance(v, int) and v > 0:
            return v
    vocab = vocab_size or vocab_size_of(model)
    others = [
        m.num_embeddings
        for m in model.modules()
        if isinstance(m, nn.Embedding) and m.num_embeddings != vocab
    ]
    return others[0] if len(others) == 1 else None


def has_unknown_positions(model: nn.Module, vocab_size: int | None) -> bool:
    """Several tables besides the token one and no config saying which holds positions."""
    if block_size_of(model, vocab_size) is not None:
        return False
    n = sum(
        1 for m in model.modules() if isinstance(m, nn.Embedding) and m.num_embeddings != vocab_size
    )
    return n > 1


def _outside(mod: nn.Module, after: bool, vocab: int | None) -> Group:
    """The group of a parameter outside the blocks (``after``: registered after the first)."""
    if isinstance(mod, nn.Embedding):
        return "embed", "embedding"
    if is_norm(mod):
        return ("final" if after else "embed"), "norm"
    if after or (isinstance(mod, nn.Linear) and vocab is not None and mod.out_features == vocab):
        return "head", "head"
    return "embed", "embedding"


def _leaf_groups(model: nn.Module) -> dict[str, Group]:
    """A model without blocks: one group per parameterised leaf module, the last Linear that
    trains the head (a frozen Linear registered last is not what the probes see as the head)."""
    out: dict[str, Group] = {}
    owners = [
        (p, m)
        for p, m in model.named_modules()
        if next(m.parameters(recurse=False), None) is not None
    ]
    last_linear = max(
        (i for i, (_, m) in enumerate(owners) if isinstance(m, nn.Linear) and _trains(m)),
        default=-1,
    )
    for i, (path, mod) in enumerate(owners):
        kind = "embedding" if isinstance(mod, nn.Embedding) else "norm" if is_norm(mod) else "mlp"
        group = ("head", "head") if i == last_linear and i > 0 else (f"h{i:02d}", kind)
        for pname, _ in mod.named_parameters(recurse=False):
            out[f"{path}.{pname}" if path else pname] = group
    return out


def _trains(mod: nn.Module) -> bool:
    return any(p.requires_grad for p in mod.parameters(recurse=False))


def layer_groups(model: nn.Module) -> dict[str, Group]:
    """``{parameter name: (layer, kind)}`` for every parameter ``named_parameters`` lists."""
    blocks = _blocks(model)
    if not blocks:
        groups = _leaf_groups(model)
        return {n: groups.get(n) or param_group_of(n) for n, _ in model.named_parameters()}
    vocab = vocab_size_of(model)
    order = {path: i for i, (path, _) in enumerate(model.named_modules())}
    first_block = min(order[b] for b in blocks)
    out: dict[str, Group] = {}
    for name, _ in model.named_parameters():
        owner = name.rpartition(".")[0]
        block = next((b for b in blocks if owner == b or owner.startswith(b + ".")), None)
        if block is not None:
            out[name] = (f"h{blocks[block]:02d}", _kind_in_block(model, block, owner))
            continue
        mod = model.get_submodule(owner) if owner else model
        out[name] = _outside(mod, order.get(owner, 0) > first_block, vocab)
    return out


def resolve_groups(model: nn.Module, override: Any = None) -> dict[str, Group]:
    """The groups ``SpikeMonitor`` uses: ``override`` first, inference for the rest.

    ``override``: a callable ``name -> (layer, kind)`` or ``"layer.kind"`` (None: inferred), or a
    mapping from a parameter name or a module prefix (``"enc.layers.0"``) to either form.
    """
    inferred = layer_groups(model)
    if override is None:
        return inferred
    out: dict[str, Group] = {}
    for name, group in inferred.items():
        if callable(override):
            given = override(name)
        else:
            keys = [k for k in override if name == k or name.startswith(f"{k}.")]
            given = override[max(keys, key=len)] if keys else None
        out[name] = _as_group(given, name) if given is not None else group
    return out


def _as_group(value: Any, param: str) -> Group:
    """``"h03.mlp"`` or ``("h03", "mlp")``; refused in one line here, at construction, rather
    than as an undeclared metric column at the first update (which would disable two probes)."""
    if isinstance(value, str):
        layer, _, kind = value.partition(".")
        group = (layer, kind or "all")
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        group = (str(value[0]), str(value[1]))
    else:
        group = None
    if group is None or not all(group) or any("/" in g for g in group) or "." in group[0]:
        raise UserError(
            f"layer_groups gives parameter {param!r} the group {value!r}",
            hint="a group is 'layer.kind' or ('layer', 'kind'): both non-empty, no '/' "
            "and no '.' in the layer",
        )
    return group


def model_shape(
    model: nn.Module,
    override: Callable[[str], Any] | Mapping[str, Any] | None,
    vocab_size: int | None,
    block_size: int | None,
) -> dict[str, Any]:
    """The groups, vocabulary and position limit the probes use: given, else inferred.

    ``unknown``: ``"<argument>: why"`` for what the lock-in probe needs and nothing says (empty
    when all is known).
    A missing vocabulary leaves the verdict without its never-learned level; several embedding
    tables and no config naming the positions leave the samples able to index past the table.
    """
    groups = resolve_groups(model, override)
    vocab = vocab_size or vocab_size_of(model)
    block = block_size or block_size_of(model, vocab)
    unknown = (
        "vocab_size: nothing says the model's vocabulary size (no config.vocab_size, output "
        "embedding or nn.Embedding)"
        if vocab is None
        else "block_size: nothing says which of the model's embedding tables holds positions "
        "(no config.block_size, n_positions or max_position_embeddings)"
        if block is None and has_unknown_positions(model, vocab)
        else ""
    )
    counts: dict[str, int] = {}
    # the tensors the probes read: a frozen one has no gradient and no optimizer state
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    for name, g in groups.items():
        if name in trained:
            counts[".".join(g)] = counts.get(".".join(g), 0) + 1
    return {"groups": groups, "vocab_size": vocab, "block_size": block, "unknown": unknown,
            "layer_groups": counts}  # fmt: skip


__all__ = [
    "block_size_of",
    "has_unknown_positions",
    "layer_groups",
    "model_shape",
    "resolve_groups",
    "vocab_size_of",
]
