"""The autodiff tour: the same computations on NumPy, JAX and PyTorch, side by side.

Run ``python scripts/autodiff_tour.py`` (or ``xpseq tour``); ``--list`` lists the lessons
and ``--lesson N`` runs one of them. Each lesson runs one small computation on all three
libraries and prints what it measured in a table with the columns

``what`` | ``numpy (xpseq by hand)`` | ``jax`` | ``torch``

NumPy has no automatic differentiation; its column is xpseq's own hand-derived backward
rules (:mod:`xpseq.core.vjp`), central differences (:mod:`xpseq.testing`) or plain NumPy
where that is the point. ``-`` marks a library that has no equivalent (the row label says
why) and ``not installed`` a library that is missing.

Nothing printed is typed in: every value comes from running the code, and each lesson
returns the values it measured as :attr:`Lesson.facts`, which ``tests/test_tour.py`` checks
against independent truths on the installed versions. JAX is used through
``xpseq.backends.get("jax")``, which turns on 64-bit mode for the process (xpseq's
convention); lesson 6 shows JAX *without* it in a subprocess, so the flag is never toggled
here.
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import importlib.util
import json
import math
import os
import subprocess
import sys
import textwrap
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
from array_api_compat import array_namespace

import xpseq.core as C
from xpseq import backends
from xpseq.core import vjp
from xpseq.testing import central_difference_grad

__all__ = ["Lesson", "LESSONS", "FRAMEWORKS", "format_lesson", "installed", "main"]

FRAMEWORKS = ("numpy", "jax", "torch")
HEADERS = ("what", "numpy (xpseq by hand)", "jax", "torch")
NOT_INSTALLED = "not installed"
NONE = "-"

Row = tuple[str, str, str, str]
Cells = dict[str, str]                       # row key -> what one library's column shows
Part = Callable[[dict[str, Any]], Cells]     # fills facts, returns its column


@dataclass
class Lesson:
    """One lesson's results.

    Attributes
    ----------
    number, title : int, str
        Where it stands in the tour and what it is about.
    explanation : str
        One sentence; any value in it is formatted from :attr:`facts`.
    rows : list of (label, numpy, jax, torch) strings
        The side-by-side table.
    facts : dict
        The measured values, keyed ``"<library>_<what>"`` (or without a prefix when shared).
    """

    number: int
    title: str
    explanation: str
    rows: list[Row]
    facts: dict[str, Any] = field(default_factory=dict)


LessonFn = Callable[[], Lesson]
LESSONS: list[LessonFn] = []


def _lesson(number: int, title: str) -> Callable[[Callable[[], tuple]], LessonFn]:
    """Register a lesson body returning ``(explanation, rows, facts)`` as lesson ``number``."""

    def register(body: Callable[[], tuple[str, list[Row], dict[str, Any]]]) -> LessonFn:
        @functools.wraps(body, assigned=("__module__", "__name__", "__qualname__", "__doc__"))
        def run() -> Lesson:
            explanation, rows, facts = body()
            return Lesson(number, title, explanation, rows, facts)

        run.number = number      # type: ignore[attr-defined]
        run.title = title        # type: ignore[attr-defined]
        LESSONS.append(run)
        return run

    return register


# --------------------------------------------------------------------------- helpers


def installed(name: str) -> bool:
    """Whether the library ``name`` can be imported."""
    return importlib.util.find_spec(name) is not None


def _jax() -> tuple[Any, Any]:
    """``jax`` and ``jax.numpy``, with 64-bit mode on (through xpseq's jax backend)."""
    backends.get("jax")
    import jax
    import jax.numpy as jnp

    return jax, jnp


def _torch() -> Any:
    import torch

    return torch


def _columns(facts: dict[str, Any], **parts: Part) -> dict[str, Cells | None]:
    """Run each library's part (numpy first); ``None`` for a library that is not installed."""
    out: dict[str, Cells | None] = {}
    for name in FRAMEWORKS:
        part = parts.get(name)
        if part is None:
            out[name] = {}
        elif not installed(name):
            out[name] = None
        else:
            out[name] = part(facts)
    return out


def _table(columns: dict[str, Cells | None], spec: Sequence[tuple[str, str]]) -> list[Row]:
    """Rows ``(label, numpy, jax, torch)`` for the ``(key, label)`` pairs of ``spec``."""
    rows = []
    for key, label in spec:
        cells = [NOT_INSTALLED if columns[name] is None else columns[name].get(key, NONE)
                 for name in FRAMEWORKS]
        rows.append((label, cells[0], cells[1], cells[2]))
    return rows


def _num(x: Any, digits: int = 4) -> str:
    """A number for the table: ``digits`` significant digits, ``nan``/``inf`` as such."""
    x = float(x)
    if x == 0:
        return "0"
    return f"{x:.{digits}g}"


def _err(x: Any) -> str:
    """An error or a difference, in scientific notation."""
    return f"{float(x):.1e}"


def _vec(values: Any, digits: int = 4) -> str:
    """``[a, b, c]`` for a flat sequence of numbers."""
    return "[" + ", ".join(_num(v, digits) for v in np.ravel(np.asarray(values))) + "]"


def _floats(values: Any) -> list[float]:
    """A flat list of Python floats (what facts hold)."""
    return [float(v) for v in np.ravel(np.asarray(values, dtype=np.float64))]


def _fact(facts: dict[str, Any], key: str, fmt: Callable[[Any], str] = str) -> str:
    """A fact formatted for an explanation, or ``n/a`` when its library is missing."""
    return fmt(facts[key]) if key in facts else "n/a"


def _short(err: BaseException, limit: int = 60) -> str:
    """The first clause of an exception message, at most ``limit`` characters."""
    text = str(err).split("\n")[0].split(" (")[0].split(". ")[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _data(seed: int, *shape: int) -> np.ndarray:
    """Reproducible float64 normal samples of ``shape``."""
    return np.random.default_rng(seed).normal(size=shape)


def _xp_numpy() -> Any:
    return backends.get("numpy").xp


# ---------------------------------------------------------------- 1. transform vs tape


def _tanh_sum(W: Any, X: Any) -> Any:
    """``f(W) = Σ tanh(X Wᵀ)``, written once for any array library."""
    xp = array_namespace(W, X)
    return xp.sum(xp.tanh(X @ W.T))


def _tanh_sum_with_rule(X: np.ndarray) -> Callable[[Any], Any]:
    """``W ↦ _tanh_sum(W, X)`` with xpseq's hand-derived rule attached (``defvjp``)."""
    xp = _xp_numpy()

    def rule(W: Any) -> tuple[Any, Callable]:
        z, linear_bp = vjp.linear(X, W, None, xp=xp)
        y, tanh_bp = vjp.tanh(z, xp=xp)

        def backprop(d: Any) -> tuple[Any]:
            (dz,) = tanh_bp(d * xp.ones_like(y))      # d Σy / dy = 1, scaled by d
            _, dW, _ = linear_bp(dz)
            return (dW,)

        return xp.sum(y), backprop

    return vjp.defvjp(lambda W: _tanh_sum(W, X), rule)


@_lesson(1, "A function transform (jax.grad), a tape (torch) and a hand-derived VJP (xpseq)")
def lesson_transform_tape_vjp() -> tuple[str, list[Row], dict[str, Any]]:
    """jax.grad vs torch's tape vs xpseq's hand-derived rule on f(W) = Σ tanh(x Wᵀ)."""
    X, W = _data(1, 5, 4), _data(2, 3, 4)
    facts: dict[str, Any] = {"X": X.tolist(), "W": W.tolist()}

    def numpy_part(facts: dict[str, Any]) -> Cells:
        be = backends.get("numpy")
        value, grad = be.value_and_grad(_tanh_sum_with_rule(X))(W)
        facts["numpy_value"] = float(value)
        facts["numpy_grad"] = grad.tolist()
        # y = 3x as xpseq's linear layer with the 1x1 weight 3; ask its backprop three times.
        _, backprop = vjp.linear(np.array([[2.0]]), np.array([[3.0]]), None, xp=be.xp)
        repeated = [float(backprop(np.ones((1, 1)))[0][0, 0]) for _ in range(3)]
        facts["numpy_repeated_grads"] = repeated
        again = len(set(repeated)) == 1               # the same backprop, called 3 times
        facts["numpy_second_backprop_same"] = again
        return {"value": _num(value, 10), "grad": _vec(grad[0]), "diff": "reference",
                "repeat": ", ".join(_num(g) for g in repeated),
                "second": ("allowed, same value" if again else "allowed, new value")
                + " (a closure)", "retain": NONE}

    def jax_part(facts: dict[str, Any]) -> Cells:
        jax, jnp = _jax()
        Xj = jnp.asarray(X)
        # jit compiles each transformed function once (eager JAX compiles op by op).
        value, grad = jax.jit(jax.value_and_grad(lambda W: _tanh_sum(W, Xj)))(jnp.asarray(W))
        diff = float(np.max(np.abs(np.asarray(grad) - np.asarray(facts["numpy_grad"]))))
        repeated = [float(jax.grad(lambda x: 3.0 * x)(2.0)) for _ in range(3)]
        _, pullback = jax.vjp(lambda x: x * x, 2.0)
        twice = [float(pullback(1.0)[0]) for _ in range(2)]
        facts.update(jax_value=float(value), jax_grad=np.asarray(grad).tolist(),
                     jax_max_diff_vs_numpy=diff, jax_repeated_grads=repeated,
                     jax_second_vjp=twice)
        return {"value": _num(value, 10), "grad": _vec(np.asarray(grad)[0]), "diff": _err(diff),
                "repeat": ", ".join(_num(g) for g in repeated),
                "second": f"vjp fn twice: {', '.join(_num(g) for g in twice)} (pure)",
                "retain": NONE}

    def torch_part(facts: dict[str, Any]) -> Cells:
        torch = _torch()
        Wt = torch.tensor(W, requires_grad=True)
        value = _tanh_sum(Wt, torch.tensor(X))
        value.backward()
        grad = Wt.grad.numpy()
        diff = float(np.max(np.abs(grad - np.asarray(facts["numpy_grad"]))))
        x = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
        accumulated = []
        for _ in range(3):                # a training loop that forgets x.grad = None
            (3.0 * x).backward()
            accumulated.append(float(x.grad))
        x = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
        y = x * x
        y.backward()
        try:
            y.backward()
            error, message = "none", ""
        except RuntimeError as err:
            error, message = type(err).__name__, _short(err)
        x = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
        y = x * x
        retained = []
        for _ in range(2):
            y.backward(retain_graph=True)
            retained.append(float(x.grad))
        value = float(value.detach())
        facts.update(torch_value=value, torch_grad=grad.tolist(),
                     torch_max_diff_vs_numpy=diff, torch_grad_accumulates=accumulated,
                     second_backward_error=error, second_backward_message=message,
                     torch_retain_graph_grads=retained)
        return {"value": _num(value, 10), "grad": _vec(grad[0]), "diff": _err(diff),
                "repeat": ", ".join(_num(g) for g in accumulated),
                "second": f"{error}: {message}", "retain": ", ".join(_num(g) for g in retained)}

    columns = _columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    rows = _table(columns, [
        ("value", "f(W) = Σ tanh(x Wᵀ)"),
        ("grad", "∂f/∂W, first row"),
        ("diff", "max |∂f/∂W − numpy's hand-derived|"),
        ("repeat", "d(3x)/dx at 2, asked 3 times (torch: .grad never zeroed)"),
        ("second", "a second backward through the same graph"),
        ("retain", "y = x² at 2, backward twice with retain_graph=True: x.grad "
                   "(numpy, jax: no graph to keep)"),
    ])
    worst = max((facts[k] for k in ("jax_max_diff_vs_numpy", "torch_max_diff_vs_numpy")
                 if k in facts), default=float("nan"))
    explanation = (
        f"jax.grad transforms a pure function and returns a fresh gradient on every call "
        f"({_fact(facts, 'jax_repeated_grads')}), torch records a tape whose .grad "
        f"accumulates ({_fact(facts, 'torch_grad_accumulates')}) and whose graph the first "
        f"backward frees unless retain_graph=True, and xpseq's hand-derived NumPy rule is a "
        f"closure that can be called again; all three agree on ∂f/∂W to {_err(worst)}."
    )
    return explanation, rows, facts


# ----------------------------------------------------------------------- 2. kinks


@_lesson(2, "Derivatives at kinks are conventions: abs, clamp, relu and norm at 0")
def lesson_kinks() -> tuple[str, list[Row], dict[str, Any]]:
    """Gradients of abs, relu, clamp and the norm exactly at their kinks."""
    facts: dict[str, Any] = {}

    def numpy_part(facts: dict[str, Any]) -> Cells:
        funcs = {"abs": lambda a: float(np.sum(np.abs(a))),
                 "relu": lambda a: float(np.sum(np.maximum(a, 0.0))),
                 "clamp": lambda a: float(np.sum(np.clip(a, 0.0, 1.0)))}
        cells = {}
        for name, f in funcs.items():
            g = float(central_difference_grad(f, np.zeros(1))[0])
            facts[f"numpy_{name}"] = g
            cells[name] = _num(g)
        norm = central_difference_grad(lambda a: float(np.linalg.norm(a)), np.zeros(2))
        facts["numpy_norm"] = _floats(norm)
        cells["norm"] = _vec(norm)
        return cells

    def jax_part(facts: dict[str, Any]) -> Cells:
        jax, jnp = _jax()
        funcs = {"abs": jnp.abs, "relu": jax.nn.relu,
                 "clamp": lambda x: jnp.clip(x, 0.0, 1.0)}
        cells = {}
        for name, f in funcs.items():
            g = float(jax.jit(jax.grad(f))(0.0))
            facts[f"jax_{name}"] = g
            cells[name] = _num(g)
        norm = np.asarray(jax.jit(jax.grad(jnp.linalg.norm))(jnp.zeros(2)))
        facts["jax_norm"] = _floats(norm)
        cells["norm"] = _vec(norm)
        return cells

    def torch_part(facts: dict[str, Any]) -> Cells:
        torch = _torch()
        funcs = {"abs": torch.abs, "relu": torch.relu,
                 "clamp": lambda x: torch.clamp(x, 0.0, 1.0),
                 "norm": torch.linalg.vector_norm}
        cells = {}
        for name, f in funcs.items():
            x = torch.zeros(2 if name == "norm" else (), dtype=torch.float64,
                            requires_grad=True)
            f(x).backward()
            g = x.grad.numpy()
            facts[f"torch_{name}"] = _floats(g) if name == "norm" else float(g)
            cells[name] = _vec(g) if name == "norm" else _num(g)
        return cells

    columns = _columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    rows = _table(columns, [
        ("abs", "d|x|/dx at 0 (numpy: xpseq central difference)"),
        ("relu", "d relu(x)/dx at 0"),
        ("clamp", "d clamp(x, 0, 1)/dx at the bound 0"),
        ("norm", "∇‖x‖ at x = (0, 0)"),
    ])
    explanation = (
        f"At a kink the derivative is a convention that each library picks for itself "
        f"(d|x|/dx at 0 is {_fact(facts, 'jax_abs', _num)} in jax and "
        f"{_fact(facts, 'torch_abs', _num)} in torch, clamp at its bound "
        f"{_fact(facts, 'jax_clamp', _num)} vs {_fact(facts, 'torch_clamp', _num)}, ∇‖0‖ "
        f"{_fact(facts, 'jax_norm', _vec)} vs {_fact(facts, 'torch_norm', _vec)}), while a "
        f"central difference sees the mean of the two one-sided slopes."
    )
    return explanation, rows, facts


# -------------------------------------------------------------- 3. NaN through where


def _xlogx_naive(x: Any) -> Any:
    """``Σ x log x`` with the value 0 at 0 by one ``where``: the gradient at 0 is NaN."""
    xp = array_namespace(x)
    return xp.sum(xp.where(x > 0, x * xp.log(x), xp.zeros_like(x)))


def _xlogx_double(x: Any) -> Any:
    """The same function with the double ``where``: ``log`` never sees 0."""
    xp = array_namespace(x)
    positive = x > 0
    safe = xp.where(positive, x, xp.ones_like(x))
    return xp.sum(xp.where(positive, safe * xp.log(safe), xp.zeros_like(x)))


@_lesson(3, "NaN through where, and the double-where repair")
def lesson_where_nan() -> tuple[str, list[Row], dict[str, Any]]:
    """x log x made safe at 0 by where: NaN gradient, and the double-where fix."""
    x = np.array([0.0, 0.5])
    facts: dict[str, Any] = {"x": x.tolist()}

    def numpy_part(facts: dict[str, Any]) -> Cells:
        xp = _xp_numpy()
        with np.errstate(divide="ignore", invalid="ignore"):
            value = float(_xlogx_naive(xp.asarray(x)))
            # The chain rule applied mechanically, as a hand-derived rule would:
            # where() sends the cotangent to the taken branch only (g), then the
            # product rule for x·log x gives g·log x + x·(g/x) = 0·(−inf) + 0·(0/0) at 0.
            positive = x > 0
            g = np.where(positive, 1.0, 0.0)
            naive = g * np.log(x) + x * (g / x)
            safe = np.where(positive, x, 1.0)
            double = np.where(positive, g * np.log(safe) + safe * (g / safe), 0.0)
        facts.update(numpy_value=value, numpy_naive_grad=_floats(naive),
                     numpy_double_grad=_floats(double))
        return {"value": _num(value), "naive": _vec(naive), "double": _vec(double)}

    def jax_part(facts: dict[str, Any]) -> Cells:
        jax, jnp = _jax()
        xj = jnp.asarray(x)
        value = float(_xlogx_naive(xj))
        naive = np.asarray(jax.jit(jax.grad(_xlogx_naive))(xj))
        double = np.asarray(jax.jit(jax.grad(_xlogx_double))(xj))
        facts.update(jax_value=value, jax_naive_grad=_floats(naive),
                     jax_double_grad=_floats(double))
        return {"value": _num(value), "naive": _vec(naive), "double": _vec(double)}

    def torch_part(facts: dict[str, Any]) -> Cells:
        torch = _torch()
        grads = {}
        for name, f in (("naive", _xlogx_naive), ("double", _xlogx_double)):
            xt = torch.tensor(x, requires_grad=True)
            out = f(xt)
            out.backward()
            grads[name] = xt.grad.numpy()
            if name == "naive":
                value = float(out.detach())
        facts.update(torch_value=value, torch_naive_grad=_floats(grads["naive"]),
                     torch_double_grad=_floats(grads["double"]))
        return {"value": _num(value), "naive": _vec(grads["naive"]),
                "double": _vec(grads["double"])}

    columns = _columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    rows = _table(columns, [
        ("value", "f(x) = Σ where(x > 0, x log x, 0) at x = (0, 0.5)"),
        ("naive", "∂f/∂x, one where (numpy: the chain rule by hand)"),
        ("double", "∂f/∂x, double where: log(where(x > 0, x, 1))"),
    ])
    explanation = (
        f"The forward value is finite ({_fact(facts, 'numpy_value', _num)}), but the "
        f"gradient of where still differentiates the branch it did not take, where the "
        f"zero cotangent meets d(x log x)/dx = −inf and gives "
        f"{_fact(facts, 'jax_naive_grad', lambda v: _num(v[0]))}; feeding log a safe value "
        f"with a second where gives {_fact(facts, 'jax_double_grad', lambda v: _num(v[0]))}."
    )
    return explanation, rows, facts


# ----------------------------------------------------------- 4. fully masked rows


def _describe_row(row: np.ndarray, values: np.ndarray) -> str:
    """What an attention output row is: ``NaN``, ``zeros``, ``mean of values`` or ``other``."""
    row = np.asarray(row, dtype=np.float64)
    if np.isnan(row).any():
        return "NaN" if np.isnan(row).all() else "partly NaN"
    if np.all(row == 0):
        return "zeros"
    if np.allclose(row, np.mean(values, axis=0), rtol=0, atol=1e-6):
        return "mean of values"
    return "other"


def _xpseq_attention_cells(name: str, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                           mask: np.ndarray, facts: dict[str, Any]) -> Cells:
    """xpseq's scaled dot-product attention on backend ``name``, both ``empty`` policies."""
    be = backends.get(name)
    args = [be.asarray(a) for a in (q, k, v)]
    context, weights = C.scaled_dot_product_attention(*args, mask=be.asarray(mask),
                                                      empty="zero")
    context, weights = be.to_numpy(context), be.to_numpy(weights)
    try:
        C.scaled_dot_product_attention(*args, mask=be.asarray(mask), empty="error")
        error = "none"
    except ValueError as err:
        error = type(err).__name__
        facts[f"{name}_xpseq_error_message"] = str(err)
    facts.update({f"{name}_xpseq_zero": _describe_row(context[0, 1], v[0]),
                  f"{name}_xpseq_zero_weights": _describe_row(weights[0, 1], v[0]),
                  f"{name}_xpseq_valid_row": _floats(context[0, 0]),
                  f"{name}_xpseq_error": error})
    return {"zero": f"{facts[f'{name}_xpseq_zero']} (weights "
                    f"{facts[f'{name}_xpseq_zero_weights']})",
            "error": f"{error}: no valid key" if error == "ValueError" else error}


@_lesson(4, "A fully masked attention row: native APIs vs xpseq's explicit policy")
def lesson_masked_rows() -> tuple[str, list[Row], dict[str, Any]]:
    """Attention for a query whose keys are all masked, natively and in xpseq."""
    q, k, v = _data(41, 1, 2, 4), _data(42, 1, 3, 4), _data(43, 1, 3, 4)
    mask = np.array([[[True, True, False], [False, False, False]]])   # query 1: no valid key
    facts: dict[str, Any] = {"q": q.tolist(), "k": k.tolist(), "v": v.tolist(),
                             "mask": mask.tolist()}

    def numpy_part(facts: dict[str, Any]) -> Cells:
        return _xpseq_attention_cells("numpy", q, k, v, mask, facts)

    def jax_part(facts: dict[str, Any]) -> Cells:
        jax, jnp = _jax()
        cells = _xpseq_attention_cells("jax", q, k, v, mask, facts)
        heads = lambda a: jnp.asarray(a[:, :, None, :])      # noqa: E731  (B, T, N=1, H)
        attention = jax.jit(jax.nn.dot_product_attention)
        out = np.asarray(attention(heads(q), heads(k), heads(v), mask=jnp.asarray(mask[:, None])))
        empty_row, valid_row = out[0, 1, 0], out[0, 0, 0]
        mean_diff = float(np.max(np.abs(empty_row - v[0].mean(axis=0))))
        valid_diff = float(np.max(np.abs(valid_row - np.asarray(facts["jax_xpseq_valid_row"]))))
        facts.update(jax_dpa_empty_row=_describe_row(empty_row, v[0]),
                     jax_dpa_mean_diff=mean_diff, jax_dpa_valid_diff=valid_diff)
        cells.update(sdpa=f"{facts['jax_dpa_empty_row']} (|Δ| {_err(mean_diff)})",
                     valid=_err(valid_diff))
        return cells

    def torch_part(facts: dict[str, Any]) -> Cells:
        torch = _torch()
        cells = _xpseq_attention_cells("torch", q, k, v, mask, facts)
        tq, tk, tv = (torch.tensor(a) for a in (q, k, v))
        out = torch.nn.functional.scaled_dot_product_attention(
            tq, tk, tv, attn_mask=torch.tensor(mask)).numpy()
        valid_diff = float(np.max(np.abs(out[0, 0] - np.asarray(facts["torch_xpseq_valid_row"]))))
        with torch.random.fork_rng(devices=[]):         # the layer's init draws from it
            torch.manual_seed(0)
            mha = torch.nn.MultiheadAttention(4, 1, batch_first=True, dtype=torch.float64)
        with torch.no_grad():
            mha_out, mha_weights = mha(tq, tk, tv,
                                       key_padding_mask=torch.ones(1, 3, dtype=torch.bool))
        facts.update(torch_sdpa_empty_row=_describe_row(out[0, 1], v[0]),
                     torch_sdpa_valid_diff=valid_diff,
                     torch_mha_out=_describe_row(mha_out.numpy()[0, 1], v[0]),
                     torch_mha_weights=_describe_row(mha_weights.numpy()[0, 1], v[0]))
        cells.update(sdpa=facts["torch_sdpa_empty_row"], valid=_err(valid_diff),
                     mha=f"out {facts['torch_mha_out']}, weights {facts['torch_mha_weights']}")
        return cells

    columns = _columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    rows = _table(columns, [
        ("sdpa", "native SDPA, query with no valid key (NumPy has no attention API)"),
        ("valid", "native SDPA, valid query: max |Δ| vs xpseq (float64 inputs)"),
        ("mha", "nn.MultiheadAttention, all keys padding (torch only)"),
        ("zero", "xpseq empty='zero', query with no valid key"),
        ("error", "xpseq empty='error' (the default)"),
    ])
    explanation = (
        f"Native attention APIs each pick a silent answer for a query with no valid key "
        f"(torch SDPA: {_fact(facts, 'torch_sdpa_empty_row')}, nn.MultiheadAttention: "
        f"{_fact(facts, 'torch_mha_out')}, jax.nn.dot_product_attention: "
        f"{_fact(facts, 'jax_dpa_empty_row')}), while xpseq makes it a choice: "
        f"empty='zero' gives {_fact(facts, 'numpy_xpseq_zero')} and empty='error' raises "
        f"{_fact(facts, 'numpy_xpseq_error')}."
    )
    return explanation, rows, facts


# ------------------------------------------------------- 5. finite loss, NaN gradient


@_lesson(5, "A finite loss with a NaN gradient under a −inf fill")
def lesson_inf_fill() -> tuple[str, list[Row], dict[str, Any]]:
    """Log-softmax loss with a −inf mask and a padding query row."""
    scores = np.array([[1.0, 2.0, 0.5], [0.3, 0.1, 0.2]])
    keep = np.array([[True, True, False], [False, False, False]])   # row 1 is a padding query
    bias = np.where(keep, 0.0, -np.inf)                              # an additive −inf mask
    targets, real = np.array([1, 0]), np.array([True, False])
    facts: dict[str, Any] = {"scores": scores.tolist(), "keep": keep.tolist(),
                             "targets": targets.tolist(), "real": real.tolist()}

    def record(name: str, key: str, grad: Any) -> str:
        grad = np.asarray(grad)
        facts[f"{name}_{key}_padding_grad"] = _floats(grad[1])
        facts[f"{name}_{key}_real_grad"] = _floats(grad[0])
        return _vec(grad[1])

    def numpy_part(facts: dict[str, Any]) -> Cells:
        xp = _xp_numpy()
        y, backprop = vjp.log_softmax(scores + bias, xp=xp)            # xpseq's rule
        picked = y[np.arange(2), targets]
        loss = -float(np.sum(np.where(real, picked, 0.0)))
        dy = np.zeros_like(y)
        dy[np.arange(2), targets] = -real.astype(np.float64)
        (dscores,) = backprop(dy)                                       # d(s + bias)/ds = 1
        facts["numpy_loss"] = loss
        cell = record("numpy", "additive", dscores)
        record("numpy", "where", np.where(keep, dscores, 0.0))
        record("numpy", "xpseq", dscores)
        return {"loss": _num(loss), "additive": cell, "where": cell, "xpseq": cell}

    def jax_part(facts: dict[str, Any]) -> Cells:
        jax, jnp = _jax()
        keep_j, bias_j, real_j = jnp.asarray(keep), jnp.asarray(bias), jnp.asarray(real)

        def loss(log_softmax: Callable, fill: Callable) -> Callable:
            def f(s: Any) -> Any:
                picked = log_softmax(fill(s))[jnp.arange(2), targets]
                return -jnp.sum(jnp.where(real_j, picked, 0.0))
            return f

        additive = lambda s: s + bias_j                                 # noqa: E731
        where = lambda s: jnp.where(keep_j, s, -jnp.inf)                # noqa: E731
        value, grad = jax.jit(jax.value_and_grad(loss(jax.nn.log_softmax, additive)))(scores)
        facts["jax_loss"] = float(value)
        cells = {"loss": _num(value), "additive": record("jax", "additive", grad)}
        cells["where"] = record("jax", "where",
                                jax.jit(jax.grad(loss(jax.nn.log_softmax, where)))(scores))
        cells["xpseq"] = record("jax", "xpseq",
                                jax.jit(jax.grad(loss(C.log_softmax, additive)))(scores))
        return cells

    def torch_part(facts: dict[str, Any]) -> Cells:
        torch = _torch()
        keep_t, bias_t, real_t = torch.tensor(keep), torch.tensor(bias), torch.tensor(real)
        rows_t, targets_t = torch.arange(2), torch.tensor(targets)

        def run(log_softmax: Callable, fill: Callable) -> tuple[float, Any]:
            s = torch.tensor(scores, requires_grad=True)
            picked = log_softmax(fill(s))[rows_t, targets_t]
            value = -torch.sum(torch.where(real_t, picked, 0.0))
            value.backward()
            return float(value.detach()), s.grad.numpy()

        native = lambda z: torch.log_softmax(z, dim=-1)                 # noqa: E731
        additive = lambda s: s + bias_t                                 # noqa: E731
        where = lambda s: s.masked_fill(~keep_t, float("-inf"))         # noqa: E731
        value, grad = run(native, additive)
        facts["torch_loss"] = value
        cells = {"loss": _num(value), "additive": record("torch", "additive", grad)}
        cells["where"] = record("torch", "where", run(native, where)[1])
        cells["xpseq"] = record("torch", "xpseq", run(C.log_softmax, additive)[1])
        s = torch.tensor(scores, requires_grad=True)
        ce = torch.nn.functional.cross_entropy(s + bias_t, torch.where(real_t, targets_t, -100),
                                               ignore_index=-100, reduction="sum")
        ce.backward()
        facts["torch_ce_loss"] = float(ce.detach())
        cells["ce"] = f"loss {_num(facts['torch_ce_loss'])}, grad " + record(
            "torch", "ce", s.grad.numpy())
        return cells

    columns = _columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    rows = _table(columns, [
        ("loss", "loss = −Σ log_softmax(s + mask)[target], padding row dropped by where "
                 "(numpy: xpseq's rule)"),
        ("additive", "∂loss/∂s, padding row (mask added: 0 or −inf)"),
        ("where", "same, fill by where/masked_fill(keep, s, −inf)"),
        ("xpseq", "same as the additive row, through xpseq.core.log_softmax"),
        ("ce", "F.cross_entropy(s + mask, ignore_index): padding row (torch only)"),
    ])
    explanation = (
        f"An all −inf row has no softmax (0/0), so although the loss ignores it and stays "
        f"finite ({_fact(facts, 'jax_loss', _num)}), the backward multiplies that row's NaN "
        f"by a zero cotangent and an additive mask passes the NaN on "
        f"({_fact(facts, 'jax_additive_padding_grad', _vec)} in jax, "
        f"{_fact(facts, 'torch_additive_padding_grad', _vec)} in torch), whereas "
        f"xpseq's log_softmax defines an all −inf row as −inf with a zero gradient."
    )
    return explanation, rows, facts


# ---------------------------------------------------------------- 6. silent float32

_X64_PROBE = """
import json, warnings
import numpy as np
import jax, jax.numpy as jnp
makers = {"from_numpy": lambda: jnp.asarray(np.ones(2, dtype=np.float64)),
          "python_float": lambda: jnp.asarray(1.0),
          "explicit": lambda: jnp.array(1.0, dtype=jnp.float64)}
found = {"x64": bool(jax.config.jax_enable_x64)}
for name, make in makers.items():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found[name] = str(make().dtype)
    found[name + "_warnings"] = [str(w.message) for w in caught]
print(json.dumps(found))
"""


def _jax_without_x64() -> dict[str, Any]:
    """Run :data:`_X64_PROBE` in a fresh interpreter with ``JAX_ENABLE_X64=0``."""
    env = dict(os.environ, JAX_ENABLE_X64="0", JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-c", _X64_PROBE], capture_output=True, text=True,
                          env=env, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"the JAX float32 probe failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


@_lesson(6, "JAX's silent float32 without x64")
def lesson_silent_float32() -> tuple[str, list[Row], dict[str, Any]]:
    """What dtype a float64 input becomes, with and without JAX's x64 mode."""
    host = np.ones(2, dtype=np.float64)
    facts: dict[str, Any] = {}

    def numpy_part(facts: dict[str, Any]) -> Cells:
        found = {"from_numpy": np.asarray(host).dtype, "python_float": np.asarray(1.0).dtype,
                 "explicit": np.asarray(1.0, dtype=np.float64).dtype}
        facts.update({f"numpy_{k}": str(v) for k, v in found.items()})
        return {k: str(v) for k, v in found.items()} | {"x64": NONE}

    def jax_part(facts: dict[str, Any]) -> Cells:
        probe = _jax_without_x64()
        _, jnp = _jax()
        with_x64 = str(jnp.asarray(host).dtype)
        facts.update(jax_x64_flag_in_probe=probe["x64"], jax_from_numpy_with_x64=with_x64)
        cells = {"x64": with_x64}
        for key in ("from_numpy", "python_float", "explicit"):
            warning = probe[f"{key}_warnings"][0] if probe[f"{key}_warnings"] else ""
            facts[f"jax_{key}"] = probe[key]
            facts[f"jax_{key}_warning"] = warning
            cells[key] = probe[key] + (f" + warning: {warning[:45]}..." if warning
                                       else ", no warning")
        return cells

    def torch_part(facts: dict[str, Any]) -> Cells:
        torch = _torch()
        found = {"from_numpy": torch.as_tensor(host).dtype,
                 "python_float": torch.tensor(1.0).dtype,
                 "explicit": torch.tensor(1.0, dtype=torch.float64).dtype}
        facts.update({f"torch_{k}": str(v).replace("torch.", "") for k, v in found.items()})
        return {k: str(v).replace("torch.", "") for k, v in found.items()} | {"x64": NONE}

    columns = _columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    rows = _table(columns, [
        ("from_numpy", "array from a float64 NumPy array (jax: x64 off, in a subprocess)"),
        ("python_float", "array from the Python float 1.0"),
        ("explicit", "array(1.0, dtype=float64)"),
        ("x64", "from the float64 NumPy array with x64 on (xpseq's jax backend; "
                "numpy, torch: no such flag)"),
    ])
    def warned(key: str) -> str:
        return "with a warning" if facts.get(f"jax_{key}_warning") else "silently"

    explanation = (
        f"Without jax_enable_x64, JAX turns a float64 NumPy array into "
        f"{_fact(facts, 'jax_from_numpy')} {warned('from_numpy')} and even an explicit "
        f"dtype=float64 into {_fact(facts, 'jax_explicit')} {warned('explicit')}, so xpseq's jax "
        f"backend turns x64 on ({_fact(facts, 'jax_from_numpy_with_x64')}); torch keeps "
        f"float64 arrays but makes Python floats {_fact(facts, 'torch_python_float')}."
    )
    return explanation, rows, facts


# ------------------------------------------------------- 7. gradient checks, float64

STEPS = tuple(10.0 ** -e for e in range(1, 11))
_FD_POINT = 0.7


def _sin_exp(x: Any) -> Any:
    """``f(x) = sin(x) e^x``, written once."""
    xp = array_namespace(x)
    return xp.sin(x) * xp.exp(x)


def _sin_exp_derivative(x: float) -> float:
    """``f'(x) = e^x (sin x + cos x)`` in float64 (the exact reference)."""
    return math.exp(x) * (math.sin(x) + math.cos(x))


def _central_difference(x: Any, step: Any) -> Any:
    """``(f(x + h) - f(x - h)) / 2h`` for ``f = _sin_exp``, in the dtype of ``x``."""
    return (_sin_exp(x + step) - _sin_exp(x - step)) / (2 * step)


def _fd_cells(name: str, asarray: Callable[[float, str], Any], grad: Callable[[Any], float],
              facts: dict[str, Any], quotient: Callable = _central_difference) -> Cells:
    """Central-difference and autodiff errors of ``f'(0.7)`` in float32 and float64."""
    cells: dict[str, list[str]] = {}
    for dtype in ("float32", "float64"):
        x = asarray(_FD_POINT, dtype)
        exact = _sin_exp_derivative(float(x))         # at the point the dtype can hold
        errors = []
        for h in STEPS:
            step = asarray(h, dtype)
            errors.append(abs(float(quotient(x, step)) - exact))
        best = int(np.argmin(errors))
        facts.update({f"{name}_errors_{dtype}": errors, f"{name}_best_h_{dtype}": STEPS[best],
                      f"{name}_best_err_{dtype}": errors[best],
                      f"{name}_autodiff_err_{dtype}": abs(grad(x) - exact)})
        for i, e in enumerate(errors):
            cells.setdefault(f"h{i}", []).append(_err(e))
        cells.setdefault("best_h", []).append(_err(STEPS[best]))
        cells.setdefault("best_err", []).append(_err(errors[best]))
        cells.setdefault("autodiff", []).append(_err(facts[f"{name}_autodiff_err_{dtype}"]))
    return {k: " / ".join(v) for k, v in cells.items()}


@_lesson(7, "Why gradient checks need float64: finite-difference error against step size")
def lesson_float64_checks() -> tuple[str, list[Row], dict[str, Any]]:
    """Central-difference error against step size in float32 and float64."""
    facts: dict[str, Any] = {"steps": list(STEPS), "point": _FD_POINT}

    def numpy_part(facts: dict[str, Any]) -> Cells:
        def grad(x: Any) -> float:               # the derivative by hand, in x's dtype
            return float(np.exp(x) * (np.sin(x) + np.cos(x)))

        return _fd_cells("numpy", lambda v, d: np.asarray(v, dtype=d), grad, facts)

    def jax_part(facts: dict[str, Any]) -> Cells:
        jax, jnp = _jax()
        return _fd_cells("jax", lambda v, d: jnp.asarray(v, dtype=d),
                         lambda x: float(jax.jit(jax.grad(_sin_exp))(x)), facts,
                         # Eager: under jit, XLA may fuse and reorder the quotient's float32
                         # arithmetic (it does at its default optimisation level).
                         quotient=_central_difference)

    def torch_part(facts: dict[str, Any]) -> Cells:
        torch = _torch()

        def grad(x: Any) -> float:
            x = x.clone().requires_grad_(True)
            _sin_exp(x).backward()
            return float(x.grad)

        return _fd_cells("torch", lambda v, d: torch.tensor(v, dtype=getattr(torch, d)), grad,
                         facts)

    columns = _columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    spec = [(f"h{i}", f"|central difference − f'|, h = {h:.0e} (float32 / float64)")
            for i, h in enumerate(STEPS)]
    spec += [("best_h", "best h (float32 / float64)"),
             ("best_err", "best error (float32 / float64)"),
             ("autodiff", "error of the gradient itself (numpy: by hand; float32 / float64)")]
    rows = _table(columns, spec)
    explanation = (
        f"A central difference trades truncation error (h²) against rounding error (eps/h), "
        f"so for f(x) = sin(x)·eˣ at {_FD_POINT} its best error is "
        f"{_fact(facts, 'numpy_best_err_float32', _err)} in float32 (at h = "
        f"{_fact(facts, 'numpy_best_h_float32', _err)}) but "
        f"{_fact(facts, 'numpy_best_err_float64', _err)} in float64 (at h = "
        f"{_fact(facts, 'numpy_best_h_float64', _err)}), far too coarse in float32 to tell a "
        f"right gradient from a slightly wrong one."
    )
    return explanation, rows, facts


# ------------------------------------------------------------------- 8. mutation


@_lesson(8, "Mutation: torch's in-place version check, JAX's immutable arrays")
def lesson_mutation() -> tuple[str, list[Row], dict[str, Any]]:
    """Writing into arrays, and into values saved for the backward pass."""
    x0 = np.array([0.5, -1.0, 2.0])
    facts: dict[str, Any] = {"x": x0.tolist()}

    def numpy_part(facts: dict[str, Any]) -> Cells:
        xp = _xp_numpy()
        x = x0.copy()
        x[0] = 5.0
        y, backprop = vjp.tanh(xp.asarray(x0), xp=xp)
        (before,) = backprop(np.ones(3))
        y += 1.0                                   # in place, on the array the rule saved
        (after,) = backprop(np.ones(3))
        changed = float(np.max(np.abs(after - before)))
        frozen = np.array(x0)
        frozen.flags.writeable = False
        try:
            frozen[0] = 5.0
            readonly = "none"
        except ValueError as err:
            readonly = type(err).__name__
        facts.update(numpy_setitem_ok=bool(x[0] == 5.0), numpy_grad_change_after_mutation=changed,
                     numpy_readonly_error=readonly)
        return {"setitem": "allowed", "saved": f"silently wrong: |Δgrad| {_num(changed)}",
                "guard": f"writeable=False → {readonly}", "leaf": NONE}

    def jax_part(facts: dict[str, Any]) -> Cells:
        _, jnp = _jax()
        x = jnp.asarray(x0)
        try:
            x[0] = 5.0
            error = "none"
        except TypeError as err:
            error = type(err).__name__
        updated = x.at[0].set(5.0)
        facts.update(jax_setitem_error=error, jax_at_set_value=float(updated[0]),
                     jax_original_unchanged=bool(float(x[0]) == x0[0]))
        return {"setitem": f"{error}; x.at[0].set(5) → new array",
                "saved": "- (nothing can change)", "guard": "always immutable", "leaf": NONE}

    def torch_part(facts: dict[str, Any]) -> Cells:
        torch = _torch()
        plain = torch.tensor(x0)
        version_before = plain._version            # bumped by every in-place write
        plain[0] = 5.0
        version_after = plain._version
        x = torch.tensor(x0, requires_grad=True)
        y = torch.tanh(x)                          # saves y for its backward
        y.add_(1.0)
        try:
            y.sum().backward()
            error, message = "none", ""
        except RuntimeError as err:
            error, message = type(err).__name__, str(err)
        leaf = torch.tensor(x0, requires_grad=True)
        try:
            leaf.add_(1.0)
            leaf_error = "none"
        except RuntimeError as err:
            leaf_error = f"{type(err).__name__}: {_short(err, 50)}"
        facts.update(torch_setitem_ok=bool(plain[0] == 5.0), torch_version_before=version_before,
                     torch_version_after=version_after, torch_inplace_error=error,
                     torch_inplace_message=message, torch_leaf_inplace_error=leaf_error)
        return {"setitem": f"allowed; version {version_before} → {version_after}",
                "saved": f"{error}: {_short(RuntimeError(message), 70)}" if message else error,
                "guard": "version counter", "leaf": leaf_error}

    columns = _columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    rows = _table(columns, [
        ("setitem", "x[0] = 5 on a plain array"),
        ("saved", "mutate y = tanh(x) in place, then backward"),
        ("guard", "what protects saved values"),
        ("leaf", "in-place op on a leaf that requires grad (numpy, jax: no leaves)"),
    ])
    explanation = (
        f"Backward passes reuse values saved in the forward: torch counts in-place writes "
        f"and refuses ({_fact(facts, 'torch_inplace_error')}), JAX arrays cannot be written "
        f"({_fact(facts, 'jax_setitem_error')}; .at[].set returns a copy), and a "
        f"hand-derived NumPy rule simply reads the mutated array and returns a gradient off "
        f"by {_fact(facts, 'numpy_grad_change_after_mutation', _num)}."
    )
    return explanation, rows, facts


# ------------------------------------------------------------------ 9. retracing

CALLS = (((3,), "float64"), ((3,), "float64"), ((4,), "float64"), ((4,), "float64"),
         ((5,), "float64"), ((3,), "float32"))


@_lesson(9, "Tracing and retracing under jax.jit for new shapes")
def lesson_retracing() -> tuple[str, list[Row], dict[str, Any]]:
    """How often the Python body runs: jax.jit per new signature, eager per call."""
    facts: dict[str, Any] = {"calls": [[list(s), d] for s, d in CALLS]}

    def eager(name: str, make: Callable[[tuple[int, ...], str], Any], xp: Any) -> Part:
        def part(facts: dict[str, Any]) -> Cells:
            runs = 0

            def body(x: Any) -> Any:
                nonlocal runs
                runs += 1
                return xp.sum(xp.tanh(x))

            after = []
            for shape, dtype in CALLS:
                body(make(shape, dtype))
                after.append(runs)
            facts[f"{name}_runs_after_each_call"] = after
            return {f"c{i}": f"body ran {n}x" for i, n in enumerate(after)}
        return part

    def jax_part(facts: dict[str, Any]) -> Cells:
        jax, jnp = _jax()
        traces = 0

        def body(x: Any) -> Any:
            nonlocal traces
            traces += 1                  # a Python side effect: runs only while tracing
            return jnp.sum(jnp.tanh(x))

        step = jax.jit(body)
        after = []
        for shape, dtype in CALLS:
            step(jnp.ones(shape, dtype=dtype))
            after.append(traces)
        facts["jax_traces_after_each_call"] = after
        return {f"c{i}": f"traced {n}x" for i, n in enumerate(after)}

    def torch_part(facts: dict[str, Any]) -> Cells:
        torch = _torch()
        make = lambda s, d: torch.ones(s, dtype=getattr(torch, d))      # noqa: E731
        return eager("torch", make, torch)(facts)

    columns = _columns(facts, numpy=eager("numpy", lambda s, d: np.ones(s, dtype=d), np),
                       jax=jax_part, torch=torch_part)
    rows = _table(columns, [(f"c{i}", f"call {i + 1}: shape {s}, {d}"
                                      + (" (numpy, torch: eager)" if i == 0 else ""))
                            for i, (s, d) in enumerate(CALLS)])
    explanation = (
        f"jax.jit traces the Python function once per new input shape and dtype and then "
        f"replays the compiled program, so {len(CALLS)} calls ran the Python body "
        f"{_fact(facts, 'jax_traces_after_each_call', lambda v: str(v[-1]))} times (a "
        f"side effect such as a counter or print happens only while tracing), while eager "
        f"numpy and torch ran it "
        f"{_fact(facts, 'numpy_runs_after_each_call', lambda v: str(v[-1]))} times."
    )
    return explanation, rows, facts


# ------------------------------------------------------ 10. unrolled loop vs lax.scan

LENGTHS = (4, 8, 16, 32)
_HIDDEN = 4


def _rnn_step(W: Any, h: Any, x_t: Any) -> Any:
    """``h' = tanh(W h + x_t)``, written once."""
    xp = array_namespace(W, h, x_t)
    return xp.tanh(W @ h + x_t)


@_lesson(10, "An unrolled Python loop vs lax.scan: trace size and compile time")
def lesson_unroll_vs_scan() -> tuple[str, list[Row], dict[str, Any]]:
    """Program size and compile time of an RNN loop, unrolled vs lax.scan."""
    W = 0.5 * _data(101, _HIDDEN, _HIDDEN)
    xs_all = _data(102, max(LENGTHS), _HIDDEN)
    facts: dict[str, Any] = {"lengths": list(LENGTHS), "W": W.tolist(),
                             "xs": xs_all.tolist()}

    def eager(name: str) -> Part:
        def part(facts: dict[str, Any]) -> Cells:
            be = backends.get(name)
            Wb, h0 = be.asarray(W), be.asarray(np.zeros(_HIDDEN))
            cells, times, finals = {}, [], []
            for T in LENGTHS:
                xs = be.asarray(xs_all[:T])
                start = time.perf_counter()
                h, _ = be.scan(lambda h, x_t: (_rnn_step(Wb, h, x_t), None), h0, xs)
                times.append(1e3 * (time.perf_counter() - start))
                finals.append(_floats(be.to_numpy(h)))
                cells[f"T{T}"] = f"eager loop {times[-1]:.2f} ms"
            facts[f"{name}_eager_ms"] = times
            facts[f"{name}_final_h"] = finals
            return cells
        return part

    def jax_part(facts: dict[str, Any]) -> Cells:
        jax, jnp = _jax()
        Wj = jnp.asarray(W)

        # W is an argument, not a captured constant: array_api_compat looks up the namespace
        # of a concrete jax array by creating one, which a trace would record as an equation.
        def unrolled(W: Any, xs: Any) -> Any:
            h = jnp.zeros(_HIDDEN, dtype=xs.dtype)
            for t in range(xs.shape[0]):          # Python loop: T copies of the step
                h = _rnn_step(W, h, xs[t])
            return h

        def scanned(W: Any, xs: Any) -> Any:
            return jax.lax.scan(lambda h, x_t: (_rnn_step(W, h, x_t), None),
                                jnp.zeros(_HIDDEN, dtype=xs.dtype), xs)[0]

        record: dict[str, list] = {k: [] for k in ("unrolled_eqns", "scan_eqns",
                                                   "unrolled_compile_ms", "scan_compile_ms",
                                                   "final_diff")}
        cells = {}
        for T in LENGTHS:
            xs = jnp.asarray(xs_all[:T])
            results = []
            for kind, f in (("unrolled", unrolled), ("scan", scanned)):
                record[f"{kind}_eqns"].append(len(jax.make_jaxpr(f)(Wj, xs).jaxpr.eqns))
                start = time.perf_counter()
                compiled = jax.jit(f).lower(Wj, xs).compile()
                record[f"{kind}_compile_ms"].append(1e3 * (time.perf_counter() - start))
                results.append(np.asarray(compiled(Wj, xs)))
            record["final_diff"].append(float(np.max(np.abs(results[0] - results[1]))))
            facts.setdefault("jax_final_h", []).append(_floats(results[1]))
            cells[f"T{T}"] = (f"{record['unrolled_eqns'][-1]} / {record['scan_eqns'][-1]} eqns, "
                              f"{record['unrolled_compile_ms'][-1]:.0f} / "
                              f"{record['scan_compile_ms'][-1]:.0f} ms")
        facts.update({f"jax_{k}": v for k, v in record.items()})
        return cells

    columns = _columns(facts, numpy=eager("numpy"), jax=jax_part, torch=eager("torch"))
    rows = _table(columns, [(f"T{T}", f"T = {T}" + (": jaxpr eqns and compile time, unrolled / "
                                                    "scan (numpy, torch: no compiler)"
                                                    if T == LENGTHS[0] else ""))
                            for T in LENGTHS])
    explanation = (
        f"Tracing an unrolled Python loop copies the step into the program once per time "
        f"step ({_fact(facts, 'jax_unrolled_eqns')} equations for T = {list(LENGTHS)}), so "
        f"compile time grows with the sequence "
        f"({_fact(facts, 'jax_unrolled_compile_ms', lambda v: f'{v[0]:.0f} → {v[-1]:.0f} ms')}),"
        f" while lax.scan traces the step once "
        f"({_fact(facts, 'jax_scan_eqns')} equations, "
        f"{_fact(facts, 'jax_scan_compile_ms', lambda v: f'{v[0]:.0f} → {v[-1]:.0f} ms')})."
    )
    return explanation, rows, facts


# --------------------------------------------------------------------- 11. PRNG


@_lesson(11, "Explicit PRNG keys vs global generators")
def lesson_prng() -> tuple[str, list[Row], dict[str, Any]]:
    """Reproducibility of explicit keys and generators vs torch's global generator."""
    facts: dict[str, Any] = {}

    def same(a: Any, b: Any) -> bool:
        return bool(np.array_equal(np.asarray(a), np.asarray(b)))

    def yes_no(flag: bool) -> str:
        return "same" if flag else "different"

    def dropout_cell(name: str, facts: dict[str, Any]) -> str:
        be = backends.get(name)
        masks = [be.to_numpy(be.dropout_keep(0, 3, (8,), 0.5)) for _ in range(2)]
        facts[f"{name}_dropout_keep_repeatable"] = same(*masks)
        return yes_no(same(*masks))

    def numpy_part(facts: dict[str, Any]) -> Cells:
        reseeded = [np.random.default_rng(0).normal(size=3) for _ in range(2)]
        rng = np.random.default_rng(0)
        first, second = rng.normal(size=3), rng.normal(size=3)
        rng = np.random.default_rng(0)
        np.random.default_rng().random(4)         # unrelated code draws from its own generator
        disturbed = rng.normal(size=3)
        children = [c.normal(size=3) for c in np.random.default_rng(0).spawn(2)]
        facts.update(numpy_reseed_same=same(*reseeded), numpy_consecutive_same=same(first, second),
                     numpy_unrelated_same=same(disturbed, first),
                     numpy_split_same=same(*children))
        return {"reseed": yes_no(same(*reseeded)), "again": yes_no(same(first, second)),
                "unrelated": yes_no(same(disturbed, first)),
                "split": "spawn(2): " + yes_no(same(*children)),
                "dropout": dropout_cell("numpy", facts)}

    def jax_part(facts: dict[str, Any]) -> Cells:
        jax, _ = _jax()
        random = jax.random
        normal = jax.jit(random.normal, static_argnums=1)   # one compile, not op by op
        reseeded = [normal(random.key(0), (3,)) for _ in range(2)]
        key = random.key(0)
        first, second = normal(key, (3,)), normal(key, (3,))
        normal(random.key(1), (4,))               # unrelated code has its own key
        disturbed = normal(key, (3,))
        children = [normal(k, (3,)) for k in random.split(key, 2)]
        facts.update(jax_reseed_same=same(*reseeded), jax_consecutive_same=same(first, second),
                     jax_unrelated_same=same(disturbed, first), jax_split_same=same(*children),
                     jax_child_equals_parent=same(children[0], first))
        return {"reseed": yes_no(same(*reseeded)),
                "again": yes_no(same(first, second)) + " (a key is a value)",
                "unrelated": yes_no(same(disturbed, first)),
                "split": "split(key, 2): " + yes_no(same(*children)),
                "dropout": dropout_cell("jax", facts)}

    def torch_part(facts: dict[str, Any]) -> Cells:
        torch = _torch()
        with torch.random.fork_rng(devices=[]):   # leave the caller's global state alone
            reseeded = []
            for _ in range(2):
                torch.manual_seed(0)
                reseeded.append(torch.randn(3))
            torch.manual_seed(0)
            first, second = torch.randn(3), torch.randn(3)
            torch.manual_seed(0)
            torch.nn.functional.dropout(torch.ones(4), 0.5)   # unrelated code, same generator
            disturbed = torch.randn(3)
        facts.update(torch_reseed_same=same(*reseeded),
                     torch_consecutive_same=same(first, second),
                     torch_unrelated_same=same(disturbed, first))
        return {"reseed": yes_no(same(*reseeded)), "again": yes_no(same(first, second)),
                "unrelated": yes_no(same(disturbed, first)) + " (global state)",
                "split": NONE, "dropout": dropout_cell("torch", facts)}

    columns = _columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    rows = _table(columns, [
        ("reseed", "seed 0 twice, draw 3 normals: same numbers?"),
        ("again", "two draws without reseeding (numpy: one default_rng)"),
        ("unrelated", "unrelated random call in between: first draw unchanged?"),
        ("split", "independent child streams (torch: none; pass a Generator by hand)"),
        ("dropout", "xpseq backend.dropout_keep(seed 0, step 3) twice"),
    ])
    explanation = (
        f"A JAX key is a value, so the same key always gives the same numbers (two draws: "
        f"{_fact(facts, 'jax_consecutive_same', yes_no)}) and nothing else can shift it, "
        f"NumPy's default_rng is an explicit generator object passed around by hand, and "
        f"torch.manual_seed seeds one global generator that any other call may advance "
        f"(an unrelated dropout in between: "
        f"{_fact(facts, 'torch_unrelated_same', yes_no)} numbers)."
    )
    return explanation, rows, facts


# ------------------------------------------------------- 12. forward vs reverse mode


def _tanh_linear(x: Any, A: Any) -> Any:
    """``f(x) = tanh(A x)``: R³ → R², written once."""
    xp = array_namespace(x, A)
    return xp.tanh(A @ x)


@_lesson(12, "Forward mode (JVP) vs reverse mode (VJP)")
def lesson_forward_reverse() -> tuple[str, list[Row], dict[str, Any]]:
    """J v by forward mode, uᵀ J by reverse mode, and the dot-product test."""
    A, x = _data(121, 2, 3), _data(122, 3)
    v, u = _data(123, 3), _data(124, 2)         # a tangent (input side), a cotangent (output)
    facts: dict[str, Any] = {"A": A.tolist(), "x": x.tolist(), "v": v.tolist(), "u": u.tolist()}

    def finish(name: str, jv: Any, uj: Any, jac_fwd: Any, jac_rev: Any) -> Cells:
        jv, uj = np.asarray(jv), np.asarray(uj)
        dot = abs(float(u @ jv) - float(uj @ v))
        jac_diff = float(np.max(np.abs(np.asarray(jac_fwd) - np.asarray(jac_rev))))
        facts.update({f"{name}_jvp": _floats(jv), f"{name}_vjp": _floats(uj),
                      f"{name}_dot_test": dot, f"{name}_jac_fwd_rev_diff": jac_diff})
        return {"jvp": _vec(jv), "vjp": _vec(uj), "dot": _err(dot), "jac": _err(jac_diff)}

    def numpy_part(facts: dict[str, Any]) -> Cells:
        xp = _xp_numpy()
        z, linear_bp = vjp.linear(x[None, :], A, None, xp=xp)
        _, tanh_bp = vjp.tanh(z, xp=xp)

        def pullback(cotangent: np.ndarray) -> np.ndarray:
            (dz,) = tanh_bp(cotangent[None, :])
            return linear_bp(dz)[0][0]

        # xpseq has reverse rules only: the Jacobian is one VJP per output row.
        jac = np.stack([pullback(e) for e in np.eye(2)])
        jac_fd = np.stack([central_difference_grad(lambda a, i=i: float(np.tanh(A @ a)[i]), x)
                           for i in range(2)])
        facts["numpy_vjps_for_jacobian"] = jac.shape[0]
        return finish("numpy", jac @ v, pullback(u), jac_fd, jac)

    def jax_part(facts: dict[str, Any]) -> Cells:
        jax, jnp = _jax()
        Aj = jnp.asarray(A)
        f = lambda x: _tanh_linear(x, Aj)             # noqa: E731
        xj = jnp.asarray(x)
        jvp = jax.jit(lambda x, t: jax.jvp(f, (x,), (t,))[1])
        vjp_ = jax.jit(lambda x, c: jax.vjp(f, x)[1](c)[0])
        jv, uj = jvp(xj, jnp.asarray(v)), vjp_(xj, jnp.asarray(u))
        return finish("jax", jv, uj, jax.jit(jax.jacfwd(f))(xj), jax.jit(jax.jacrev(f))(xj))

    def torch_part(facts: dict[str, Any]) -> Cells:
        torch = _torch()
        At = torch.tensor(A)
        f = lambda x: _tanh_linear(x, At)             # noqa: E731
        xt = torch.tensor(x)
        with warnings.catch_warnings():
            # torch.func's own internals still call the deprecated torch.jit.script.
            warnings.filterwarnings("ignore", message=".*torch.jit.script.* is deprecated",
                                    category=DeprecationWarning)
            _, jv = torch.func.jvp(f, (xt,), (torch.tensor(v),))
            _, pullback = torch.func.vjp(f, xt)
            (uj,) = pullback(torch.tensor(u))
            jac_fwd, jac_rev = torch.func.jacfwd(f)(xt), torch.func.jacrev(f)(xt)
        return finish("torch", jv.numpy(), uj.numpy(), jac_fwd.numpy(), jac_rev.numpy())

    columns = _columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    rows = _table(columns, [
        ("jvp", "J v, forward mode (numpy: J from 2 hand-derived VJPs)"),
        ("vjp", "uᵀ J, reverse mode (numpy: xpseq's rules)"),
        ("dot", "dot-product test |uᵀ(J v) − (uᵀJ) v|"),
        ("jac", "max |J forward − J reverse| (numpy: central difference vs VJPs)"),
    ])
    explanation = (
        f"Forward mode pushes a tangent through f (one pass per input, so a full Jacobian "
        f"of f: R^{x.size} → R^{u.size} takes {x.size} JVPs) and reverse mode pulls a "
        f"cotangent back (one pass per output, {u.size} VJPs), "
        f"and the two agree to rounding, as the dot-product test uᵀ(Jv) = (uᵀJ)v shows "
        f"({_fact(facts, 'jax_dot_test', _err)} in jax, "
        f"{_fact(facts, 'torch_dot_test', _err)} in torch)."
    )
    return explanation, rows, facts


# ---------------------------------------------------- 13. broadcasting sums gradients


@_lesson(13, "Broadcasting in the forward is a sum in the backward: the bias gradient")
def lesson_broadcast_sum() -> tuple[str, list[Row], dict[str, Any]]:
    """The gradient of a bias broadcast over batch and time is a sum."""
    X, W, b = _data(131, 2, 3, 4), _data(132, 5, 4), _data(133, 5)   # x: (batch, time, in)
    G = _data(134, 2, 3, 5)                         # loss = Σ G ⊙ (x Wᵀ + b)
    expected = G.sum(axis=(0, 1))
    facts: dict[str, Any] = {"G": G.tolist(), "b_shape": list(b.shape)}

    def finish(name: str, db: Any, dW: Any) -> Cells:
        db = np.asarray(db)
        diff = float(np.max(np.abs(db - expected)))
        facts.update({f"{name}_db": _floats(db), f"{name}_db_shape": list(db.shape),
                      f"{name}_db_max_diff": diff, f"{name}_dW": np.asarray(dW).tolist()})
        return {"db": _vec(db, 3), "diff": _err(diff), "shape": str(tuple(db.shape))}

    def numpy_part(facts: dict[str, Any]) -> Cells:
        _, backprop = vjp.linear(X, W, b, xp=_xp_numpy())
        _, dW, db = backprop(G)                   # db = Σ over the leading axes of dy
        return finish("numpy", db, dW)

    def loss(W: Any, b: Any, X: Any, G: Any) -> Any:
        xp = array_namespace(W, b, X, G)
        return xp.sum(G * (X @ W.T + b))

    def jax_part(facts: dict[str, Any]) -> Cells:
        jax, jnp = _jax()
        grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
        dW, db = grad(*(jnp.asarray(a) for a in (W, b, X, G)))
        return finish("jax", db, dW)

    def torch_part(facts: dict[str, Any]) -> Cells:
        torch = _torch()
        Wt, bt = torch.tensor(W, requires_grad=True), torch.tensor(b, requires_grad=True)
        loss(Wt, bt, torch.tensor(X), torch.tensor(G)).backward()
        return finish("torch", bt.grad.numpy(), Wt.grad.numpy())

    columns = _columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    rows = _table(columns, [
        ("db", "∂loss/∂b for loss = Σ G ⊙ (x Wᵀ + b), x (2, 3, 4), b (5,)"),
        ("diff", "max |∂loss/∂b − Σ over (batch, time) of G|"),
        ("shape", "shape of ∂loss/∂b"),
    ])
    explanation = (
        f"A bias of shape {b.shape} added to outputs of shape {G.shape} is copied along "
        f"the batch and time axes, so its gradient is the cotangent summed over them "
        f"(max difference {_fact(facts, 'torch_db_max_diff', _err)} in torch, "
        f"{_fact(facts, 'numpy_db_max_diff', _err)} by xpseq's rule), with the bias's own "
        f"shape {_fact(facts, 'jax_db_shape', lambda s: str(tuple(s)))}."
    )
    return explanation, rows, facts


# ----------------------------------------------------------------------- printing


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=False) or [""]


def format_lesson(lesson: Lesson, *, label_width: int = 34, cell_width: int = 24) -> str:
    """The lesson as text: a header, the explanation and the side-by-side table."""
    header = f"Lesson {lesson.number}. {lesson.title}"
    lines = [header, "=" * len(header), *textwrap.wrap(lesson.explanation, 100), ""]
    table = [HEADERS, *lesson.rows]
    widths = [min(label_width, max(len(r[0]) for r in table))]
    widths += [min(cell_width, max(len(r[i]) for r in table)) for i in (1, 2, 3)]
    for n, row in enumerate(table):
        cells = [_wrap(cell, w) for cell, w in zip(row, widths)]
        for i in range(max(len(c) for c in cells)):
            parts = [(c[i] if i < len(c) else "").ljust(w) for c, w in zip(cells, widths)]
            lines.append(" | ".join(parts).rstrip())
        if n == 0:
            lines.append("-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def _versions() -> str:
    found = [f"python {sys.version.split()[0]}"]
    for name in FRAMEWORKS:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{name} {NOT_INSTALLED}")
    return ", ".join(found)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the lessons (all, or ``--lesson N``), or list them (``--list``)."""
    parser = argparse.ArgumentParser(
        prog="autodiff_tour",
        description="The same computations on numpy (xpseq's hand-derived gradients), jax "
                    "and torch, with the values each one gives, side by side.")
    parser.add_argument("--lesson", type=int, metavar="N", help="run lesson N only")
    parser.add_argument("--list", action="store_true", help="list the lessons and exit")
    args = parser.parse_args(argv)
    if args.list:
        for fn in LESSONS:
            print(f"{fn.number:2d}. {fn.title}")        # type: ignore[attr-defined]
        return 0
    chosen = [fn for fn in LESSONS
              if args.lesson is None or fn.number == args.lesson]  # type: ignore[attr-defined]
    if not chosen:
        print(f"autodiff_tour: error: there is no lesson {args.lesson}; choose 1 to "
              f"{len(LESSONS)} (see --list)", file=sys.stderr)
        return 2
    if installed("torch"):
        _torch().set_num_threads(1)     # tiny tensors: one thread avoids contention
    print(f"Autodiff tour ({_versions()})\n")
    start = time.perf_counter()
    for fn in chosen:
        began = time.perf_counter()
        lesson = fn()
        print(format_lesson(lesson))
        print(f"({time.perf_counter() - began:.2f} s)\n")
    print(f"{len(chosen)} lesson(s) in {time.perf_counter() - start:.1f} s")
    return 0
