"""Which gradient path trains by default: the fastest one measured, per model kind, backend
and precision.

xpseq takes a model's gradients two ways that agree to rounding (:mod:`xpseq.train.step`):
``"autodiff"``, by the library (``jax.grad``, torch's autograd tape), and
``"hand-derived"``, by the model's own backward pass (:mod:`xpseq.core.vjp`; on JAX the
RNN's loops as a custom VJP inside the jitted step). Which is faster depends on the model
kind and the library, so the default is data: :data:`DEFAULTS`, one row per measured
``(model kind, backend, precision)``. Each kind's recorded benchmark is named in
:data:`RECORDS` (``python -m scripts.bench --only peers``, under ``benchmarks/results/``),
and each row's comment gives the ratio that decided it
(the hand-derived step's training throughput over autodiff's, measured in the same run,
taking turns).

What the table does not name falls back, in this order:

* a backend without automatic differentiation (numpy, array_api_strict) has one path, its
  own (``backend.gradients``: hand-derived);
* a reduced precision (``"bf16"``) trains by autodiff: the hand-derived backward passes
  compute in one dtype;
* a model kind or backend with no row (a model defined by a user, a backend not measured)
  trains by the backend's own path (``backend.gradients``).

float64 takes its kind's float32 row (the same products, twice as wide; not measured
apart). The records were made on one processor (a 2-core AMD EPYC Zen 4); another can
order the two paths differently: measure yours with the command above. On a 2-core Intel
Xeon (Ice Lake server) the RNN's record orders them as the table does: hand-derived 1.38x
autodiff on JAX, 1.11x on PyTorch, 1.19x under ``torch.compile``
(``benchmarks/results/2026-12-07T073552-intel-r-xeon-r-processor-2-80ghz-peers.json``).

``xpseq train --gradients`` and ``TrainConfig(gradients=...)`` override the table; the
command's first line names the path taken.

Examples
--------
>>> from xpseq import backends
>>> from xpseq.train.paths import default_gradients
>>> default_gradients(backends.get("numpy"), "rnn")
'hand-derived'
>>> default_gradients(backends.get("numpy"), "my-model")
'hand-derived'
"""

from __future__ import annotations

from typing import Any

from xpseq.backends import Backend
from xpseq.core import precision as mixed

__all__ = ["DEFAULTS", "RECORDS", "default_gradients", "precision_key"]

#: The recorded benchmark runs the rows below come from, one per model kind: ``python
#: -m scripts.bench --only peers`` with ``--threads 1`` (one core pinned), float32, Adam,
#: every implementation taking turns in each repeat; the file has the command, machine,
#: versions and every repeat (a 2-core AMD EPYC Zen 4, the quietest machine measured).
RECORDS = {
    "rnn": "benchmarks/results/2026-12-05T102521-amd-epyc-train-peers.json",
    "transformer": "benchmarks/results/2026-12-05T071928-amd-epyc-peers.json",
}

#: ``(model kind, backend label, precision) -> "autodiff" | "hand-derived"``: the path
#: that trained faster in the kind's record (:data:`RECORDS`). Each comment gives the
#: ratio: the hand-derived step's target tokens per second over autodiff's, the medians
#: of one run (above 1: hand-derived wins). Eager PyTorch's Transformer is a tie within
#: the noise of one core (0.95x here, 0.98x to 1.01x in earlier runs): autograd, the
#: library's own, keeps it.
DEFAULTS: dict[tuple[str, str, str], str] = {
    ("rnn", "jax", "float32"): "hand-derived",                      # 1.48x
    ("rnn", "torch", "float32"): "hand-derived",                    # 1.07x
    ("rnn", "torch with torch.compile", "float32"): "hand-derived",   # 1.16x
    ("transformer", "jax", "float32"): "hand-derived",              # 1.12x
    ("transformer", "torch", "float32"): "autodiff",                # 0.95x
    ("transformer", "torch with torch.compile", "float32"): "hand-derived",   # 1.16x
}


def precision_key(precision: Any = None) -> str:
    """The precision column of :data:`DEFAULTS`: ``"bf16"`` for mixed bfloat16 precision,
    ``"float32"`` for a model computing in its parameters' own dtype (float32, measured;
    float64 computes the same products and takes the same row).

    ``precision`` is a :class:`~xpseq.core.precision.Policy` or what
    :meth:`Policy.of <xpseq.core.precision.Policy.of>` takes (``None``, ``"bf16"``).
    """
    policy = mixed.Policy.of(precision, "default_gradients: precision")
    return "bf16" if policy.reduced else "float32"


def default_gradients(backend: Backend, kind: str | None, precision: Any = None) -> str:
    """The gradient path that trains model kind ``kind`` on ``backend`` by default.

    Parameters
    ----------
    backend : the backend that trains
    kind : the model kind's name (``"rnn"``, ``"transformer"``, a user's kind), or ``None``
        when it is not known yet (the backend's own path)
    precision : a :class:`~xpseq.core.precision.Policy`, ``None`` or ``"bf16"``

    Returns
    -------
    ``"autodiff"`` or ``"hand-derived"`` (``backend.gradients`` on a backend without
    gradients): :data:`DEFAULTS`'s row, or the fallbacks of the module docstring.
    """
    if not isinstance(backend, Backend):
        raise TypeError(f"default_gradients: backend must be an xpseq Backend, got "
                        f"{type(backend).__name__}")
    if kind is not None and not isinstance(kind, str):
        raise TypeError(f"default_gradients: kind must be a model kind's name (str) or None, "
                        f"got {type(kind).__name__}")
    column = precision_key(precision)
    if backend.gradients != "autodiff":
        return backend.gradients                   # one path: numpy, array_api_strict
    if column == "bf16":
        return "autodiff"                          # the hand-derived passes: one dtype
    return DEFAULTS.get((kind, backend.label, column), backend.gradients) \
        if kind is not None else backend.gradients
