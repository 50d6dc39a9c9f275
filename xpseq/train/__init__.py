"""Training: the step, the loop around it, and checkpoints.

================  ==========================================================================
module            contents
================  ==========================================================================
``loop``          fit (the loop), FitResult, make_train_step, make_eval_loss, evaluate_loss
``checkpoint``    save / load: safetensors arrays with JSON metadata, verified on load
================  ==========================================================================
"""

from . import checkpoint
from .loop import (
    FitResult,
    TrainStep,
    check_batch,
    evaluate_loss,
    fit,
    make_eval_loss,
    make_train_step,
)

__all__ = ["TrainStep", "make_train_step", "make_eval_loss", "evaluate_loss", "fit", "FitResult",
           "check_batch", "checkpoint"]
