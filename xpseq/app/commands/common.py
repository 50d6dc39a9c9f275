"""What the subcommands share: choosing the backend (one default rule per purpose; JAX's
64-bit mode and compilation cache for the command's own process), loading a checkpoint or
an export as a Decoder, the tokens a model reads and writes, search options, notes on
unknown words, the toy and G2P data.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import sys
from typing import Any, Callable, Sequence

from xpseq import backends
from xpseq.core import checks
from xpseq.io import files, reading
from xpseq.io.install import install_hint

from .. import options as opts
from ..errors import CommandError, oserror_message

__all__ = ["Invocation", "command_backend", "enable_jax_x64", "JAX_CACHE_ENV", "JAX_CACHE_BYTES",
           "jax_cache_dir", "enable_jax_cache", "search_options_of", "note_unknown",
           "note_unknown_words", "model_tokens", "tokens_option", "translate_nonempty",
           "TOY_DATA_LIMITS", "read_tsv", "toy_task_for", "g2p_split", "check_exist",
           "open_decoder", "check_export_folder"]


@dataclasses.dataclass(frozen=True)
class Invocation:
    """What a subcommand may need of its call besides its options: the command line
    ``argv`` (after ``xpseq``) and the command's entry point ``entry`` (``entry(argv)``
    runs it again and returns its exit code; a run over several processes starts each
    this way). :mod:`xpseq.app.cli` hands it to every subcommand as ``args.invocation``."""

    argv: tuple[str, ...]
    entry: Callable[[Sequence[str]], int]


def command_backend(name: str | None, compile: bool = False,
             purpose: str = "train") -> backends.Backend:
    """``--backend``, or the one default rule for ``purpose`` (``XPSEQ_BACKEND``, else the
    fastest installed for training or for decoding: :func:`xpseq.backends.default_name`);
    ``--compile`` (``compile``) is torch with torch.compile whatever the default. Every
    subcommand (and the demo) gets its backend here: ``train`` and ``demo`` for training,
    ``translate``, ``evaluate``, ``heatmap`` and ``g2p`` for decoding.

    The command is an application, and on JAX it enables 64-bit types for its own process
    (``jax_enable_x64``), before the backend is created, so that ``--dtype float64``
    computes in float64, and JAX's persistent compilation cache (:func:`enable_jax_cache`);
    the library never changes JAX's configuration itself."""
    try:
        name = name or ("torch" if compile else backends.default_name(purpose))
        if name == "jax":
            enable_jax_x64()
            enable_jax_cache()
        backend = backends.get(name, compile=compile)
    except (ValueError, ModuleNotFoundError) as err:
        raise CommandError(str(err)) from None
    return backend


def enable_jax_x64() -> None:
    """``jax.config.update("jax_enable_x64", True)``, when JAX is installed (without it,
    :func:`xpseq.backends.get` says how to install it)."""
    try:
        import jax
    except ModuleNotFoundError:
        return
    jax.config.update("jax_enable_x64", True)


#: The environment variable that moves (a folder) or turns off (``0``, ``off``) the
#: command's persistent JAX compilation cache.
JAX_CACHE_ENV = "XPSEQ_JAX_CACHE"


#: The most the cache may hold; JAX removes the least recently used programs beyond it.
JAX_CACHE_BYTES = 2**30


def jax_cache_dir() -> pathlib.Path | None:
    """The folder of the command's persistent JAX compilation cache: ``$XPSEQ_JAX_CACHE``
    when it names one, ``None`` (no cache) when it is ``0``, ``off``, ``false`` or ``no``,
    else ``xpseq/jax`` in the user's cache folder (``$XDG_CACHE_HOME``, else
    ``~/.cache``)."""
    text = os.environ.get(JAX_CACHE_ENV, "").strip()
    if text.lower() in ("0", "off", "false", "no"):
        return None
    if text:
        return pathlib.Path(text).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join("~", ".cache")
    return pathlib.Path(base).expanduser() / "xpseq" / "jax"


