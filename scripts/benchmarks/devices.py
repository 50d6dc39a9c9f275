"""Backends on a device for the scripts that measure them: ``--device`` (cpu, cuda[:N],
gpu[:N]) as each library spells it, the backend resolved on it, how to wait for its
results, and a cold compile cache for compiled PyTorch.

Imports xpseq and the libraries inside the functions (a script sets its threads first).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:
    from xpseq.backends import Backend

#: The backends with the CPU only (left out, with a note, on a GPU).
CPU_ONLY = ("numpy", "array_api_strict")


def library_device(name: str, device: str) -> str | None:
    """``device`` (``--device``: cpu, cuda[:N] or gpu[:N]) as backend ``name`` spells it
    for ``backends.get``: torch's ``cuda:N``, JAX's ``gpu:N``; None where the backend has
    the CPU only and ``device`` is a GPU."""
    kind, colon, index = device.partition(":")
    if kind == "cpu":
        return "cpu"
    if name == "torch":
        return "cuda" + colon + index
    if name == "jax":
        return "gpu" + colon + index
    return None


class DeviceError(Exception):
    """A backend asked for has not got the ``--device`` asked for."""


def device_backend(name: str, device: str, compile: bool = False) -> Backend:
    """``backends.get(name, device, compile=compile)``, its device resolved (JAX resolves
    its device on first use, so this asks for it now).

    Raises
    ------
    DeviceError
        The library does not see that device (the message says what it sees).
    """
    from xpseq import backends

    try:
        be = backends.get(name, library_device(name, device), compile=compile)
        if name == "jax":
            be.device  # noqa: B018  (JAX resolves its device when first asked)
        elif name == "torch" and be.device.type == "cuda":
            import torch

            count = torch.cuda.device_count()
            if (be.device.index or 0) >= count:
                raise ValueError(f"this PyTorch sees {count} CUDA device(s)")
    except ValueError as err:
        raise DeviceError(f"{name}: {err}") from None
    return be


def device_name(be: Backend) -> str:
    """The device a backend computes on, as its library names it, with a GPU's model."""
    if be.name in CPU_ONLY:
        return "cpu"
    device = be.device
    if be.name == "torch" and device.type == "cuda":
        import torch

        return f"{device} ({torch.cuda.get_device_name(device)})"
    if be.name == "jax" and device.platform != "cpu":
        return f"{device} ({getattr(device, 'device_kind', device.platform)})"
    return str(device)


def make_sync(backend: Backend) -> Callable[[Any], Any]:
    """Wait for a backend's results: JAX dispatches asynchronously, and so does PyTorch on
    a CUDA device; on the CPU PyTorch, NumPy and array_api_strict return finished arrays."""
    if backend.name == "jax":
        import jax

        return jax.block_until_ready
    if backend.name == "torch" and backend.device.type == "cuda":
        import torch

        def sync(tree: Any) -> Any:
            torch.cuda.synchronize(backend.device)
            return tree

        return sync
    return lambda tree: tree


@contextlib.contextmanager
def cold_compiles(backend: Backend) -> Iterator[None]:
    """For a compiled torch backend, a new, empty Inductor cache folder
    (``torch._inductor.utils.fresh_cache``), so that its compile time is a cold compile's
    and not a load of an earlier run's kernels; nothing for the other backends.

    (Inductor's ``force_disable_caches`` would be colder still, but it also compiles each
    of the unrolled RNN's many identical kernels again: at this script's tiny test sizes
    that took over 20 minutes on a loaded 2-core machine.)"""
    if backend.capabilities.compile != "pieces":
        yield
        return
    from torch._inductor.utils import fresh_cache

    with fresh_cache():
        yield
