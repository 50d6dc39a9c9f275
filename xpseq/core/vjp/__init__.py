"""Hand-derived backward passes: how NumPy gets gradients without autodiff.

Every rule here runs a core forward kernel (the same one JAX and PyTorch run) and returns
its output together with a *backprop* callback, in the style of Thinc::

    y, backprop = linear(x, W, b, xp=xp)
    dx, dW, db = backprop(dy)          # the vector-Jacobian product: dy ↦ dy · ∂y/∂inputs

``backprop`` takes the gradient of a scalar loss with respect to the output (same shape as
the output) and returns the gradients with respect to the inputs, in the order of the
arguments (``None`` for integer and boolean inputs such as ids and masks). Each rule's
derivation is in its docstring; ``⊙`` is the elementwise product and ``Σ_b`` a sum over
the leading (batch) axes. Everything is written against the array API, so the same rules
run on NumPy, JAX, PyTorch and ``array_api_strict`` arrays, and the parity tests compare
them with ``jax.vjp``, ``torch.autograd`` and central finite differences.

The rules, by family (every name is importable from this package):

=============  ===========================================================================
module         rules
=============  ===========================================================================
``layers``     linear, embedding, sigmoid, tanh, gelu, relu, layer_norm, feed_forward,
               concat, dropout
``softmax``    masked_softmax (and its backward from the weights, softmax_back),
               log_softmax, nll_sum (the loss)
``attention``  dot_scores, general_scores, additive_from_projections, weighted_sum,
               attend, heads, blockwise_attention (whose backward, derived in
               :func:`xpseq.core.blockwise.backward`, sits beside its forward)
``recurrent``  lstm_step, gru_step, their backward from saved values (lstm_back,
               gru_back, CELL_BACKS) and one step of backpropagation through a padded
               recurrence (sequence_step_back)
=============  ===========================================================================

The chains of these rules through a whole model live beside the model:
:mod:`xpseq.models.transformer.backward` (multi-head attention) and
:mod:`xpseq.models.rnn.backward` (backpropagation through time).

A rule that loops (blockwise attention) takes the loop as ``scan=``: the backend's
``backend.scan``, as every loop of the models does; only a caller with no backend passes
none, and the arrays' own loop runs (:func:`xpseq.core.delegation.scan`).

:func:`defvjp` (defined in :mod:`xpseq.core.rules`) attaches a rule to a function; the numpy
and array_api_strict backends' ``value_and_grad`` use that rule (``jax.custom_vjp`` has the
same idea). These kernels do not validate their inputs: they sit behind the public
functions, which do.
"""

from __future__ import annotations

from ..rules import defvjp
from .attention import (
    additive_from_projections,
    attend,
    blockwise_attention,
    dot_scores,
    general_scores,
    heads,
    weighted_sum,
)
from .layers import (
    concat,
    dropout,
    embedding,
    feed_forward,
    gelu,
    layer_norm,
    linear,
    relu,
    sigmoid,
    tanh,
)
from .recurrent import (
    CELL_BACKS,
    CELL_STEPS,
    gru_back,
    gru_step,
    lstm_back,
    lstm_step,
    sequence_step_back,
)
from .softmax import log_softmax, masked_softmax, nll_sum, softmax_back

__all__ = ["defvjp", "linear", "embedding", "sigmoid", "tanh", "gelu", "relu", "layer_norm",
           "feed_forward", "concat", "dropout",
           "masked_softmax", "log_softmax", "nll_sum", "softmax_back",
           "dot_scores", "general_scores", "additive_from_projections", "weighted_sum",
           "attend", "blockwise_attention", "heads",
           "lstm_step", "gru_step", "lstm_back", "gru_back", "sequence_step_back",
           "CELL_STEPS", "CELL_BACKS"]
