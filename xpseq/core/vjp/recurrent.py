"""Hand-derived rules of the recurrent cells: lstm_step and gru_step, their backward
passes from saved values (lstm_back, gru_back, :data:`CELL_BACKS`), and one step of
backpropagation through a padded recurrence (sequence_step_back).

The whole loop over time is :func:`xpseq.core.recurrent.hand_derived_recurrence` (the
recurrence with this gradient attached) and :func:`xpseq.models.rnn.backward.run_sequence`
(the RNN's encoder, with its backprop).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from .. import kernels

__all__ = ["lstm_step", "lstm_back", "gru_step", "gru_back", "CELL_STEPS", "CELL_BACKS",
           "sequence_step_back"]


def lstm_step(xw: Any, state: tuple[Any, Any], p: Mapping[str, Any], *,
              xp: Any) -> tuple[tuple[Any, Any], Callable[..., Any]]:
    """One LSTM step from ``xw = W_ih x + b_ih`` (``(B, 4H)``) and ``state = (h, c)``.

    Forward: ``[i; f; g; o] = σ, σ, tanh, σ of (xw + W_hh h + b_hh)``,
    ``c' = f ⊙ c + i ⊙ g``, ``h' = o ⊙ tanh c'``.

    Backward, given ``(dh', dc')``: ``do = dh' ⊙ tanh c'``; ``c'`` collects
    ``dc̃ = dc' + dh' ⊙ o ⊙ (1 - tanh² c')``; then ``di = dc̃ ⊙ g``, ``df = dc̃ ⊙ c``,
    ``dg = dc̃ ⊙ i``, ``dc = dc̃ ⊙ f``. Through the nonlinearities (σ' = σ(1-σ),
    tanh' = 1 - tanh²) to the pre-activation ``da = [di i(1-i); df f(1-f); dg (1-g²);
    do o(1-o)]``; ``dxw = da``, ``dh = da W_hh``, ``dW_hh = daᵀ h``, ``db_hh = Σ_b da``.

    ``backprop(dh', dc')`` returns ``(dxw, (dh, dc), {"W_hh": ..., "b_hh": ...})``.
    """
    h, c = state
    (h_new, c_new), parts = kernels.lstm_parts(xw, state, p, xp=xp)

    def backprop(dh_new: Any, dc_new: Any) -> tuple[Any, ...]:
        da, _, (_, dc) = lstm_back(parts, state, dh_new, dc_new, xp=xp)
        grads = {"W_hh": xp.matrix_transpose(da) @ h, "b_hh": xp.sum(da, axis=0)}
        return da, (da @ p["W_hh"], dc), grads

    return (h_new, c_new), backprop


def lstm_back(parts: tuple[Any, ...], state: tuple[Any, ...], dh_new: Any, dc_new: Any, *,
              xp: Any) -> tuple[Any, Any, tuple[Any, Any]]:
    """:func:`lstm_step`'s backward pass from the step's saved values, without its matrix
    products: ``parts`` is :func:`xpseq.core.kernels.lstm_parts`'s ``(i, f, g, o, tanh c')``
    and ``state`` the ``(h, c)`` the step started from. Returns ``(da, dhw, (None, dc))``:
    the gradient of the gates' pre-activation ``da`` (which is ``dxw``), that of ``W_hh h +
    b_hh`` (``da`` again), and the state's gradient but for the products: ``h`` reaches the
    step only through ``W_hh`` (``dh = da W_hh``). ``dW_hh = daᵀ h`` and ``db_hh = Σ_b da``
    are left to the caller, which may sum them over many steps at once."""
    i, f, g, o, tanh_c = parts
    c = state[1]
    do = dh_new * tanh_c
    dc_total = dc_new + dh_new * o * (1.0 - tanh_c * tanh_c)
    da = xp.concat([dc_total * g * i * (1.0 - i), dc_total * c * f * (1.0 - f),
                    dc_total * i * (1.0 - g * g), do * o * (1.0 - o)], axis=-1)
    return da, da, (None, dc_total * f)


def gru_step(xw: Any, state: tuple[Any], p: Mapping[str, Any], *,
             xp: Any) -> tuple[tuple[Any], Callable[..., Any]]:
    """One GRU step from ``xw = W_ih x + b_ih`` (``(B, 3H)``) and ``state = (h,)``.

    Forward, with ``hw = W_hh h + b_hh`` split into ``hw_r, hw_z, hw_n``:
    ``r = σ(xw_r + hw_r)``, ``z = σ(xw_z + hw_z)``, ``n = tanh(xw_n + r ⊙ hw_n)``,
    ``h' = (1 - z) ⊙ n + z ⊙ h``.

    Backward, given ``dh'``: ``dn = dh' ⊙ (1 - z)``, ``dz = dh' ⊙ (h - n)``, and ``h``
    gets ``dh' ⊙ z`` directly. Pre-activations: ``a_n = dn (1 - n²)``,
    ``a_z = dz z (1 - z)``, ``a_r = (a_n ⊙ hw_n) r (1 - r)``. Then
    ``dxw = [a_r; a_z; a_n]`` and ``dhw = [a_r; a_z; a_n ⊙ r]`` (``r`` gates only the
    recurrent half of ``n``), so ``dh += dhw W_hh``, ``dW_hh = dhwᵀ h``, ``db_hh = Σ_b dhw``.

    ``backprop(dh')`` returns ``(dxw, (dh,), {"W_hh": ..., "b_hh": ...})``.
    """
    (h,) = state
    (h_new,), parts = kernels.gru_parts(xw, state, p, xp=xp)

    def backprop(dh_new: Any) -> tuple[Any, ...]:
        dxw, dhw, (dh_direct,) = gru_back(parts, state, dh_new, xp=xp)
        grads = {"W_hh": xp.matrix_transpose(dhw) @ h, "b_hh": xp.sum(dhw, axis=0)}
        return dxw, (dh_direct + dhw @ p["W_hh"],), grads

    return (h_new,), backprop


def gru_back(parts: tuple[Any, ...], state: tuple[Any, ...], dh_new: Any, *,
             xp: Any) -> tuple[Any, Any, tuple[Any]]:
    """:func:`gru_step`'s backward pass from the step's saved values, without its matrix
    products: ``parts`` is :func:`xpseq.core.kernels.gru_parts`'s ``(r, z, n, hw)`` and
    ``state`` the ``(h,)`` the step started from. Returns ``(dxw, dhw, (dh' ⊙ z,))``: the
    caller adds ``dhw W_hh`` to the last to get ``dh``, and forms ``dW_hh = dhwᵀ h`` and
    ``db_hh = Σ_b dhw`` (over one step or many at once)."""
    r, z, n, hw = parts
    (h,) = state
    size = h.shape[-1]
    dn = dh_new * (1.0 - z)
    a_n = dn * (1.0 - n * n)
    a_z = dh_new * (h - n) * z * (1.0 - z)
    a_r = a_n * hw[..., 2 * size:] * r * (1.0 - r)
    dxw = xp.concat([a_r, a_z, a_n], axis=-1)
    dhw = xp.concat([a_r, a_z, a_n * r], axis=-1)
    return dxw, dhw, (dh_new * z,)


#: Each cell's rule (:func:`lstm_step`, :func:`gru_step`), by name.
CELL_STEPS: dict[str, Callable[..., tuple[tuple[Any, ...], Callable[..., Any]]]] = {
    "lstm": lstm_step, "gru": gru_step}

#: Each cell's backward pass from saved values: ``back(parts, state, *d_new_state) ->
#: (dxw, dhw, d_state)`` with ``d_state`` the state's gradient but for ``dhw W_hh`` (which
#: the caller adds to its ``h`` entry; ``None`` there for the LSTM).
CELL_BACKS: dict[str, Callable[..., tuple[Any, Any, Any]]] = {"lstm": lstm_back,
                                                              "gru": gru_back}


def sequence_step_back(cell: str, parts: tuple[Any, ...], state: tuple[Any, ...],
                       W_hh: Any, d_state: tuple[Any, ...], d_out: Any, valid_t: Any, *,
                       xp: Any) -> tuple[tuple[Any, ...], Any, Any]:
    """One step of backpropagation through a padded recurrence, without the step's weight
    products: the cell's backward (:data:`CELL_BACKS`) from its saved ``parts`` and the
    ``state`` it started from, given ``d_state`` (the next state's gradient) and ``d_out``
    (its output's), where ``valid_t`` ``(B, 1)``; a padded row passes ``d_state`` straight
    through. Returns ``(d_state_prev, dxw, dhw)``: ``W_hh``'s and ``b_hh``'s gradients are
    ``Σ dhwᵀ h`` and ``Σ dhw``, left to the caller to form over many steps at once."""
    d_state = (d_state[0] + xp.where(valid_t, d_out, 0.0), *d_state[1:])
    d_cell = tuple(xp.where(valid_t, d, 0.0) for d in d_state)
    dxw, dhw, direct = CELL_BACKS[cell](parts, state, *d_cell, xp=xp)
    dh = dhw @ W_hh
    d_prev = (dh if direct[0] is None else dh + direct[0], *direct[1:])
    return tuple(xp.where(valid_t, dp, d) for dp, d in zip(d_prev, d_state)), dxw, dhw
