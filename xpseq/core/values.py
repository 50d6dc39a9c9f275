"""The one door for values: every option a public function or configuration takes is
checked and normalised by these few checkers.

Each checker takes the name of the function or configuration that asks (``owner``, e.g.
``"TransformerConfig"``), the parameter's name and the value, and returns the value in its
one documented Python form, or raises:

* :class:`TypeError` when the value is of the wrong kind: a str, a float or a bool where an
  int is expected (``True`` is not ``1``), an int where a flag is expected, a number where
  a name is expected;
* :class:`ValueError` when it is of the right kind but outside what the parameter allows:
  a negative size, a step size that is NaN, a name that is not one of the choices.

The message names the owner, the parameter and what it takes, and shows the value.

What comes back is plain Python: a NumPy integer becomes an ``int``, a NumPy boolean a
``bool``, a NumPy float a ``float``, a NumPy string a ``str``, a dtype (``numpy.float32``,
``numpy.dtype("float64")``, ``torch.float32``) its name. So a configuration that went through
the door holds values that JSON writes and reads back equal: what is accepted trains,
saves, loads and comes back the same.

>>> import numpy as np
>>> integer("TransformerConfig", "d_model", np.int64(64), low=1)
64
>>> flag("Translator.train", "progress", np.bool_(False))
False
>>> integer("TransformerConfig", "attention_block", 1.5, low=1)
Traceback (most recent call last):
    ...
TypeError: TransformerConfig: attention_block must be a positive int, got float 1.5
>>> dtype_name("Translator.train", "dtype", "float16")
Traceback (most recent call last):
    ...
ValueError: Translator.train: dtype must be one of ['float32', 'float64'], got 'float16'
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Collection, Literal, Sequence, overload

__all__ = ["integer", "real", "flag", "choice", "dtype_name", "describe_int", "describe_real",
           "kind_of"]


def kind_of(value: Any) -> str:
    """How a message names a value: its type and repr (``float 1.5``, ``str 'no'``), the
    repr cut to 60 characters."""
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def _is_bool(value: Any) -> bool:
    """A Python or NumPy boolean (NumPy's ``bool_`` is no subclass of ``bool``)."""
    return isinstance(value, bool) or (type(value).__module__ == "numpy"
                                       and type(value).__name__ in ("bool_", "bool"))


def describe_int(low: int | None, high: int | None) -> str:
    """``"a positive int"``, ``"a non-negative int"``, ``"an int in [2, 8]"``, ..."""
    if high is None:
        if low == 1:
            return "a positive int"
        if low == 0:
            return "a non-negative int"
        return "an int" if low is None else f"an int >= {low}"
    if low is None:
        return f"an int <= {high}"
    return f"an int in [{low}, {high}]"


def describe_real(low: float | None, high: float | None, low_open: bool,
                  high_open: bool) -> str:
    """``"a positive number"``, ``"a non-negative number"`` (both finite),
    ``"a number in [0, 1)"``, ..."""
    unbounded = high is None or (high == math.inf and high_open)
    if low == 0 and unbounded:
        kind = "positive" if low_open else "non-negative"
        return f"a {kind} number" if high is not None else f"a {kind} number or inf"
    left, right = "(" if low_open else "[", ")" if high_open else "]"
    return (f"a number in {left}{'-inf' if low is None else low}, "
            f"{'inf' if high is None else high}{right}")


@overload
def integer(owner: str, name: str, value: Any, *, low: int | None = ...,
            high: int | None = ..., optional: Literal[False] = ...) -> int: ...
@overload
def integer(owner: str, name: str, value: Any, *, low: int | None = ...,
            high: int | None = ..., optional: bool) -> int | None: ...
def integer(owner: str, name: str, value: Any, *, low: int | None = None,
            high: int | None = None, optional: bool = False) -> int | None:
    """``value`` as a Python ``int`` in ``[low, high]`` (either bound may be absent), or
    ``None`` when ``optional`` and it is ``None``.

    Raises
    ------
    TypeError
        Not an integer (a bool, a float such as ``4.0``, a str, ``None`` where it is not
        optional).
    ValueError
        Outside ``[low, high]``.
    """
    if value is None and optional:
        return None
    what = describe_int(low, high) + (" or None" if optional else "")
    if _is_bool(value) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{owner}: {name} must be {what}, got {kind_of(value)}")
    number = int(value)
    if (low is not None and number < low) or (high is not None and number > high):
        raise ValueError(f"{owner}: {name} must be {what}, got {number}")
    return number


@overload
def real(owner: str, name: str, value: Any, *, low: float | None = ...,
         high: float | None = ..., low_open: bool = ..., high_open: bool = ...,
         optional: Literal[False] = ...) -> float: ...
@overload
def real(owner: str, name: str, value: Any, *, low: float | None = ...,
         high: float | None = ..., low_open: bool = ..., high_open: bool = ...,
         optional: bool) -> float | None: ...
def real(owner: str, name: str, value: Any, *, low: float | None = None,
         high: float | None = None, low_open: bool = False, high_open: bool = False,
         optional: bool = False) -> float | None:
    """``value`` as a Python ``float`` in the interval from ``low`` to ``high`` (open at
    an end where ``low_open`` / ``high_open``; an absent bound is unbounded), or ``None``
    when ``optional`` and it is ``None``. An int is taken as its float. NaN is never in an
    interval; infinity is where a bound is absent.

    Raises
    ------
    TypeError
        Not a real number (a bool, a str, a complex number, ``None`` where not optional).
    ValueError
        NaN, or outside the interval.
    """
    if value is None and optional:
        return None
    what = describe_real(low, high, low_open, high_open) + (" or None" if optional else "")
    if _is_bool(value) or not isinstance(value, numbers.Real):
        raise TypeError(f"{owner}: {name} must be {what}, got {kind_of(value)}")
    number = float(value)
    inside = not math.isnan(number)
    if inside and low is not None:
        inside = number > low if low_open else number >= low
    if inside and high is not None:
        inside = number < high if high_open else number <= high
    if not inside:
        raise ValueError(f"{owner}: {name} must be {what}, got {number!r}")
    return number


@overload
def flag(owner: str, name: str, value: Any, *, optional: Literal[False] = ...) -> bool: ...
@overload
def flag(owner: str, name: str, value: Any, *, optional: bool) -> bool | None: ...
def flag(owner: str, name: str, value: Any, *, optional: bool = False) -> bool | None:
    """``value`` as a Python ``bool`` (from a Python or NumPy boolean), or ``None`` when
    ``optional`` and it is ``None``.

    Raises
    ------
    TypeError
        Anything else: ``1``, ``"no"`` and ``"False"`` are not flags.
    """
    if value is None and optional:
        return None
    if not _is_bool(value):
        what = "True, False or None" if optional else "True or False"
        raise TypeError(f"{owner}: {name} must be {what}, got {kind_of(value)}")
    return bool(value)


@overload
def choice(owner: str, name: str, value: Any, choices: Collection[Any], *,
           optional: Literal[False] = ...) -> str: ...
@overload
def choice(owner: str, name: str, value: Any, choices: Collection[Any], *,
           optional: bool) -> str | None: ...
def choice(owner: str, name: str, value: Any, choices: Collection[Any], *,
           optional: bool = False) -> str | None:
    """``value`` as the ``str`` it is, when it is one of ``choices``; ``None`` when
    ``optional`` and it is ``None``.

    Raises
    ------
    TypeError
        Not a str (a number, a list).
    ValueError
        A str that is not one of ``choices``.
    """
    if value is None and optional:
        return None
    what = ("None or " if optional else "") + f"one of {list(choices)}"
    if not isinstance(value, str):
        raise TypeError(f"{owner}: {name} must be {what}, got {kind_of(value)}")
    text = str(value)                                    # numpy.str_ -> str
    if text not in choices:
        raise ValueError(f"{owner}: {name} must be {what}, got {text!r}")
    return text


def dtype_name(owner: str, name: str, value: Any,
               choices: Sequence[str] = ("float32", "float64")) -> str:
    """The name of the dtype ``value`` stands for, when it is one of ``choices``.

    A dtype may be given as its name (``"float32"``), a NumPy dtype or scalar type
    (``numpy.dtype("float64")``, ``numpy.float32``), or another library's dtype whose
    ``str`` ends in its name (``torch.float32``, ``jax.numpy.float32``).

    Raises
    ------
    TypeError
        Not a dtype nor a str.
    ValueError
        A dtype (or a str) that is not one of ``choices``: ``"float16"``, ``"int32"``,
        ``"bogus"``.
    """
    found = str(value) if isinstance(value, str) else _dtype_of(value)
    if found is None:
        raise TypeError(f"{owner}: {name} must be one of {list(choices)} (a dtype or its "
                        f"name), got {kind_of(value)}")
    if found not in choices:
        raise ValueError(f"{owner}: {name} must be one of {list(choices)}, got {found!r}")
    return found


def _dtype_of(value: Any) -> str | None:
    """The name of a NumPy dtype or scalar type, a torch dtype or a JAX scalar type;
    ``None`` for anything else. No library is imported: each is known by its module."""
    if isinstance(value, type) and value.__module__ == "numpy":
        return value.__name__                            # numpy.float32
    module = type(value).__module__.split(".")[0]
    if module == "numpy":                                # numpy.dtype("float32")
        is_dtype = type(value).__name__ == "dtype" or type(value).__name__.endswith("DType")
        return str(value.name) if is_dtype else None
    if module == "torch" and type(value).__name__ == "dtype":
        return str(value).rsplit(".", 1)[-1]             # torch.float32
    inner = getattr(value, "dtype", None)        # jax.numpy.float32 holds its NumPy dtype
    if inner is not None and not hasattr(value, "shape") and type(inner).__module__ != module:
        return _dtype_of(inner)
    return None
