"""Learning-rate schedules: pure functions of the step, in the manner of optax.

A schedule maps the optimiser's step counter (the number of updates already taken, a 0-d
float array: ``opt_state["step"]``) to a factor; times a peak rate it is the optimiser's
learning rate, evaluated by the optimiser's ``update`` itself::

    factor = schedule(step)            # 1.0 for constant(); traceable under jax.jit
    opt = adam(1e-3 * warmup_inverse_sqrt(400))     # the rate 1e-3 · factor(step)

``lr * schedule`` (a positive number times a schedule) is :class:`Scaled`, a schedule
whose value is the rate ``lr · schedule(step)``; any optimiser of :mod:`xpseq.core.optim`
takes it as ``lr``. Each is a frozen dataclass: hashable (a jitted training step is cached
per optimiser, its schedule included), printable, and rebuilt from :meth:`Schedule.to_dict`
(checkpoints record it with the optimiser's hyperparameters). The plateau rule, which
reacts to the dev loss rather than to the step, is
:class:`xpseq.train.callbacks.ReduceLROnPlateau`: it lowers the optimiser state's own
plateau factor, which multiplies the rate again.

==========================  ===========================================================
schedule                    factor at step ``s`` (``w`` warm-up steps, ``n`` total steps)
==========================  ===========================================================
``constant()``              ``1``
``warmup_inverse_sqrt(w)``  ``min((s + 1) / w, sqrt(w / (s + 1)))`` (Vaswani et al. 2017:
                            linear warm-up to 1 at step ``w``, then ``1 / sqrt``)
``warmup_cosine(w, n, f)``  linear warm-up to 1, then ``f + (1 - f) (1 + cos(π p)) / 2``
                            with ``p`` the fraction of the ``n - w`` decay steps done
``warmup_linear(w, n, f)``  linear warm-up to 1, then linearly down to ``f`` at step ``n``
``lr * schedule``           ``lr · schedule(s)``
==========================  ===========================================================

After step ``n`` the decaying schedules stay at ``f``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, Mapping

import array_api_compat as compat

from xpseq.core import checks

__all__ = ["Schedule", "Scaled", "constant", "warmup_inverse_sqrt", "warmup_cosine",
           "warmup_linear", "from_dict"]


@dataclasses.dataclass(frozen=True)
class Schedule:
    """A learning-rate factor as a pure function of the step (see the module docstring)."""

    kind: ClassVar[str] = ""

    def __call__(self, step: Any) -> Any:
        raise NotImplementedError

    def to_dict(self) -> dict:
        """``{"kind": ..., **fields}``, the input of :func:`from_dict`."""
        return {"kind": self.kind, **dataclasses.asdict(self)}

    def __rmul__(self, lr: Any) -> Scaled:
        """``lr * schedule``: the learning rate ``lr · schedule(step)`` (:class:`Scaled`)."""
        if not checks.is_real(lr):
            return NotImplemented
        return Scaled(lr, self)

    __mul__ = __rmul__


@dataclasses.dataclass(frozen=True)
class Scaled(Schedule):
    """The rate ``lr · factor(step)``: a peak learning rate times a schedule (what
    ``lr * schedule`` makes; the ``lr`` of an optimiser).

    lr : a positive, finite number
    factor : a :class:`Schedule`
    """

    lr: float
    factor: Schedule
    kind: ClassVar[str] = "scaled"

    def __post_init__(self) -> None:
        if not checks.is_real(self.lr) or not 0 < self.lr < math.inf:
            raise ValueError(f"scaled: lr must be a positive number, got {self.lr!r}")
        if not isinstance(self.factor, Schedule):
            raise TypeError(f"scaled: factor must be an xpseq.train.schedules.Schedule, got "
                            f"{type(self.factor).__name__}")

    def __call__(self, step: Any) -> Any:
        return self.lr * self.factor(step)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "lr": self.lr, "factor": self.factor.to_dict()}


@dataclasses.dataclass(frozen=True)
class Constant(Schedule):
    kind: ClassVar[str] = "constant"

    def __call__(self, step: Any) -> Any:
        return compat.array_namespace(step).ones_like(step)


@dataclasses.dataclass(frozen=True)
class WarmupInverseSqrt(Schedule):
    warmup: int
    kind: ClassVar[str] = "warmup_inverse_sqrt"

    def __post_init__(self) -> None:
        _check_steps("warmup_inverse_sqrt", "warmup", self.warmup)

    def __call__(self, step: Any) -> Any:
        xp = compat.array_namespace(step)
        s = step + 1.0
        return xp.minimum(s / self.warmup, xp.sqrt(self.warmup / s))


@dataclasses.dataclass(frozen=True)
class _WarmupDecay(Schedule):
    warmup: int
    total: int
    final: float = 0.0

    def __post_init__(self) -> None:
        _check_steps(self.kind, "warmup", self.warmup, allow_zero=True)
        _check_steps(self.kind, "total", self.total)
        if self.total <= self.warmup:
            raise ValueError(f"{self.kind}: total ({self.total}) must exceed warmup "
                             f"({self.warmup})")
        if not checks.is_real(self.final) or not 0 <= self.final <= 1:
            raise ValueError(f"{self.kind}: final must be a number in [0, 1], got "
                             f"{self.final!r}")

    def __call__(self, step: Any) -> Any:
        xp = compat.array_namespace(step)
        s = step + 1.0
        warm = s / self.warmup if self.warmup else xp.ones_like(s)
        done = xp.clip((s - self.warmup) / (self.total - self.warmup), 0.0, 1.0)
        decayed = self.final + (1.0 - self.final) * self._shape(done, xp)
        return xp.where(s <= self.warmup, warm, decayed)

    def _shape(self, done: Any, xp: Any) -> Any:
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class WarmupCosine(_WarmupDecay):
    kind: ClassVar[str] = "warmup_cosine"

    def _shape(self, done: Any, xp: Any) -> Any:
        return 0.5 * (1.0 + xp.cos(math.pi * done))


@dataclasses.dataclass(frozen=True)
class WarmupLinear(_WarmupDecay):
    kind: ClassVar[str] = "warmup_linear"

    def _shape(self, done: Any, xp: Any) -> Any:
        return 1.0 - done


def constant() -> Schedule:
    """The factor 1 at every step: the optimiser's ``lr`` as it is."""
    return Constant()


