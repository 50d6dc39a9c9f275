"""Lesson 6: JAX's silent float32 without x64.

What dtype a float64 input becomes in each library; JAX without ``jax_enable_x64`` runs in
a subprocess, so the flag is never toggled in this process.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np

from xpseq.tour._common import (
    NONE,
    Cells,
    Row,
    format_fact,
    register_lesson,
    run_columns,
    table_rows,
)

__all__ = ["lesson_silent_float32", "numpy_dtypes", "jax_dtypes", "jax_dtypes_without_x64",
           "jax_dtype_with_x64", "torch_dtypes"]


# ------------------------------------------------------------------------ the code


def numpy_dtypes(host: np.ndarray) -> dict[str, str]:
    """What dtype each way of making an array gives in NumPy."""
    return {"from_numpy": str(np.asarray(host).dtype), "python_float": str(np.asarray(1.0).dtype),
            "explicit": str(np.asarray(1.0, dtype=np.float64).dtype)}


def jax_dtypes() -> dict:
    """What dtype each way of making an array gives in JAX, and the warnings it raises (run
    with x64 off by :func:`jax_dtypes_without_x64`, in a fresh interpreter)."""
    import warnings

    import jax
    import jax.numpy as jnp
    import numpy as np

    makers = {"from_numpy": lambda: jnp.asarray(np.ones(2, dtype=np.float64)),
              "python_float": lambda: jnp.asarray(1.0),
              "explicit": lambda: jnp.array(1.0, dtype=jnp.float64)}
    found: dict[str, Any] = {"x64": bool(getattr(jax.config, "jax_enable_x64"))}
    for name, make in makers.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            found[name] = str(make().dtype)
        found[name + "_warnings"] = [str(w.message) for w in caught]
    return found


def jax_dtypes_without_x64() -> dict:
    """:func:`jax_dtypes` in a fresh interpreter with ``JAX_ENABLE_X64=0``, so that this
    process's setting is never touched."""
    program = f"import json\n{textwrap.dedent(inspect.getsource(jax_dtypes))}\n" \
              f"print(json.dumps(jax_dtypes()))"
    env = dict(os.environ, JAX_ENABLE_X64="0", JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          env=env, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"the JAX float32 probe failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def jax_dtype_with_x64(host: np.ndarray) -> str:
    """The dtype JAX gives a float64 NumPy array with x64 on (the tour turns it on)."""
    import jax.numpy as jnp

    return str(jnp.asarray(host).dtype)


def torch_dtypes(host: np.ndarray) -> dict[str, str]:
    """What dtype each way of making a tensor gives in torch."""
    import torch

    found = {"from_numpy": torch.as_tensor(host).dtype, "python_float": torch.tensor(1.0).dtype,
             "explicit": torch.tensor(1.0, dtype=torch.float64).dtype}
    return {k: str(v).replace("torch.", "") for k, v in found.items()}


# ------------------------------------------------------------------------ the table


@register_lesson(6, "JAX's silent float32 without x64",
                 code=(numpy_dtypes, jax_dtypes, jax_dtypes_without_x64, jax_dtype_with_x64,
                       torch_dtypes))
def lesson_silent_float32() -> tuple[str, list[Row], dict[str, Any]]:
    """What dtype a float64 input becomes, with and without JAX's x64 mode."""
    host = np.ones(2, dtype=np.float64)
    facts: dict[str, Any] = {}

    def numpy_part(facts: dict[str, Any]) -> Cells:
        found = numpy_dtypes(host)
        facts.update({f"numpy_{k}": v for k, v in found.items()})
        return found | {"x64": NONE}

    def jax_part(facts: dict[str, Any]) -> Cells:
        probe = jax_dtypes_without_x64()
        with_x64 = jax_dtype_with_x64(host)
        facts.update(jax_x64_flag_in_probe=probe["x64"], jax_from_numpy_with_x64=with_x64)
        cells = {"x64": with_x64}
        for key in ("from_numpy", "python_float", "explicit"):
            warning = probe[f"{key}_warnings"][0] if probe[f"{key}_warnings"] else ""
            facts[f"jax_{key}"] = probe[key]
            facts[f"jax_{key}_warning"] = warning
            cells[key] = probe[key] + (f" + warning: {warning[:45]}..." if warning
                                       else ", no warning")
        return cells

    def torch_part(facts: dict[str, Any]) -> Cells:
        found = torch_dtypes(host)
        facts.update({f"torch_{k}": v for k, v in found.items()})
        return found | {"x64": NONE}

    columns = run_columns(facts, numpy=numpy_part, jax=jax_part, torch=torch_part)
    rows = table_rows(columns, [
        ("from_numpy", "array from a float64 NumPy array (jax: x64 off, in a subprocess)"),
        ("python_float", "array from the Python float 1.0"),
        ("explicit", "array(1.0, dtype=float64)"),
        ("x64", "from the float64 NumPy array with x64 on (jax.enable_x64; "
                "numpy, torch: no such flag)"),
    ])
    def warned(key: str) -> str:
        return "with a warning" if facts.get(f"jax_{key}_warning") else "silently"

    explanation = (
        "Without jax_enable_x64, JAX turns a float64 NumPy array into "
        f"{format_fact(facts, 'jax_from_numpy')} {warned('from_numpy')} and even an explicit "
        f"dtype=float64 into {format_fact(facts, 'jax_explicit')} {warned('explicit')}, while with "
        f"x64 on it stays {format_fact(facts, 'jax_from_numpy_with_x64')} (xpseq leaves that "
        "switch to the caller and refuses float64 on JAX without it); torch keeps float64 arrays "
        f"but makes Python floats {format_fact(facts, 'torch_python_float')}."
    )
    return explanation, rows, facts
