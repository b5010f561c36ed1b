"""A checkpoint's state as JSON plus a list of tensors: no pickle, so reading one runs no code.

    tree, tensors = encode(state)          # tree: JSON-able; tensors: CPU tensors by index
    state = decode(tree, tensors)          # the same values, bit for bit
    pairs = encoded_items(tree["model"])   # the tree walked before any tensor is read
    i = tensor_ref(pairs[0][1])            # {"$tensor": i} -> i

A run directory is untrusted input (someone else's sweep, a CI artifact), and a pickle can run
anything while it is read. So a checkpoint holds tensors in safetensors and everything else as
JSON, with a few tagged shapes JSON has no word for: ``{"$tuple": [...]}``, ``{"$deque": [...],
"maxlen": n}``, ``{"$set": [...]}``, ``{"$dict": [[key, value], ...]}`` (keys that are not plain
strings), ``{"$float": "nan"}``, ``{"$bytes": base64}``, ``{"$tensor": i}``, ``{"$ndarray": i}``,
``{"$npscalar": dtype, "value": v}``, ``{"$dtype": name}``, ``{"$random": state}`` (a
``random.Random``) and ``{"$object": name, "state": {...}}`` for the few toolkit classes a probe
or the batch plan keeps (:data:`ALLOWED_CLASSES`, an explicit allow-list: a name outside it is
refused, and an allowed class is rebuilt without running its ``__init__``). Python's ``json``
writes floats with ``repr``, which reads back to the same bits.
"""

from __future__ import annotations

import base64
import collections
import importlib
import math
import random
from typing import Any

import numpy as np
import torch

# the toolkit objects a checkpoint's state holds (probe attributes, the batch plan's mixer)
ALLOWED_CLASSES = frozenset(
    {
        "andrea_diag.data.bandit.Mixer",
        "andrea_diag.data.bandit.Phase",
        "andrea_diag.data.generators.Rng",
        "andrea_diag.probes.shadow.GroupInfo",
        "andrea_diag.probes.shadow.SpikeTerm",
    }
)
NUMPY_KINDS = "biuf"  # bool, int, unsigned, float: numpy scalars and arrays a state may hold


class StateFormatError(ValueError):
    """The state holds something the codec does not write or read (one line, for the caller)."""


def _class_name(obj: Any) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


class _Encoder:
    def __init__(self) -> None:
        self.tensors: list[torch.Tensor] = []
        self._storages: set[int] = set()

    def tensor(self, t: torch.Tensor) -> int:
        t = t.detach().to("cpu")
        ptr = t.untyped_storage().data_ptr() if t.numel() else 0
        # safetensors refuses tensors that share memory (tied weights): give repeats their own
        if ptr and ptr in self._storages:
            t = t.clone()
        self._storages.add(ptr)
        self.tensors.append(t.contiguous())
        return len(self.tensors) - 1

    def __call__(self, x: Any) -> Any:
        if x is None or isinstance(x, (bool, int, str)):
            return x
        if isinstance(x, float):
            return x if math.isfinite(x) else {"$float": repr(x)}
        if isinstance(x, torch.Tensor):
            out = {"$tensor": self.tensor(x)}
            if isinstance(x, torch.nn.Parameter):
                out["param"] = True
            if x.requires_grad:
                out["grad"] = True
            return out
        if isinstance(x, np.ndarray):
            if x.dtype.kind not in NUMPY_KINDS:
                raise StateFormatError(f"a numpy array of dtype {x.dtype}")
            return {"$ndarray": self.tensor(torch.from_numpy(np.ascontiguousarray(x)))}
        if isinstance(x, np.generic):
            if x.dtype.kind not in NUMPY_KINDS:
                raise StateFormatError(f"a numpy scalar of dtype {x.dtype}")
            return {"$npscalar": x.dtype.str, "value": self(x.item())}
        if isinstance(x, dict):
            plain = type(x) is dict and all(isinstance(k, str) and k[:1] != "$" for k in x)
            if plain:
                return {k: self(v) for k, v in x.items()}
            tag = "$odict" if isinstance(x, collections.OrderedDict) else "$dict"
            return {tag: [[self(k), self(v)] for k, v in x.items()]}
        if isinstance(x, list):
            return [self(v) for v in x]
        if isinstance(x, tuple):
            return {"$tuple": [self(v) for v in x]}
        if isinstance(x, collections.deque):
            return {"$deque": [self(v) for v in x], "maxlen": x.maxlen}
        if isinstance(x, (set, frozenset)):
            return {"$set": [self(v) for v in x], "frozen": isinstance(x, frozenset)}
        if isinstance(x, bytes):
            return {"$bytes": base64.b64encode(x).decode("ascii")}
        if isinstance(x, torch.dtype):
            return {"$dtype": str(x).removeprefix("torch.")}
        if type(x) is random.Random:
            return {"$random": self(x.getstate())}
        name = _class_name(x)
        if name in ALLOWED_CLASSES:
            return {"$object": name, "state": {k: self(v) for k, v in vars(x).items()}}
        raise StateFormatError(f"an object of type {name}")


def encode(state: Any) -> tuple[Any, list[torch.Tensor]]:
    """``state`` as a JSON-able tree and the tensors it refers to (CPU, contiguous)."""
    enc = _Encoder()
    tree = enc(state)
    return tree, enc.tensors