def warmup_inverse_sqrt(warmup: int) -> Schedule:
    """Linear warm-up over ``warmup`` steps, then ``sqrt(warmup / step)`` (the
    Transformer's schedule, normalised to a peak factor of 1)."""
    return WarmupInverseSqrt(warmup)


def warmup_cosine(warmup: int, total: int, final: float = 0.0) -> Schedule:
    """Linear warm-up over ``warmup`` steps, then a half cosine down to ``final`` at step
    ``total``."""
    return WarmupCosine(warmup, total, final)


def warmup_linear(warmup: int, total: int, final: float = 0.0) -> Schedule:
    """Linear warm-up over ``warmup`` steps, then a straight line down to ``final`` at step
    ``total``."""
    return WarmupLinear(warmup, total, final)


_KINDS = {c.kind: c for c in (Constant, WarmupInverseSqrt, WarmupCosine, WarmupLinear, Scaled)}


def from_dict(data: Mapping[str, Any]) -> Schedule:
    """The schedule :meth:`Schedule.to_dict` described."""
    if not isinstance(data, Mapping):
        raise TypeError(f"from_dict: data must be a dict with a 'kind', got "
                        f"{type(data).__name__}")
    fields = dict(data)
    kind = fields.pop("kind", None)
    if kind not in _KINDS:
        raise ValueError(f"unknown schedule {kind!r}; known: {sorted(_KINDS)}")
    if kind == "scaled" and "factor" in fields:
        fields["factor"] = from_dict(fields["factor"])
    return _KINDS[kind](**fields)


def _check_steps(fname: str, name: str, value: Any, *, allow_zero: bool = False) -> None:
    low = 0 if allow_zero else 1
    if not checks.is_int(value) or value < low:
        kind = "a non-negative" if allow_zero else "a positive"
        raise ValueError(f"{fname}: {name} must be {kind} int (steps), got {value!r}")
