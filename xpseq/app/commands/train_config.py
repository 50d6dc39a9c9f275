"""``train --config FILE.toml`` and ``train --resume CHECKPOINT``: the options of a file or
of a stored run, checked as typed ones are, as ``train``'s defaults (so that the options
typed on the command line win)."""

from __future__ import annotations

import argparse
import os
from typing import Any, Mapping, Sequence

from xpseq.io import reading

from .. import options as opts
from ..errors import CommandError
from .train_options import NOT_CONFIGURABLE, NOT_STORED, RESUMABLE, add_options

__all__ = ["file_defaults", "option_values"]


def _train_parser() -> tuple[argparse.ArgumentParser, opts.Actions]:
    """A parser of ``xpseq [global options] train [train's options]`` alone, and train's
    options by dest (:func:`~xpseq.app.commands.train_options.add_options`)."""
    parser = opts.Parser(prog="xpseq")
    opts.global_options(parser, "")
    train = parser.add_subparsers(dest="command", required=True).add_parser("train")
    return parser, add_options(train, "")


def _typed_train_options(argv: Sequence[str]) -> dict[str, Any]:
    """The options of ``train`` given on the command line ``argv``, ``{dest: value}``: a
    parse by a parser whose train options have no defaults (an option left out is then
    missing from the result)."""
    parser, actions = _train_parser()
    for action in actions.values():
        action.default = argparse.SUPPRESS
    args, _ = parser.parse_known_args(list(argv))
    return {k: v for k, v in vars(args).items() if k in actions}


def _read_toml(path: str) -> dict:
    """The ``--config`` file, read through the input door (bounded in bytes, nesting and
    digits: :func:`xpseq.io.reading.read_toml`); one-line errors naming it."""
    try:
        return reading.read_toml(path, what="--config")
    except FileNotFoundError:
        raise CommandError(f"--config {path}: no such file") from None
    except reading.InputError as err:
        raise CommandError(str(err)) from None


#: Options whose value is a path: read from a ``--config`` file, a relative one is taken
#: from the file's folder.
_PATH_OPTIONS = ("train_file", "dev_file")


def _config_defaults(actions: Mapping[str, argparse.Action], path: str) -> dict:
    """The options of the ``--config`` file ``path``, checked, with its relative data
    paths resolved against the file's folder."""
    values = option_values(_read_toml(path), actions, path)
    folder = os.path.dirname(path)
    for dest in _PATH_OPTIONS:
        if dest in values and not os.path.isabs(values[dest]):
            values[dest] = os.path.join(folder, values[dest])
    return values


def _option_name(actions: Mapping[str, argparse.Action], dest: str) -> str:
    """``--train`` for ``train_file``: the option as typed."""
    action = actions.get(dest)
    return action.option_strings[0] if action is not None else "--" + dest.replace("_", "-")


def _stored_options(path: str) -> dict:
    """The options a checkpoint of ``xpseq train`` stored, for ``--resume``. A warning of
    the load (a format-1 file's) is not shown here: the run loads the file again and shows
    it as a note then, and an error here says enough alone."""
    import warnings

    from xpseq.train import checkpoint

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", checkpoint.UnprotectedMetadataWarning)
            loaded = checkpoint.load(path)
    except FileNotFoundError:
        raise CommandError(f"--resume {path}: no such checkpoint") from None
    except checkpoint.CheckpointError as err:
        raise CommandError(str(err)) from None
    stored = (loaded.metadata or {}).get("options")
    if not isinstance(stored, dict) or loaded.opt_state is None:
        raise CommandError(f"{path}: not a checkpoint of xpseq train that can be "
                           "continued (it records no options or no optimiser state)")
    return {k: v for k, v in stored.items() if k not in NOT_STORED}