def enable_jax_cache() -> None:
    """JAX's persistent compilation cache for the command's own process, in
    :func:`jax_cache_dir` (at most :data:`JAX_CACHE_BYTES`): a program compiled once (a
    training step, a search) is read back in later runs instead of compiled again (JAX
    keeps those that took at least ``jax_persistent_cache_min_compile_time_secs``, 1 s by
    default, to compile). A cache folder the user gave JAX itself
    (``JAX_COMPILATION_CACHE_DIR``) is left as it is; a folder that cannot be made means no
    cache."""
    try:
        import jax
    except ModuleNotFoundError:
        return
    folder = jax_cache_dir()
    if folder is None or getattr(jax.config, "jax_compilation_cache_dir") is not None:
        return
    try:
        files.make_folder(folder)           # JAX writes the cache's files itself
    except (OSError, ValueError):
        return
    jax.config.update("jax_compilation_cache_dir", str(folder))
    if getattr(jax.config, "jax_compilation_cache_max_size") == -1:             # JAX's: no limit
        jax.config.update("jax_compilation_cache_max_size", JAX_CACHE_BYTES)


def search_options_of(args: argparse.Namespace):
    from xpseq.search import SearchOptions

    precision = opts.precision_of(args)
    n_best = getattr(args, "n_best", 1)           # (evaluate and heatmap score the best)
    if args.beam == 1 and n_best == 1:
        return SearchOptions(precision=precision)
    return SearchOptions(method="beam", k=args.beam, n_best=n_best,
                         length_penalty=args.length_penalty, alpha=args.alpha,
                         precision=precision)


def note_unknown(sentences: Sequence[Sequence[str]], vocab, mode: str = "word") -> None:
    """One note on stderr naming the tokens of ``sentences`` that ``vocab`` lacks."""
    note_unknown_words({t for s in sentences for t in s if t not in vocab}, mode)


def note_unknown_words(words: set[str], mode: str = "word") -> None:
    """One note on stderr naming ``words`` (at most 10), the source tokens read as
    ``<unk>``: words, or characters for a model that reads characters (``mode``)."""
    unknown = sorted(words)
    if unknown:
        shown = ", ".join(reading.shown(w, 40) for w in unknown[:10]) + (
            " ..." if len(unknown) > 10 else "")
        what = "character(s)" if mode == "char" else "word(s)"
        print(f"xpseq: note: {len(unknown)} unknown source {what} read as <unk>: {shown}",
              file=sys.stderr)


def model_tokens(decoder: Any) -> tuple[str, str]:
    """The ``(source, target)`` modes ``decoder``'s model was trained with
    (:func:`xpseq.data.tokens.of_model` of its metadata): how a door splits the text it
    reads for it and joins its output. A one-line error for metadata that names no mode."""
    from xpseq.data import tokens

    try:
        return tokens.of_model(decoder.metadata)
    except ValueError as err:
        raise CommandError(str(err)) from None


