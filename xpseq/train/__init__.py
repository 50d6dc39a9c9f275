"""Training: the step, the loop around it and its parts, and checkpoints.

================  ==========================================================================
module            contents
================  ==========================================================================
``step``          make_train_step (loss, gradient, clipping, update), make_eval_loss
``loop``          fit, TrainConfig, FitResult, Loop (what callbacks see)
``callbacks``     EarlyStopping, ReduceLROnPlateau, RestoreBest, TimeLimit, SaveCheckpoint,
                  EpochMetrics, MetricsLog, MaxSteps
``reporting``     ProgressBar: the bar, the epoch lines and what a long step is doing
``schedules``     learning-rate schedules as pure functions of the step, the ``lr`` of an
                  optimiser (``adam(1e-3 * schedules.warmup_inverse_sqrt(400))``)
``checkpoint``    save / load: safetensors arrays with JSON metadata, verified on load
                  (``load`` returns a ``Checkpoint``)
================  ==========================================================================
"""

from . import callbacks, checkpoint, reporting, schedules
from .loop import FitResult, Loop, TrainConfig, fit
from .step import TrainStep, evaluate_loss, make_eval_loss, make_train_step

__all__ = ["TrainConfig", "fit", "FitResult", "Loop", "TrainStep", "make_train_step",
           "make_eval_loss", "evaluate_loss", "callbacks", "checkpoint", "reporting",
           "schedules"]
