"""xpseq: sequence-to-sequence learning with attention, written once against the Python
array API standard and run unchanged on NumPy, JAX and PyTorch.

``xpseq.core`` holds the math (masked softmax, attention scores, attention pooling,
multi-head attention); ``xpseq.backends`` holds what each library adds to the standard
(conversion, gradients, jit, scan); ``xpseq.testing`` the parity tolerances and helpers.
"""

from . import backends, core

__all__ = ["backends", "core", "__version__"]
__version__ = "0.1.0.dev0"