def tokens_option(text: str) -> str:
    """``--tokens``' type: ``word``, ``char``, ``bpe``, ``unigram`` or ``SOURCE,TARGET``
    (e.g. ``word,char``), as :func:`xpseq.data.tokens.text_of` spells it (``char,char`` is
    ``char``)."""
    from xpseq.data import tokens

    try:
        return tokens.text_of(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected word, char, bpe, unigram, or SOURCE,TARGET such as word,char (each "
            f"one of them), got {text!r}") from None


def translate_nonempty(decoder, sentences, options):
    from xpseq.tasks import translate

    keep = [i for i, s in enumerate(sentences) if s]
    # (bounded by the command already: translate's --max-tokens, heatmap's word limit)
    done = translate(decoder, [sentences[i] for i in keep], options, max_tokens=None)
    out: list[dict | None] = [None] * len(sentences)
    for i, result in zip(keep, done):
        out[i] = result
    return out


#: What a toy checkpoint's metadata may say about its data, and the largest values read
#: from a file (the command builds the test set again from them).
TOY_DATA_LIMITS = {"n_train": 10**6, "n_dev": 10**5, "n_test_per_bucket": 10**5,
                   "seed": 2**32 - 1}


def read_tsv(path: str, tokens: Any, option: str = "--train") -> list:
    """The pairs of a TSV corpus, or a one-line error naming ``option``, the command's
    option that gave ``path`` (missing, a folder, unreadable, malformed, or empty)."""
    from xpseq.data import read_parallel_tsv

    if os.path.isdir(path):
        raise CommandError(f"{option} {path} is a folder, not a TSV file")
    if not os.path.lexists(path):
        raise CommandError(f"{option}: no such file: {path}")
    try:
        pairs = read_parallel_tsv(path, tokens=tokens)
    except OSError as err:
        raise CommandError(f"{option}: {oserror_message(err)}") from None
    except ValueError as err:
        raise CommandError(str(err)) from None
    if not pairs:
        raise CommandError(f"{option} {path}: no sentence pairs (the file is empty)")
    return pairs


def toy_task_for(spec: Any):
    from xpseq.tasks import toy_task

    if not isinstance(spec, dict) or set(spec) - set(TOY_DATA_LIMITS):
        unknown = sorted(set(spec) - set(TOY_DATA_LIMITS)) if isinstance(spec, dict) else spec
        raise CommandError(f"the checkpoint's metadata describes its toy data with unknown "
                           f"entries {unknown!r}; expected some of {sorted(TOY_DATA_LIMITS)}")
    for key, value in spec.items():
        limit = TOY_DATA_LIMITS[key]
        if not checks.is_int(value) or not 0 <= value <= limit:
            raise CommandError(f"the checkpoint's metadata says {key} = {value!r}; expected an "
                               f"int in [0, {limit}]")
    return toy_task(**spec)


def g2p_split(stress: bool, seed: int = 0):
    from xpseq.data.cmudict import load_g2p

    try:
        return load_g2p(stress=stress, seed=seed)
    except (ModuleNotFoundError, ValueError) as err:
        raise CommandError(str(err)) from None


def check_exist(paths: Any) -> None:
    """A one-line error for a checkpoint or export that does not exist, before any array
    library is imported (importing PyTorch alone takes seconds)."""
    for path in [paths] if isinstance(paths, (str, os.PathLike)) else paths or ():
        if not os.path.lexists(path):
            raise CommandError(f"checkpoint {path} does not exist")


def open_decoder(args: argparse.Namespace, path: str) -> Any:
    """The model at ``path`` as a :class:`~xpseq.search.Decoder`
    (:func:`xpseq.load_decoder`), as ``--backend``, ``--compile`` and ``--dtype`` ask: a
    checkpoint on a backend, or an ONNX export's folder on onnxruntime, by what it is
    (one-line errors for what does not apply, whose advice works in every subcommand that
    calls this: an export with a ``--backend`` is told to drop it). The deprecated
    ``--backend`` :data:`~xpseq.app.options.EXPORT_BACKEND` asks that ``path`` be an
    export."""
    from xpseq.export.decoders import is_export, load_decoder

    check_exist(path)
    dtype = getattr(args, "dtype", "float32")            # (g2p has no --dtype)
    asked = args.backend == opts.EXPORT_BACKEND
    export = is_export(path)
    if export and args.backend is not None and not asked:
        raise CommandError(f"{path} is an ONNX export, which decodes on onnxruntime alone: "
                           f"drop --backend {args.backend} (or decode its checkpoint on "
                           f"{args.backend})")
    if export or asked:
        check_export_folder(path, args)
        backend = None                                    # an export: onnxruntime
        dtype = None if dtype == "float32" else dtype     # the default: the export's own
    else:
        backend = command_backend(args.backend, args.compile, "decode")
    try:
        return load_decoder(path, backend=backend, dtype=dtype)
    except ModuleNotFoundError as err:                   # an export's engine
        if not export:
            raise
        raise CommandError(f"{path} is an ONNX export, which needs {err.name}: "
                           + install_hint("onnx")) from None
    except (FileNotFoundError, ValueError) as err:       # CheckpointError: a ValueError
        raise CommandError(str(err).removeprefix("load_decoder: ")) from None


def check_export_folder(path: str, args: argparse.Namespace) -> None:
    """A one-line error unless ``path`` is an export's folder and no option asks what an
    export fixes (``--compile``, ``--precision``)."""
    if args.compile:
        raise CommandError(f"--compile is torch's; {path} is an ONNX export, which decodes "
                           "on onnxruntime")
    if opts.precision_of(args).reduced:
        raise CommandError("--precision: an ONNX export computes in the dtype it was "
                           f"exported in; {path} takes no --precision")
    if not os.path.isdir(path):
        raise CommandError(f"--backend {args.backend} decodes an ONNX export (the folder of "
                           f"xpseq export CHECKPOINT --onnx DIR); {path} is not a folder")
    from xpseq.export.decoders import is_export

    if not is_export(path):
        raise CommandError(f"--backend {args.backend} decodes an ONNX export (the folder of "
                           f"xpseq export CHECKPOINT --onnx DIR); {path} is not an xpseq "
                           "ONNX export (it holds no model.json)")
