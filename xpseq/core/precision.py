"""Mixed precision: which numbers a model computes in bfloat16 and which stay in float32.

``precision=None`` (the default everywhere) computes in the parameters' own dtype.
``precision="bf16"`` is mixed precision in the usual sense:

- the **parameters** stay float32, and so does the **optimiser state** and every update:
  the training step casts the floating parameters to bfloat16 on entry
  (:func:`cast_params`), so their gradients come back through the cast in float32;
- the **embeddings, matrix products and activations** (recurrent states, attention
  contexts, feed-forward blocks, logits) are bfloat16, because they are computed from the
  cast parameters;
- the **reductions** are float32 (the kernels of :mod:`xpseq.core.kernels` widen a
  bfloat16 input first, :func:`xpseq.core.kernels.widened`): softmax weights are computed in
  float32 and returned in bfloat16, layer norm's mean and variance are float32,
  log-softmax and the loss are float32, and so are the searches' accumulated scores.

These cast points are part of the math and written once here and in the kernels; a backend
only supplies its library's ``bfloat16``. It takes a library that has both a bfloat16 dtype
and automatic differentiation: JAX and PyTorch. NumPy has no bfloat16 of its own
(``ml_dtypes`` adds one, but its element-wise functions ran 12.6x slower than float32
on this project's machine, and the hand-derived backward passes are written for one
dtype), so asking for it there is an error.

>>> import jax.numpy as jnp
>>> from xpseq.core import precision
>>> params = {"W": jnp.ones((2, 2), dtype=jnp.float32), "steps": jnp.arange(3)}
>>> {k: str(v.dtype) for k, v in precision.cast_params(params, "bf16", xp=jnp).items()}
{'W': 'bfloat16', 'steps': 'int32'}
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

__all__ = ["PRECISIONS", "Policy", "compute_dtype", "cast_params"]

#: The reduced precisions a model can compute in (``None``: the parameters' own dtype).
PRECISIONS = ("bf16",)


@dataclasses.dataclass(frozen=True)
class Policy:
    """A precision policy, made once where a precision is asked for (an argument, an
    option) and passed on as it is (Keras's ``DTypePolicy`` is the model).

    ``Policy(None)`` computes in the parameters' own dtype; ``Policy("bf16")`` is mixed
    precision (the module docstring). Hashable: it keys built programs.

    Examples
    --------
    >>> from xpseq.core.precision import Policy
    >>> Policy.of("bf16").reduced, Policy.of(None).reduced
    (True, False)
    >>> Policy.of("fp8")
    Traceback (most recent call last):
        ...
    ValueError: precision must be None (the parameters' own dtype) or one of ['bf16'], got 'fp8'
    """

    name: str | None = None

    def __post_init__(self) -> None:
        if not (self.name is None or (isinstance(self.name, str) and self.name in PRECISIONS)):
            raise ValueError(f"precision must be None (the parameters' own dtype) or one of "
                             f"{list(PRECISIONS)}, got {self.name!r}")

    @classmethod
    def of(cls, precision: Policy | str | None, where: str = "precision") -> Policy:
        """``precision`` as a policy: a policy as it is, ``None`` or a name of
        :data:`PRECISIONS` made into one.

        Raises
        ------
        ValueError
            Anything else (the message starts with ``where``).
        """
        if isinstance(precision, Policy):
            return precision
        try:
            return cls(precision)
        except ValueError as err:
            raise ValueError(str(err).replace("precision", where, 1)) from None

    @classmethod
    def given(cls, precision: Any, where: str) -> Policy:
        """``precision`` itself if it is a policy, for what sits behind a public door
        (those take names and call :meth:`of` once, then pass the policy inward).

        Raises
        ------
        TypeError
            ``precision`` is not a :class:`Policy` (the message starts with ``where``
            and shows how to make one).
        """
        if not isinstance(precision, Policy):
            raise TypeError(f"{where} must be a Policy (e.g. Policy.of({precision!r}) from "
                            f"xpseq.core.precision), got {type(precision).__name__}")
        return precision

    @property
    def reduced(self) -> bool:
        """Whether it computes in a reduced precision (bfloat16)."""
        return self.name is not None

    def compute_dtype(self, xp: Any) -> Any:
        """The dtype it computes in on the array namespace ``xp`` (``None``: the
        parameters' own).

        Raises
        ------
        ValueError
            The library has no bfloat16 (NumPy, array_api_strict).
        """
        if self.name is None:
            return None
        dtype = getattr(xp, "bfloat16", None)
        if dtype is None:
            name = getattr(xp, "__name__", type(xp).__name__).rsplit(".", 1)[-1]
            raise ValueError(f"precision={self.name!r} needs an array library with a "
                             "bfloat16 dtype and automatic differentiation (jax or torch); "
                             f"{name} has none")
        return dtype

    def cast_params(self, params: Mapping[str, Any], *, xp: Any) -> dict[str, Any]:
        """``params`` with every floating array cast to the compute dtype (the others, and
        everything for ``Policy(None)``, as they are). Differentiable: on JAX and PyTorch
        the gradient of the cast is the gradient cast back."""
        dtype = self.compute_dtype(xp)
        if dtype is None:
            return dict(params)
        return {k: xp.astype(v, dtype) if xp.isdtype(v.dtype, "real floating") else v
                for k, v in params.items()}


def compute_dtype(precision: Policy | str | None, *, xp: Any) -> Any:
    """:meth:`Policy.compute_dtype` of ``Policy.of(precision)``."""
    return Policy.of(precision).compute_dtype(xp)


def cast_params(params: Mapping[str, Any], precision: Policy | str | None, *,
                xp: Any) -> dict[str, Any]:
    """:meth:`Policy.cast_params` of ``Policy.of(precision)``."""
    return Policy.of(precision).cast_params(params, xp=xp)
