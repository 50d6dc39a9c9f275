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

from typing import Any, Callable, Mapping

from . import _checks
from ._scan import scan as python_scan
from .layers import _linear, _sigmoid, _zeros
from .masking import _check_lengths_range, _sequence_mask

__all__ = ["CELLS", "lstm_cell", "gru_cell", "run_sequence", "cell_param_shapes"]

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
    return _lstm_step(_linear(x, params["W_ih"], params["b_ih"], xp=xp), tuple(state), params,
                      xp=xp)


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
    return _gru_step(_linear(x, params["W_ih"], params["b_ih"], xp=xp), (h,), params, xp=xp)[0]


def run_sequence(params: Mapping[str, Any], xs: Any, lengths: Any, *, cell: str = "lstm",
                 initial_state: tuple[Any, ...] | None = None, reverse: bool = False,
                 scan: Callable | None = None) -> tuple[Any, tuple[Any, ...]]:
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

    Returns
    -------
    outputs : array, shape ``(B, T, H)``
        ``h`` after each real step (in the original time order); zero at padded steps.
    final_state : tuple of ``(B, H)`` arrays
        The state after each sequence's last real step (its first, with ``reverse``).
    """
    fname = "run_sequence"
    cell = _check_cell(fname, cell)
    xp = _checks.namespace(fname, xs=xs, lengths=lengths)
    _checks.check_ndim(fname, "xs", xs, 3, exact=True, layout="(batch, time, input)")
    if not xp.isdtype(lengths.dtype, "integral"):
        raise TypeError(f"{fname}: lengths must have an integer dtype, got {lengths.dtype}")
    _checks.check_ndim(fname, "lengths", lengths, 1, exact=True, layout="(batch,)")
    _checks.check_dim(fname, "lengths", lengths, 0, xs.shape[0], "the batch size of xs")
    hidden = _check_params(fname, cell, params, xs.shape[-1], xs, xp)
    if initial_state is None:
        initial_state = initial_zeros(cell, xs.shape[0], hidden, xs, xp=xp)
    _check_state(fname, cell, tuple(initial_state), xs.shape[0], hidden, xs, xp)
    _check_lengths_range(fname, "lengths", lengths, xs.shape[1], "the number of steps", xp)
    return _run_sequence(cell, params, xs, lengths, tuple(initial_state), reverse=reverse,
                         scan=scan, xp=xp)


# ------------------------------------------------------------------- private kernels


def _lstm_parts(xw: Any, state: tuple[Any, ...], p: Mapping[str, Any], *,
                xp: Any) -> tuple[tuple, tuple]:
    """One LSTM step: the new state ``(h', c')`` and what its backward pass needs
    (the gates ``i, f, g, o`` after their nonlinearities and ``tanh(c')``)."""
    h, c = state
    gates = xw + _linear(h, p["W_hh"], p["b_hh"], xp=xp)
    n = h.shape[-1]
    # One sigmoid over all four blocks (the g block's is computed and dropped): the same
    # values as three separate calls, in a third of the operations, which is what an eager
    # library such as PyTorch pays for at these sizes.
    sig = _sigmoid(gates, xp=xp)
    i, f, o = sig[..., :n], sig[..., n:2 * n], sig[..., 3 * n:]
    g = xp.tanh(gates[..., 2 * n:3 * n])
    c = f * c + i * g
    tanh_c = xp.tanh(c)
    return (o * tanh_c, c), (i, f, g, o, tanh_c)


def _gru_parts(xw: Any, state: tuple[Any, ...], p: Mapping[str, Any], *,
               xp: Any) -> tuple[tuple, tuple]:
    """One GRU step: the new state ``(h',)`` and what its backward pass needs
    (``r``, ``z``, the candidate ``n`` and the recurrent projection ``W_hh h + b_hh``)."""
    (h,) = state
    hw = _linear(h, p["W_hh"], p["b_hh"], xp=xp)
    n = h.shape[-1]
    r = _sigmoid(xw[..., :n] + hw[..., :n], xp=xp)
    z = _sigmoid(xw[..., n:2 * n] + hw[..., n:2 * n], xp=xp)
    cand = xp.tanh(xw[..., 2 * n:] + r * hw[..., 2 * n:])
    return ((1.0 - z) * cand + z * h,), (r, z, cand, hw)


def _lstm_step(xw: Any, state: tuple[Any, ...], p: Mapping[str, Any], *, xp: Any) -> tuple:
    return _lstm_parts(xw, state, p, xp=xp)[0]


def _gru_step(xw: Any, state: tuple[Any, ...], p: Mapping[str, Any], *, xp: Any) -> tuple:
    return _gru_parts(xw, state, p, xp=xp)[0]


STEPS = {"lstm": _lstm_step, "gru": _gru_step}


def initial_zeros(cell: str, batch: int, hidden: int, like: Any, *, xp: Any) -> tuple:
    """The all-zero state of ``cell`` for ``batch`` sequences."""
    n_state = 2 if cell == "lstm" else 1
    return tuple(_zeros((batch, hidden), like, xp=xp) for _ in range(n_state))


def _run_sequence(cell: str, p: Mapping[str, Any], xs: Any, lengths: Any,
                  state0: tuple[Any, ...], *, reverse: bool, scan: Callable | None,
                  xp: Any) -> tuple[Any, tuple[Any, ...]]:
    step = STEPS[cell]
    steps = xs.shape[1]
    # The input projection of every step at once, outside the loop: (T, B, G H).
    xw = xp.permute_dims(_linear(xs, p["W_ih"], p["b_ih"], xp=xp), (1, 0, 2))
    valid = xp.permute_dims(_sequence_mask(lengths, steps, xp=xp), (1, 0))[..., None]
    if reverse:
        xw, valid = xp.flip(xw, axis=0), xp.flip(valid, axis=0)

    # A loop that knows a better way to differentiate the whole recurrence (the JAX
    # backend's scan with hand-derived rules, see xpseq.backends) runs it instead.
    recurrence = getattr(scan, "recurrence", None)
    if recurrence is not None:
        outputs, final = recurrence(cell, p["W_hh"], p["b_hh"], xw, valid, tuple(state0))
    else:
        def body(state: tuple, inputs: tuple) -> tuple[tuple, Any]:
            xw_t, valid_t = inputs
            return _keep_valid(step(xw_t, state, p, xp=xp), state, valid_t, xp=xp)

        final, outputs = (scan or python_scan)(body, state0, (xw, valid))
    if reverse:
        outputs = xp.flip(outputs, axis=0)
    return xp.permute_dims(outputs, (1, 0, 2)), final


def _keep_valid(new: tuple, old: tuple, valid_t: Any, *, xp: Any) -> tuple[tuple, Any]:
    """The state after one step of the runner: ``new`` where ``valid_t`` (``(B, 1)`` bool),
    ``old`` at padded steps; and the step's output, ``h`` or zero at padding."""
    state = tuple(xp.where(valid_t, n, o) for n, o in zip(new, old))
    return state, xp.where(valid_t, state[0], 0.0)


# ------------------------------------------------------------------------- checks


def _check_cell(fname: str, cell: Any) -> str:
    if cell not in CELLS:
        raise ValueError(f"{fname}: cell must be one of {list(CELLS)}, got {cell!r}")
    return cell


def _check_params(fname: str, cell: str, params: Mapping[str, Any], input_size: int,
                  like: Any, xp: Any) -> int:
    if not isinstance(params, Mapping):
        raise TypeError(f"{fname}: params must be a mapping of arrays, got {type(params).__name__}")
    missing = [n for n in CELL_PARAMS if params.get(n) is None]
    if missing:
        raise ValueError(f"{fname}: params is missing {missing}; a {cell} cell needs "
                         f"{list(CELL_PARAMS)}")
    _checks.namespace(fname, like=like, **{n: params[n] for n in CELL_PARAMS})
    for n in CELL_PARAMS:
        _checks.check_floating(fname, n, params[n], xp)
    _checks.check_same_dtype(fname, x=like, **{n: params[n] for n in CELL_PARAMS})
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
    return hidden


def _check_state(fname: str, cell: str, state: tuple, batch: int, hidden: int, like: Any,
                 xp: Any) -> None:
    names = ("h", "c") if cell == "lstm" else ("h",)
    if len(state) != len(names):
        raise ValueError(f"{fname}: a {cell} state is a tuple {names}, got {len(state)} arrays")
    for name, a in zip(names, state):
        _checks.namespace(fname, x=like, **{name: a})
        _checks.check_same_dtype(fname, x=like, **{name: a})
        if tuple(a.shape) != (batch, hidden):
            raise ValueError(f"{fname}: {name} must have shape (batch, H) = {(batch, hidden)}, "
                             f"got {tuple(a.shape)}")


def _check_cell_call(fname: str, cell: str, params: Mapping[str, Any], x: Any,
                     state: tuple) -> Any:
    xp = _checks.namespace(fname, x=x)
    _checks.check_floating(fname, "x", x, xp)
    _checks.check_ndim(fname, "x", x, 2, exact=True, layout="(batch, input)")
    hidden = _check_params(fname, cell, params, x.shape[-1], x, xp)
    if not isinstance(state, tuple):
        raise TypeError(f"{fname}: state must be a tuple of arrays, got {type(state).__name__}")
    _check_state(fname, cell, state, x.shape[0], hidden, x, xp)
    return xp
