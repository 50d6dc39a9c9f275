"""xpseq: sequence-to-sequence learning with attention, written once against the Python
array API standard and run unchanged on NumPy, JAX and PyTorch.

==================  ======================================================================
package             what it holds
==================  ======================================================================
``xpseq.core``      the math: masking, attention, layers, cells, losses, optimisers,
                    search loops, hand-derived backward rules (``vjp``), kernels
``xpseq.backends``  what each library adds to the standard (conversion, gradients,
                    compilation, scan, custom_vjp), each backend's declared capabilities,
                    the default rule, the cache of built programs
``xpseq.models``    model kinds behind one protocol, and their registry (``rnn``,
                    ``transformer``)
``xpseq.data``      toy task, CMU dictionary, TSV corpora, vocabularies, batches
``xpseq.train``     the training step and loop, schedules, callbacks, checkpoints
``xpseq.search``    greedy and beam search over a model
``xpseq.tasks``     experiments: the toy translator, the G2P recipe, metrics
``xpseq.g2p``       the shipped grapheme-to-phoneme model: words, running text, lexicon
``xpseq.export``    ONNX export (traced by ndonnx) and decoding an export on onnxruntime
``xpseq.app``       the ``xpseq`` command, the demo, plots
``xpseq.tour``      the autodiff tour
``xpseq.testing``   the parity tolerances and comparison helpers
==================  ======================================================================

The front door (:mod:`xpseq.tasks.translator`)::

    task = xpseq.toy_task()                                   # or xpseq.task_from_pairs(...)
    model = xpseq.Translator.train(task, model="transformer", epochs=5)
    model.translate(["the old cat sees the dog"], beam=5)
    model.save("toy.safetensors"); xpseq.load("toy.safetensors", backend="numpy")
    decoder = xpseq.load_decoder("toy.safetensors")           # or an ONNX export's folder
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

if _TYPE_CHECKING:               # what __getattr__ below imports when first used
    from . import backends, core
    from .export.decoders import load_decoder
    from .tasks.experiment import task_from_pairs, toy_task
    from .tasks.translator import Translator, load

__all__ = ["backends", "core", "Translator", "load", "load_decoder", "toy_task",
           "task_from_pairs", "__version__"]
#: The subpackages reachable as attributes after ``import xpseq`` (``xpseq.g2p``), each
#: imported when first used: ``import xpseq`` imports nothing else, so that the command's
#: entry point (:mod:`xpseq.__main__`) takes Ctrl-C over before any library is imported.
_SUBPACKAGES = ("app", "backends", "core", "data", "export", "g2p", "io", "models", "search",
                "tasks", "testing", "tour", "train")
__version__ = "0.1.0.dev0"

_FRONT_DOOR = {"Translator": "tasks.translator", "load": "tasks.translator",
               "toy_task": "tasks.experiment", "task_from_pairs": "tasks.experiment",
               "load_decoder": "export.decoders"}


def __getattr__(name: str) -> _Any:
    # The front door's names and the subpackages, imported when first used (``import
    # xpseq`` stays light).
    import importlib

    if name in _FRONT_DOOR:
        return getattr(importlib.import_module(f"xpseq.{_FRONT_DOOR[name]}"), name)
    if name in _SUBPACKAGES:
        return importlib.import_module(f"xpseq.{name}")
    raise AttributeError(f"module 'xpseq' has no attribute {name!r}")


def __dir__() -> list[str]:
    # The public API only: the front door and the subpackages.
    return sorted(set(__all__) | set(_SUBPACKAGES))
