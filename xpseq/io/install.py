"""The command that installs an optional part of xpseq, said the way this copy was installed.

An installed distribution takes an extra by its name (``pip install 'xpseq[torch]'``); a
clone, where ``xpseq`` is imported from the checkout (``make demo`` and ``make test``
install it editable), takes it from its folder, with the Python of its environment
(``/path/to/clone/.venv/bin/python -m pip install -e '/path/to/clone[torch]'``): the name
alone would fetch a released xpseq from the index beside the clone. An extra that brings
PyTorch adds, on a machine without an NVIDIA GPU, the CPU build to install first (PyPI's
Linux wheels bring about 3 GB of CUDA libraries that such a machine cannot use).
"""

from __future__ import annotations

import pathlib
import re
import shlex
import shutil
import sys

__all__ = ["CPU_TORCH", "source_checkout", "install_hint"]

#: PyTorch's CPU build, installed before an extra that needs torch on a machine without GPU.
CPU_TORCH = "pip install torch --index-url https://download.pytorch.org/whl/cpu"
_WITH_TORCH = ("torch", "all", "docs", "dev")


def source_checkout() -> pathlib.Path | None:
    """The clone that this ``xpseq`` is imported from, or ``None`` for an installed copy.

    Returns
    -------
    pathlib.Path or None
        The folder above the package when it holds xpseq's own ``pyproject.toml``.

    Examples
    --------
    >>> from xpseq.io.install import source_checkout
    >>> root = source_checkout()
    >>> root is None or (root / "xpseq" / "__init__.py").exists()
    True
    """
    root = pathlib.Path(__file__).resolve().parents[2]
    try:
        project = (root / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return None
    return root if re.search(r'(?m)^name\s*=\s*"xpseq"\s*$', project) else None


def install_hint(extra: str) -> str:
    """The command (one line) that installs xpseq's optional dependencies ``extra``.

    Parameters
    ----------
    extra : str
        The name of the extra, e.g. ``"torch"``, ``"onnx"``, ``"subword"``.

    Returns
    -------
    str
        ``pip install 'xpseq[EXTRA]'`` for an installed copy; for a clone, this Python's
        ``-m pip install -e 'CLONE[EXTRA]'``; for an extra that needs PyTorch on a machine
        without ``nvidia-smi``, the CPU build's command first (``...; then ...``).

    Raises
    ------
    ValueError
        ``extra`` is not a name of letters, digits, ``-`` and ``_``.

    Examples
    --------
    >>> from xpseq.io.install import install_hint
    >>> "xpseq[onnx]" in install_hint("onnx") or "[onnx]" in install_hint("onnx")
    True
    """
    if not isinstance(extra, str) or not re.fullmatch(r"[A-Za-z0-9_-]+", extra):
        raise ValueError(f"install_hint: extra must be the name of one of xpseq's extras, "
                         f"got {extra!r}")
    root = source_checkout()
    if root is None:
        pip = "pip"
        command = f"pip install 'xpseq[{extra}]'"
    else:
        pip = f"{shlex.quote(sys.executable)} -m pip"
        command = f"{pip} install -e {shlex.quote(f'{root}[{extra}]')}"
    if extra in _WITH_TORCH and shutil.which("nvidia-smi") is None:
        first = CPU_TORCH.replace("pip", pip, 1)
        return f"{first} (PyTorch's CPU build: this machine has no NVIDIA GPU), then {command}"
    return command