def _allowed_class(name: Any) -> type:
    if not isinstance(name, str) or name not in ALLOWED_CLASSES:
        raise StateFormatError(f"an object of a class outside the allow-list ({name!r})")
    module, _, qualname = name.rpartition(".")
    return getattr(importlib.import_module(module), qualname)  # a fixed toolkit module


class _Decoder:
    def __init__(self, tensors: list[torch.Tensor]) -> None:
        self.tensors = tensors

    def tensor(self, i: Any) -> torch.Tensor:
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < len(self.tensors):
            raise StateFormatError(f"a reference to a missing tensor ({i!r})")
        return self.tensors[i]

    def __call__(self, x: Any) -> Any:
        if x is None or isinstance(x, (bool, int, str, float)):
            return x
        if isinstance(x, list):
            return [self(v) for v in x]
        if not isinstance(x, dict):
            raise StateFormatError(f"a {type(x).__name__}")
        tag = next((k for k in x if k.startswith("$")), None)
        if tag is None:
            return {k: self(v) for k, v in x.items()}
        v = x[tag]
        if tag == "$float" and v in ("nan", "inf", "-inf"):
            return float(v)
        if tag == "$tensor":
            t = self.tensor(v)
            if x.get("grad") and not (t.is_floating_point() or t.is_complex()):
                raise StateFormatError(f"an integer tensor ({t.dtype}) that requires a gradient")
            t = torch.nn.Parameter(t, requires_grad=bool(x.get("grad"))) if x.get("param") else t
            return t.requires_grad_() if x.get("grad") and not t.requires_grad else t
        if tag == "$ndarray":
            return self.tensor(v).numpy().copy()
        if tag == "$npscalar":
            dtype = np.dtype(str(v)) if isinstance(v, str) and len(v) <= 4 else None
            if dtype is None or dtype.kind not in NUMPY_KINDS:
                raise StateFormatError(f"a numpy scalar of dtype {v!r}")
            return dtype.type(self(x.get("value")))
        if tag in ("$tuple", "$deque", "$set") and isinstance(v, list):
            items = [self(i) for i in v]
            if tag == "$tuple":
                return tuple(items)
            if tag == "$deque":
                maxlen = x.get("maxlen")
                if maxlen is not None and (not isinstance(maxlen, int) or maxlen < 0):
                    raise StateFormatError(f"a deque of maxlen {maxlen!r}")
                return collections.deque(items, maxlen=maxlen)
            return frozenset(items) if x.get("frozen") else set(items)
        if tag in ("$dict", "$odict") and isinstance(v, list):
            pairs = [self(p) for p in v]
            if not all(isinstance(p, list) and len(p) == 2 for p in pairs):
                raise StateFormatError("a mapping whose items are not pairs")
            cls = collections.OrderedDict if tag == "$odict" else dict
            return cls((k, val) for k, val in pairs)
        if tag == "$bytes" and isinstance(v, str):
            return base64.b64decode(v, validate=True)
        if tag == "$dtype" and isinstance(getattr(torch, str(v), None), torch.dtype):
            return getattr(torch, str(v))
        if tag == "$random":
            r = random.Random()
            r.setstate(self(v))
            return r
        if tag == "$object" and isinstance(x.get("state"), dict):
            obj = object.__new__(_allowed_class(v))  # no __init__, no __setstate__: no code
            vars(obj).update({str(k): self(val) for k, val in x["state"].items()})
            return obj
        raise StateFormatError(f"an unknown or malformed entry {tag!r}")


def decode(tree: Any, tensors: list[torch.Tensor]) -> Any:
    """The state :func:`encode` wrote. Anything else is a :class:`StateFormatError`."""
    try:
        return _Decoder(tensors)(tree)
    except StateFormatError:
        raise
    # unhashable keys, a value past its numpy scalar or deque maxlen (OverflowError), a
    # Parameter torch refuses (RuntimeError): one line, never a traceback
    except (TypeError, ValueError, KeyError, RecursionError, ArithmeticError, RuntimeError) as exc:
        raise StateFormatError(f"a malformed entry ({type(exc).__name__}: {exc})") from None


def tensor_ref(entry: Any) -> int | None:
    """The index an encoded ``{"$tensor": i}`` or ``{"$ndarray": i}`` refers to, else None:
    read before the tensors are (``checkpoint_fit.py`` checks their specs first)."""
    if not isinstance(entry, dict):
        return None
    i = entry.get("$tensor", entry.get("$ndarray"))
    return i if type(i) is int and i >= 0 else None


def encoded_items(entry: Any) -> list[tuple[Any, Any]] | None:
    """The (key, value) pairs of an encoded mapping (plain, ``$dict`` or ``$odict``), keys and
    values as encoded (plain JSON keys are themselves); None if ``entry`` is no mapping."""
    if not isinstance(entry, dict):
        return None
    pairs = entry.get("$odict", entry.get("$dict"))
    if pairs is None:
        tagged = any(k.startswith("$") for k in entry)
        return None if tagged else list(entry.items())
    if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 for p in pairs):
        return None
    return [(k, v) for k, v in pairs]
