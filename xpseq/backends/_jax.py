"""JAX: ``jax.jit``, ``jax.value_and_grad`` and ``lax.scan``.

Getting this backend turns on JAX's 64-bit mode for the whole process
(``jax.config.update("jax_enable_x64", True)``): without it ``jnp.asarray`` of a float64
array silently gives float32. The effect is global: afterwards, JAX code elsewhere in the
same process also makes float64 arrays from Python floats. Ask for ``dtype="float32"``
explicitly where float32 is wanted.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ._base import Backend


class JaxBackend(Backend):
    name = "jax"
    gradients = "autodiff"
    compiles = True

    def __init__(self) -> None:
        import jax

        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp

        self._jax = jax
        super().__init__(jnp)
        #: :meth:`scan`, carrying a ``recurrence`` whose gradient is hand-derived (see
        #: :class:`RuleScan`); what ``make_train_step(..., gradients="hand-derived")`` uses.
        self.rule_scan = RuleScan(jax)
        # jnp.float64 is a scalar type; arrays carry NumPy dtypes, so compare with those.
        self._dtypes = {n: np.dtype(n) for n in self._dtypes}

    def is_array(self, x: Any) -> bool:
        return isinstance(x, self._jax.Array)

    def _from_host(self, host: np.ndarray, dtype: Any) -> Any:
        if np.dtype(dtype).itemsize == 8 and not self._jax.config.jax_enable_x64:
            raise RuntimeError(
                "jax.asarray: float64/int64 was asked for but jax_enable_x64 has been turned "
                "off since the jax backend enabled it; JAX would silently give 32 bits"
            )
        # Committed to the default device, like the outputs of a jitted function: a jitted
        # step fed its own outputs then reuses its first compilation instead of compiling
        # a second time for "uncommitted" inputs.
        return self._jax.device_put(self.xp.asarray(host, dtype=dtype), self._jax.devices()[0])

    def dropout_keep(self, seed: int, step: Any, shape: tuple[int, ...], rate: float) -> Any:
        """``jax.random.bernoulli`` with the key ``fold_in(key(seed), step)``; both may be
        traced, so it is drawn inside ``jax.jit`` without recompiling for a new seed."""
        random = self._jax.random
        as_uint = lambda x: self.xp.asarray(x, dtype=self.xp.uint32)  # noqa: E731 (traceable)
        key = random.fold_in(random.key(as_uint(seed)), as_uint(step))
        return random.bernoulli(key, 1.0 - rate, shape)

    def value_and_grad(self, fn: Callable[..., Any], argnums: int | tuple[int, ...] = 0,
                       has_aux: bool = False) -> Callable[..., Any]:
        return self._jax.value_and_grad(fn, argnums=argnums, has_aux=has_aux)

    def jit(self, fn: Callable[..., Any], **kwargs: Any) -> Callable[..., Any]:
        """``jax.jit(fn, **kwargs)`` (e.g. ``static_argnames=``)."""
        return self._jax.jit(fn, **kwargs)

    def scan(self, fn: Callable[[Any, Any], tuple[Any, Any]], carry: Any, xs: Any,
             length: int | None = None) -> tuple[Any, Any]:
        return self._jax.lax.scan(fn, carry, xs, length=length)


class RuleScan:
    """``lax.scan`` with a ``recurrence`` attribute: the encoder's time loop
    (``xpseq.core.recurrent``) as a ``jax.custom_vjp`` whose backward pass runs the
    hand-derived step rules of :mod:`xpseq.core.vjp` in a reverse ``lax.scan``.

    JAX's own transpose of the forward scan differentiates every operation of the step
    (the stable sigmoid's branches included) and stores what each needs; the rule needs
    only the state before each step and recomputes the gates from it. The values are the
    same to rounding (the parity tests hold it to the NumPy reference like any JAX
    gradient). A ``custom_vjp`` has no forward-mode derivative: ``jax.jvp`` through it
    raises, so the backend's plain :meth:`JaxBackend.scan` stays the default.
    """

    def __init__(self, jax: Any):
        self._jax = jax
        self.recurrence = _custom_vjp_recurrence(jax)

    def __call__(self, fn: Callable[[Any, Any], tuple[Any, Any]], carry: Any, xs: Any,
                 length: int | None = None) -> tuple[Any, Any]:
        return self._jax.lax.scan(fn, carry, xs, length=length)


def _custom_vjp_recurrence(jax: Any) -> Callable:
    """``recurrence(cell, W_hh, b_hh, xw, valid, state0) -> (outputs, final)`` over time-major
    ``xw (T, B, G H)`` and ``valid (T, B, 1)``, as the loop of
    ``xpseq.core.recurrent._run_sequence``, with a hand-derived backward pass."""
    import functools

    import jax.numpy as jnp

    from xpseq.core import vjp
    from xpseq.core.recurrent import STEPS, _keep_valid

    lax = jax.lax

    def forward(cell: str, W_hh: Any, b_hh: Any, xw: Any, valid: Any, state0: tuple,
                keep_states: bool) -> tuple:
        p = {"W_hh": W_hh, "b_hh": b_hh}
        step = STEPS[cell]

        def body(state: tuple, inputs: tuple) -> tuple:
            xw_t, valid_t = inputs
            new, out = _keep_valid(step(xw_t, state, p, xp=jnp), state, valid_t, xp=jnp)
            return new, ((out, state) if keep_states else out)

        return lax.scan(body, state0, (xw, valid))

    @functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
    def recurrence(cell: str, W_hh: Any, b_hh: Any, xw: Any, valid: Any,
                   state0: tuple) -> tuple:
        final, outputs = forward(cell, W_hh, b_hh, xw, valid, state0, False)
        return outputs, final

    def recurrence_fwd(cell: str, W_hh: Any, b_hh: Any, xw: Any, valid: Any,
                       state0: tuple) -> tuple:
        final, (outputs, states) = forward(cell, W_hh, b_hh, xw, valid, state0, True)
        return (outputs, final), (W_hh, b_hh, xw, valid, states)

    def recurrence_bwd(cell: str, saved: tuple, cotangents: tuple) -> tuple:
        W_hh, b_hh, xw, valid, states = saved
        d_outputs, d_final = cotangents
        p = {"W_hh": W_hh, "b_hh": b_hh}
        rule = vjp.CELL_STEPS[cell]

        # The backward of vjp.run_sequence's loop, one step per scan iteration. For an
        # LSTM the gradient of the gates' pre-activation is d_xw itself, so W_hh's and
        # b_hh's gradients are one product and one sum over all steps after the loop
        # (sum_t d_xw_tᵀ h_{t-1}); a GRU's differ from d_xw and are summed step by step.
        after = cell == "lstm"

        def body(carry: tuple, inputs: tuple) -> tuple:
            d_state, d_W, d_b = carry
            xw_t, v, state, d_out = inputs
            d_state = (d_state[0] + jnp.where(v, d_out, 0.0), *d_state[1:])
            d_cell = tuple(jnp.where(v, d, 0.0) for d in d_state)
            _, backprop = rule(xw_t, state, p, xp=jnp)
            d_xw, d_prev, grads = backprop(*d_cell)
            d_state = tuple(jnp.where(v, dp, d) for dp, d in zip(d_prev, d_state))
            if not after:
                d_W, d_b = d_W + grads["W_hh"], d_b + grads["b_hh"]
            return (d_state, d_W, d_b), d_xw

        start = (tuple(d_final), jnp.zeros_like(W_hh), jnp.zeros_like(b_hh))
        (d_state0, d_W, d_b), d_xw = lax.scan(body, start, (xw, valid, states, d_outputs),
                                              reverse=True)
        if after:
            d_W = jnp.einsum("tbg,tbh->gh", d_xw, states[0])
            d_b = jnp.sum(d_xw, axis=(0, 1))
        return d_W, d_b, d_xw, None, d_state0

    recurrence.defvjp(recurrence_fwd, recurrence_bwd)
    return recurrence