def file_defaults(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any] | None:
    """``train --config FILE`` / ``--resume CHECKPOINT``: the file's or the stored run's
    options, checked as typed ones are, as train's defaults (so that the options typed on
    the command line win); ``None`` without either. ``--resume`` refuses a typed option
    that would change the run (any but
    :data:`~xpseq.app.commands.train_options.RESUMABLE`). Train's ``defaults`` hook
    (:mod:`xpseq.app.commands`)."""
    if not (args.config or args.resume):
        return None
    _, actions = _train_parser()
    if args.config and args.resume:
        raise CommandError("--config starts a run and --resume continues one; give one")
    if args.config:
        return _config_defaults(actions, args.config)
    stored = option_values(_stored_options(args.resume), actions, str(args.resume))
    # Compared by value, whatever was typed: --seed 0 on a run of seed 5 is a change,
    # --seed 5 is not.
    changed = sorted(_option_name(actions, dest) for dest, value in
                     _typed_train_options(argv).items()
                     if dest not in RESUMABLE and dest not in NOT_STORED
                     and value != stored.get(dest, actions[dest].default))
    if changed:
        may = ", ".join(_option_name(actions, n) for n in RESUMABLE if n != "resume")
        raise CommandError(f"--resume continues the stored run; it cannot change "
                           f"{', '.join(changed)} (only {may})")
    return stored


#: Names a file may give an option by, besides its own (``--train`` stores ``train_file``).
_ALIASES = {"train": "train_file", "dev": "dev_file"}


def option_values(values: Mapping[str, Any], actions: Mapping[str, argparse.Action],
                  where: str) -> dict[str, Any]:
    """``{name: value}`` from a TOML file (``--config``) or a checkpoint's stored options
    (``--resume``) as ``{dest: value}`` of the options ``actions``, each value checked and
    converted as the parser checks a typed one (its type and choices), ready for
    ``parser.set_defaults``. Names take ``-`` or ``_`` (``batch-size``, ``batch_size``);
    ``None`` values are left out. ``where`` names the source in errors.

    Raises
    ------
    ValueError
        A name that is no option (or one a file cannot set, :data:`NOT_CONFIGURABLE`), a
        flag that is not ``true`` / ``false``, a table or a list.
    argparse.ArgumentError
        A value that the option's type or choices refuse (the command's exit code 2); its
        message names ``where`` and the key.
    """
    out = {}
    for key, value in values.items():
        dest = key.replace("-", "_")
        dest = _ALIASES.get(dest, dest)
        action = actions.get(dest)
        if action is None or dest in NOT_CONFIGURABLE or not action.option_strings:
            known = sorted(a.option_strings[-1].lstrip("-") for d, a in actions.items()
                           if d not in NOT_CONFIGURABLE and a.option_strings)
            raise ValueError(f"{where}: {key!r} is not an option of train; known: "
                             f"{', '.join(known)}")
        if value is None:
            continue
        if action.nargs == 0:                                  # a flag
            if not isinstance(value, bool):
                raise ValueError(f"{where}: {key} is a flag, true or false; got {value!r}")
            out[dest] = value
            continue
        if isinstance(value, dict):
            raise ValueError(f"{where}: [{key}] is a table; options are top-level keys "
                             f"(e.g. epochs = 10), not tables")
        if isinstance(value, list):
            raise ValueError(f"{where}: {key} must be a number or a string, got {value!r}")
        try:
            out[dest] = _checked(action, str(value))
        except argparse.ArgumentError as err:
            raise argparse.ArgumentError(None, f"{where}: {key} = {value!r}: "
                                         f"{err.message}") from None
    return out


def _checked(action: argparse.Action, text: str) -> Any:
    """``text`` converted by ``action``'s type and checked against its choices, or the
    ``argparse.ArgumentError`` the parser would raise for it typed."""
    try:
        value = action.type(text) if callable(action.type) else text
    except argparse.ArgumentTypeError as err:
        raise argparse.ArgumentError(action, str(err)) from None
    except (TypeError, ValueError):
        raise argparse.ArgumentError(action, f"invalid value: {text!r}") from None
    if action.choices is not None and value not in action.choices:
        choices = ", ".join(repr(c) for c in action.choices)
        raise argparse.ArgumentError(action, f"invalid choice: {value!r} (choose from "
                                     f"{choices})")
    return value
