"""What the benchmark sections share: the results table (:class:`Row`), the environment
they report, the implementations' labels, batches on a backend, and the timed loops.

The script-wide helpers (command line, threads, ``take_turns``, Markdown and JSON files)
are ``scripts/_common.py``'s; this module holds only what the benchmarks add to them.
Nothing here imports xpseq, JAX or PyTorch at import time: ``bench.py`` sets the thread
settings and ``XLA_FLAGS`` first.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any, Callable, Sequence

import numpy as np

from .. import _common as common

#: The environment variables that set threads, printed with every report.
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
               "OPENBLAS_CORETYPE", "XLA_FLAGS")
KEYS = common.BATCH_KEYS
#: xpseq on PyTorch with the hand-derived backward of xpseq.core.vjp instead of autograd
#: (``make_train_step(..., gradients="hand-derived")``).
HAND = "xpseq-torch, hand-derived backward"
#: xpseq on JAX whose encoder recurrences differentiate with the hand-derived rules inside
#: the jitted step (``gradients="hand-derived"`` on JAX: a ``jax.custom_vjp``).
HAND_JAX = "xpseq-jax, hand-derived recurrences"
#: The Transformer's hand-derived backward pass on JAX (traced whole) and on PyTorch.
HAND_T = "xpseq-jax, hand-derived backward"
HAND_T_TORCH = "xpseq-torch, hand-derived backward"

# ------------------------------------------------------------------------- results


@dataclasses.dataclass
class Row:
    """One line of the results table."""

    section: str
    measure: str
    value: float | int | str
    unit: str = ""
    ratio: float | None = None
    target: str = "—"
    met: bool | None = None
    detail: str = ""

    def cells(self) -> list[str]:
        ratio = "—" if self.ratio is None else f"{self.ratio:.3g}x"
        met = {None: "—", True: "yes", False: "**no**"}[self.met]
        return [self.section, self.measure, f"{fmt(self.value)} {self.unit}".strip(), ratio,
                self.target, met, self.detail]


def fmt(value: Any) -> str:
    """A table cell's number: 4 significant digits, thousands separated from 100 on,
    powers of ten outside [1e-3, 1e6)."""
    if isinstance(value, float):
        if value == 0 or 1e-3 <= abs(value) < 1e6:
            return f"{value:.4g}" if abs(value) < 100 else f"{value:,.0f}"
        return f"{value:.2e}"
    return str(value)


def at_least(value: float, bound: float) -> tuple[str, bool]:
    """The target cell ``>= {bound}x`` and whether ``value`` meets it."""
    return f">= {bound:g}x", value >= bound


def results_table(rows: Sequence[Row]) -> str:
    """The results table of ``rows``, in Markdown."""
    header = ["section", "measurement", "value", "ratio", "target", "met", "detail"]
    return common.markdown_table(header, (r.cells() for r in rows), rule="---")


def environment() -> dict:
    """PyTorch's threads, the thread variables, the versions and the machine."""
    import torch

    return {
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "env": common.env_vars(THREAD_VARS, missing="unset"),
        **common.package_versions(("numpy", "torch", "jax", "jaxlib", "keras", "flax", "optax",
                                    "onnxruntime")),
        **common.machine(),
    }


# ------------------------------------------------------------------------- batches


def on_backend(be: Any, batch: dict) -> dict:
    """The training arrays of a NumPy ``batch`` (``KEYS``: ``src`` ``(B, S)``, ``src_len``
    ``(B,)``, ``tgt_in`` and ``tgt_out`` ``(B, T)``; not its ``index``) on backend ``be``
    (the library's one conversion of a tree of arrays, ``Backend.asarray_tree``)."""
    return be.asarray_tree({k: batch[k] for k in KEYS})


def to_torch(batch: dict) -> dict:
    """The training arrays of a NumPy ``batch`` as torch tensors, for the native models."""
    import torch

    return {k: torch.as_tensor(batch[k]) for k in KEYS}


def float32_on(be: Any, params: dict) -> dict:
    """NumPy parameters on backend ``be`` in float32."""
    return {k: be.asarray(v, dtype="float32") for k, v in params.items()}


# -------------------------------------------------------------------------- timing


def xpseq_loop(be: Any, step: Any, params: dict, optimizer: Any,
               batches: list) -> Callable[[], None]:
    """A timed repeat: ``step`` over ``batches`` from ``params``, carrying the parameters
    and optimiser state from one repeat to the next (every batch shape compiled first).
    The returned function's ``state`` holds the current ``params`` and ``opt``."""
    state = {"params": params, "opt": optimizer.init(params)}
    seen: set = set()
    for b in batches:                                  # compile every shape (JAX), warm up
        key = (tuple(b["src"].shape), tuple(b["tgt_in"].shape))
        if key not in seen:
            seen.add(key)
            step(state["params"], state["opt"], b)

    def run() -> None:
        loss = None
        for b in batches:
            state["params"], state["opt"], loss = step(state["params"], state["opt"], b)
        float(be.to_numpy(loss))                       # wait for JAX's asynchronous steps

    run.state = state
    return run


def native_loop(native_step: Callable[[Any], Any], batches: list, *,
                warm_up: bool = True) -> Callable[[], None]:
    """A timed repeat of a native or peer model: one ``native_step`` per batch, waiting
    for the last loss (one warm-up step first, unless ``warm_up=False``: a step whose
    compilation was already timed)."""
    if warm_up:
        native_step(batches[0])

    def run() -> None:
        loss = None
        for b in batches:
            loss = native_step(b)
        float(loss)

    return run


def matmul_gflops(n: int, repeats: int) -> dict[str, float]:
    """Float32 ``n × n`` matmul GFLOP/s (median) with torch, NumPy and jitted JAX."""
    import jax
    import jax.numpy as jnp
    import torch

    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    reps = max(1, int(2e10 // (2 * n ** 3)))          # about 20 GFLOP per repeat
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    ja, jb = jnp.asarray(a), jnp.asarray(b)
    jmm = jax.jit(jnp.matmul)
    jmm(ja, jb).block_until_ready()

    def run_torch() -> None:
        for _ in range(reps):
            torch.mm(ta, tb)

    def run_numpy() -> None:
        for _ in range(reps):
            a @ b

    def run_jax() -> None:
        for _ in range(reps):
            jmm(ja, jb).block_until_ready()

    run_torch()
    run_numpy()
    times = common.take_turns({"torch": run_torch, "numpy": run_numpy, "jax": run_jax},
                              max(repeats, 3))
    return {k: reps * 2 * n ** 3 / statistics.median(t) / 1e9 for k, t in times.items()}
