"""The types of xpseq's annotations.

``Array`` is an array of any library that follows the Python array API standard (NumPy,
JAX, PyTorch, ``array_api_strict``). The standard gives no static type for one, so to a type
checker it is ``Any``; the name says what a parameter holds.
"""

from typing import Any, TypeAlias

Array: TypeAlias = Any

__all__ = ["Array"]
