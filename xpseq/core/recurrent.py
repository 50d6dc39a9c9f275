"""LSTM and GRU cells and a sequence runner that honours lengths.

The cells use PyTorch's parameter layout and gate order, so weights copy one to one from
``torch.nn.LSTMCell`` / ``torch.nn.GRUCell`` (and the tests check that they agree):

LSTM, gates ``i, f, g, o`` stacked in that order along the rows of the weights::

    [i; f; g; o] = W_ih x + b_ih + W_hh h + b_hh          W_ih (4H, I), W_hh (4H, H)
    c' = σ(f) ⊙ c + σ(i) ⊙ tanh(g)
    h' = σ(o) ⊙ tanh(c')

GRU, gates ``r, z, n``::

    r = σ(W_ir x + b_ir + W_hr h + b_hr)                  W_ih (3H, I), W_hh (3H, H)
    z = σ(W_iz x + b_iz + W_hz h + b_hz)
    n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn))
    h' = (1 - z) ⊙ n + z ⊙ h

A cell's state is a tuple: ``(h, c)`` for the LSTM, ``(h,)`` for the GRU.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, cast

from . import checks, kernels
from .masking import check_lengths_range

__all__ = ["CELLS", "lstm_cell", "gru_cell", "run_sequence", "hand_derived_recurrence",
           "cell_param_shapes"]

#: Number of gates of each cell: the weights have ``gates * hidden`` rows.
CELLS = {"lstm": 4, "gru": 3}
CELL_PARAMS = ("W_ih", "W_hh", "b_ih", "b_hh")


def cell_param_shapes(cell: str, input_size: int, hidden: int) -> dict[str, tuple[int, ...]]:
    """Names and shapes of a cell's parameters: ``W_ih (G H, I)``, ``W_hh (G H, H)``,
    ``b_ih (G H,)``, ``b_hh (G H,)`` with ``G`` = 4 (LSTM) or 3 (GRU)."""
    rows = CELLS[_check_cell("cell_param_shapes", cell)] * hidden
    return {"W_ih": (rows, input_size), "W_hh": (rows, hidden), "b_ih": (rows,),
            "b_hh": (rows,)}


def lstm_cell(params: Mapping[str, Any], x: Any, state: tuple[Any, Any]) -> tuple[Any, Any]:
    """One LSTM step (``torch.nn.LSTMCell``'s math and layout).

    Parameters
    ----------
    params : mapping with ``W_ih (4H, I)``, ``W_hh (4H, H)``, ``b_ih (4H,)``, ``b_hh (4H,)``
    x : real floating array, shape ``(B, I)``
    state : tuple ``(h, c)``, each of shape ``(B, H)``

    Returns
    -------
    (h', c') : each of shape ``(B, H)``
    """
    xp = _check_cell_call("lstm_cell", "lstm", params, x, state)
    xw = kernels.linear(x, params["W_ih"], params["b_ih"], xp=xp)
    return kernels.lstm_step(xw, tuple(state), params, xp=xp)


def gru_cell(params: Mapping[str, Any], x: Any, h: Any) -> Any:
    """One GRU step (``torch.nn.GRUCell``'s math and layout).

    Parameters
    ----------
    params : mapping with ``W_ih (3H, I)``, ``W_hh (3H, H)``, ``b_ih (3H,)``, ``b_hh (3H,)``
    x : real floating array, shape ``(B, I)``
    h : real floating array, shape ``(B, H)``

    Returns
    -------
    h' : array, shape ``(B, H)``
    """
    xp = _check_cell_call("gru_cell", "gru", params, x, (h,))
    xw = kernels.linear(x, params["W_ih"], params["b_ih"], xp=xp)
    return kernels.gru_step(xw, (h,), params, xp=xp)[0]


def run_sequence(params: Mapping[str, Any], xs: Any, lengths: Any, *, cell: str = "lstm",
                 initial_state: tuple[Any, ...] | None = None, reverse: bool = False,
                 scan: Callable[..., Any] | None = None,
                 custom_vjp: Callable[..., Any] | None = None) -> tuple[Any, tuple[Any, ...]]:
    """Run a cell over padded sequences; padded steps never change the state.

    Parameters
    ----------
    params : the cell's parameters (see :func:`cell_param_shapes`)
    xs : real floating array, shape ``(B, T, I)``
        Padded inputs; ``xs[b, t]`` for ``t >= lengths[b]`` is padding and is ignored.
    lengths : integer array, shape ``(B,)``, values in ``[0, T]``
    cell : {"lstm", "gru"}
    initial_state : tuple of ``(B, H)`` arrays, optional
        ``(h, c)`` or ``(h,)``; zeros by default.
    reverse : bool
        Run from the last step to the first. Because padded steps leave the state as it
        is, the reverse direction starts at each sequence's own last real token.
    scan : callable, optional
        ``lax.scan``-compatible loop (``backend.scan``); the Python loop by default.
    custom_vjp : callable, optional
        ``backend.custom_vjp``: run the time loop as :func:`hand_derived_recurrence`, whose
        gradient is the hand-derived step rules of :mod:`xpseq.core.vjp` in a reverse
        ``scan`` instead of the library's differentiation of every operation of the loop.
        The values are the same; on JAX it is a ``jax.custom_vjp`` (which has no
        forward-mode derivative, so ``jax.jvp`` through it raises).

    Returns
    -------
    outputs : array, shape ``(B, T, H)``
        ``h`` after each real step (in the original time order); zero at padded steps.
    final_state : tuple of ``(B, H)`` arrays
        The state after each sequence's last real step (its first, with ``reverse``).
    """
    fname = "run_sequence"
    cell = _check_cell(fname, cell)
    xp = checks.namespace(fname, xs=xs, lengths=lengths)
    checks.check_ndim(fname, "xs", xs, 3, exact=True, layout="(batch, time, input)")
    if not xp.isdtype(lengths.dtype, "integral"):
        raise TypeError(f"{fname}: lengths must have an integer dtype, got {lengths.dtype}")
    checks.check_ndim(fname, "lengths", lengths, 1, exact=True, layout="(batch,)")
    checks.check_dim(fname, "lengths", lengths, 0, xs.shape[0], "the batch size of xs")
    hidden = _check_params(fname, cell, params, xs.shape[-1], xs, xp)
    if initial_state is None:
        initial_state = kernels.initial_zeros(cell, hidden, xs, xp=xp)
    _check_state(fname, cell, tuple(initial_state), xs.shape[0], hidden, xs, xp)
    check_lengths_range(fname, "lengths", lengths, xs.shape[1], "the number of steps", xp)
    checks.check_all_finite(fname, xp, xs=xs, **dict(zip(("h", "c"), initial_state)))
    recurrence = None if custom_vjp is None else hand_derived_recurrence(
        cell, scan=scan, custom_vjp=custom_vjp, xp=xp)
    return kernels.run_sequence(cell, params, xs, lengths, tuple(initial_state), reverse=reverse,
                                scan=scan, recurrence=recurrence, xp=xp)


def hand_derived_recurrence(cell: str, *, scan: Callable[..., Any] | None,
                            custom_vjp: Callable[..., Any], xp: Any) -> Callable[..., Any]:
    """The time loop of :func:`run_sequence` with its hand-derived gradient attached.

    Returns ``recurrence(W_hh, b_hh, xw, valid, state0) -> (outputs, final_state)`` over
    time-major ``xw (T, B, G H)`` (the input projections) and ``valid (T, B, 1)`` (bool),
    with ``outputs (T, B, H)``: the loop :func:`xpseq.core.kernels.run_sequence` runs,
    made ``custom_vjp(fn, fwd, bwd)`` (``backend.custom_vjp``: ``jax.custom_vjp`` on JAX).

    The forward pass keeps only the state before each step; the backward pass recomputes
    each step's gates from it and runs the cell's backward rule of :mod:`xpseq.core.vjp` in
    a reverse ``scan``, where a library's own differentiation would store what every
    operation of the step needs (both branches of the stable sigmoid included). The loop
    carries only the state's gradient; ``W_hh``'s and ``b_hh``'s gradients leave it
    unsummed (the gradient of ``W_hh h + b_hh`` at every step: for an LSTM ``d_xw`` itself)
    and are one product and one sum over all steps after it.

    Both loops run only over the steps from the first to the last that some sequence of the
    batch has (:func:`xpseq.core.kernels.valid_span`): over a batch padded past its longest
    sequence, the steps that are padding in every row are skipped (the loops' trip count is
    known only at run time; JAX compiles one program for all).
    """
    from .loops import scan as python_scan
    from .vjp.recurrent import sequence_step_back

    loop = scan or python_scan
    step = kernels.STEPS[cell]

    def run(W_hh: Any, b_hh: Any, xw: Any, valid: Any, state0: tuple[Any, ...], span: Any,
            keep_states: bool) -> tuple[Any, ...]:
        p = {"W_hh": W_hh, "b_hh": b_hh}

        def body(state: tuple[Any, ...], inputs: tuple[Any, ...]) -> tuple[Any, ...]:
            xw_t, valid_t = inputs
            new, out = kernels.keep_valid(step(xw_t, state, p, xp=xp), state, valid_t, xp=xp)
            return new, ((out, state) if keep_states else out)

        return loop(body, tuple(state0), (xw, valid), span=span)

    def recurrence(W_hh: Any, b_hh: Any, xw: Any, valid: Any,
                   state0: tuple[Any, ...]) -> tuple[Any, ...]:
        final, outputs = run(W_hh, b_hh, xw, valid, state0, kernels.valid_span(valid, xp=xp),
                             False)
        return outputs, final

    def fwd(W_hh: Any, b_hh: Any, xw: Any, valid: Any, state0: tuple[Any, ...]) -> tuple[Any, ...]:
        span = kernels.valid_span(valid, xp=xp)
        final, (outputs, states) = run(W_hh, b_hh, xw, valid, state0, span, True)
        return (outputs, final), (W_hh, b_hh, xw, valid, states, span)

    def bwd(saved: tuple[Any, ...], cotangents: tuple[Any, ...]) -> tuple[Any, ...]:
        W_hh, b_hh, xw, valid, states, span = saved
        d_outputs, d_final = cotangents
        p = {"W_hh": W_hh, "b_hh": b_hh}

        def body(d_state: tuple[Any, ...], inputs: tuple[Any, ...]) -> tuple[Any, ...]:
            xw_t, v, state, d_out = inputs
            _, parts = kernels.PARTS[cell](xw_t, state, p, xp=xp)
            d_state, d_xw, d_hw = sequence_step_back(cell, parts, state, W_hh, d_state, d_out,
                                                     v, xp=xp)
            return d_state, (d_xw if cell == "lstm" else (d_xw, d_hw))   # an LSTM: d_hw = d_xw

        d_state0, ys = loop(body, tuple(d_final), (xw, valid, states, d_outputs), reverse=True,
                            span=span)
        d_xw, d_hw = (ys, ys) if cell == "lstm" else ys
        # Σ over steps and rows of d_hwᵀ h as one tensordot (XLA's CPU backend runs it
        # faster than the product of the flattened (T B, G H)ᵀ and (T B, H)).
        d_W = xp.tensordot(d_hw, states[0], axes=([0, 1], [0, 1]))
        d_b = xp.sum(d_hw, axis=(0, 1))
        return d_W, d_b, d_xw, None, d_state0

    return cast(Callable[..., Any], custom_vjp(recurrence, fwd, bwd))


# ------------------------------------------------------------------------- checks


def _check_cell(fname: str, cell: Any) -> str:
    if cell not in CELLS:
        raise ValueError(f"{fname}: cell must be one of {list(CELLS)}, got {cell!r}")
    return cast(str, cell)


def _check_params(fname: str, cell: str, params: Mapping[str, Any], input_size: int,
                  like: Any, xp: Any) -> int:
    if not isinstance(params, Mapping):
        raise TypeError(f"{fname}: params must be a mapping of arrays, got {type(params).__name__}")
    missing = [n for n in CELL_PARAMS if params.get(n) is None]
    if missing:
        raise ValueError(f"{fname}: params is missing {missing}; a {cell} cell needs "
                         f"{list(CELL_PARAMS)}")
    checks.namespace(fname, like=like, **{n: params[n] for n in CELL_PARAMS})
    for n in CELL_PARAMS:
        checks.check_floating(fname, n, params[n], xp)
    checks.check_same_dtype(fname, x=like, **{n: params[n] for n in CELL_PARAMS})
    rows = params["W_hh"].shape[0] if params["W_hh"].ndim == 2 else -1
    gates = CELLS[cell]
    if params["W_hh"].ndim != 2 or rows % gates or params["W_hh"].shape[1] * gates != rows:
        raise ValueError(f"{fname}: W_hh must have shape ({gates} H, H) for a {cell} cell, "
                         f"got {tuple(params['W_hh'].shape)}")
    hidden = rows // gates
    expected = cell_param_shapes(cell, input_size, hidden)
    for n, shape in expected.items():
        if tuple(params[n].shape) != shape:
            raise ValueError(f"{fname}: {n} must have shape {shape} for a {cell} cell with "
                             f"input size {input_size} and hidden size {hidden}, got "
                             f"{tuple(params[n].shape)}")
    checks.check_all_finite(fname, xp, **{n: params[n] for n in CELL_PARAMS})
    return hidden


def _check_state(fname: str, cell: str, state: tuple[Any, ...], batch: int, hidden: int, like: Any,
                 xp: Any) -> None:
    names = ("h", "c") if cell == "lstm" else ("h",)
    if len(state) != len(names):
        raise ValueError(f"{fname}: a {cell} state is a tuple {names}, got {len(state)} arrays")
    for name, a in zip(names, state):
        checks.namespace(fname, x=like, **{name: a})
        checks.check_same_dtype(fname, x=like, **{name: a})
        if tuple(a.shape) != (batch, hidden):
            raise ValueError(f"{fname}: {name} must have shape (batch, H) = {(batch, hidden)}, "
                             f"got {tuple(a.shape)}")


def _check_cell_call(fname: str, cell: str, params: Mapping[str, Any], x: Any,
                     state: tuple[Any, ...]) -> Any:
    xp = checks.namespace(fname, x=x)
    checks.check_floating(fname, "x", x, xp)
    checks.check_ndim(fname, "x", x, 2, exact=True, layout="(batch, input)")
    hidden = _check_params(fname, cell, params, x.shape[-1], x, xp)
    if not isinstance(state, tuple):
        raise TypeError(f"{fname}: state must be a tuple of arrays, got {type(state).__name__}")
    _check_state(fname, cell, state, x.shape[0], hidden, x, xp)
    checks.check_all_finite(fname, xp, x=x, **dict(zip(("h", "c"), state)))
    return xp
