"""Decoding an ONNX export (:func:`xpseq.export.onnx`) with onnxruntime.

:class:`OnnxModel`, a :class:`~xpseq.search.Decoder`, runs ``encoder.onnx`` once per batch
and ``step.onnx`` once per output position, inside the same greedy and beam search loops as
:func:`xpseq.search.search` (:func:`xpseq.search.run`, on NumPy arrays): the same ids as the
model decoded by xpseq itself, with no array library other than NumPy and onnxruntime at
run time.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
from typing import Any, cast

import numpy as np

from xpseq import models
from xpseq.core.decoding import Hypotheses
from xpseq.core.precision import Policy
from xpseq.data import Vocab
from xpseq.data import tokens as tok
from xpseq.io import reading
from xpseq.search import SearchOptions, run

from . import FILES, FORMAT, digest

#: The largest ``model.json`` read (its vocabularies are most of it).
META_BYTES = 64 << 20

__all__ = ["OnnxModel"]


class OnnxModel:
    """An export folder's graphs in onnxruntime sessions: a :class:`~xpseq.search.Decoder`
    (``src_vocab``, ``tgt_vocab``, ``config``, ``metadata``, ``name``, ``batch_sizes``,
    ``precision``, ``search``); its ``encode`` and ``step`` run the two graphs; ``tokens``
    says how the model splits its input text and joins its output (``(source, target)``,
    :func:`xpseq.data.tokens.split` / :func:`~xpseq.data.tokens.join`).

    Parameters
    ----------
    folder : path
        What :func:`xpseq.export.onnx` wrote.
    threads : int, optional
        onnxruntime's intra-op threads (``None``: its default).
    """

    name = "onnxruntime"
    #: Any batch size: onnxruntime compiles nothing per shape.
    batch_sizes: tuple[int, ...] | None = None
    #: It decodes in the dtype it was exported in.
    precision = Policy(None)

    def __init__(self, folder: str | os.PathLike, *, threads: int | None = None) -> None:
        import onnxruntime

        self.folder = pathlib.Path(folder)
        missing = [f for f in FILES if not (self.folder / f).is_file()]
        if missing:
            raise ValueError(f"OnnxModel: {self.folder} is not an xpseq ONNX export (no "
                             f"{', '.join(missing)})")
        for name in FILES[:2]:               # sizes first: a protobuf has at most 2 GiB
            reading.check_size(self.folder / name, limit=reading.ONNX_BYTES,
                               what="OnnxModel:")
        self.meta = _read_meta(self.folder / "model.json")
        graphs = {name: reading.read_bytes(self.folder / name, limit=reading.ONNX_BYTES,
                                           what="OnnxModel:") for name in FILES[:2]}
        if digest(graphs["encoder.onnx"], graphs["step.onnx"], self.meta) != \
                self.meta["digest"]:
            raise ValueError(f"OnnxModel: the files of {self.folder} do not match the digest "
                             "its model.json stores: a graph or model.json was changed or "
                             "replaced since the export wrote them; export the checkpoint "
                             "again")
        opts = onnxruntime.SessionOptions()
        if threads is not None:
            opts.intra_op_num_threads = threads
            opts.inter_op_num_threads = 1
        self._encoder = onnxruntime.InferenceSession(
            graphs["encoder.onnx"], opts, providers=["CPUExecutionProvider"])
        self._step = onnxruntime.InferenceSession(
            graphs["step.onnx"], opts, providers=["CPUExecutionProvider"])
        self._enc_names = [o.name for o in self._encoder.get_outputs()]
        self._step_inputs = [i.name for i in self._step.get_inputs()]
        self._step_outputs = [o.name for o in self._step.get_outputs()]
        self.attends = "attention" in self._step_outputs
        #: The model's configuration, as the checkpoint held it.
        self.config = models.get(self.meta["kind"]).Config.from_dict(self.meta["config"])
        self.src_vocab = Vocab.from_list(self.meta["vocabs"]["src"])
        self.tgt_vocab = Vocab.from_list(self.meta["vocabs"]["tgt"])
        [log_probs] = [o for o in self._step.get_outputs() if o.name == "log_probs"]
        if log_probs.shape[-1] != len(self.tgt_vocab):
            raise ValueError(f"OnnxModel: {self.folder}'s step graph gives "
                             f"{log_probs.shape[-1]} log-probabilities a step but its "
                             f"target vocabulary has {len(self.tgt_vocab)} words")
        #: What the checkpoint said it was trained for (task; a G2P model's stress).
        self.metadata: dict[str, Any] = dict(self.meta.get("metadata") or {})
        if self.meta.get("tokenizers") and "tokens" in self.metadata:
            # a subword side's tokenizer, which model.json holds once, beside ``tokens``:
            # every door reads it from the metadata (xpseq.data.tokens.of_model)
            self.metadata["tokenizers"] = self.meta["tokenizers"]
        stored = self.meta.get("tokens")      # (exports before it: the metadata says)
        #: How the model splits its input text and joins its output, ``(source, target)``
        #: modes of :mod:`xpseq.data.tokens`.
        self.tokens: tuple[str, str] = (
            tok.sides(tok.stored_modes(stored, f"OnnxModel: {self.folder}"),
                      self.meta.get("tokenizers"), f"OnnxModel: {self.folder}")
            if isinstance(stored, dict) else tok.of_model(self.metadata))

    def __repr__(self) -> str:
        return f"<OnnxModel of a {self.meta.get('kind')} model in {self.folder}>"

    @property
    def vocabs(self) -> dict[str, list[str]]:
        return dict(self.meta["vocabs"])

    def encode(self, src: np.ndarray, src_len: np.ndarray) -> tuple[dict[str, np.ndarray],
                                                                   dict[str, np.ndarray]]:
        """The encoder graph: ``({"enc.<name>": array}, {"state.<name>": array})``."""
        outs = self._encoder.run(None, {"src": np.asarray(src, dtype=np.int64),
                                        "src_len": np.asarray(src_len, dtype=np.int64)})
        named = dict(zip(self._enc_names, outs))
        return ({n: a for n, a in named.items() if n.startswith("enc.")},
                {n: a for n, a in named.items() if n.startswith("state.")})

    def step(self, encoded: dict[str, np.ndarray], state: dict[str, np.ndarray],
             y_prev: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray], Any]:
        """The step graph: ``(log_probs (B, V), next state, attention (B, S) or None)``."""
        feeds = {**encoded, **state, "y_prev": np.asarray(y_prev, dtype=np.int64)}
        outs = dict(zip(self._step_outputs,
                        self._step.run(None, {n: feeds[n] for n in self._step_inputs})))
        new = {"state" + n[len("next"):]: a for n, a in outs.items() if n.startswith("next.")}
        return outs["log_probs"], new, outs.get("attention")

    def search(self, src: np.ndarray, src_len: np.ndarray,
               options: SearchOptions = SearchOptions()) -> Hypotheses:
        """Greedy or beam search of a padded batch, as :func:`xpseq.search.search` returns
        it (NumPy arrays; ``options.attention`` needs an export that attends)."""
        import array_api_compat.numpy as xp

        src, src_len = np.asarray(src, dtype=np.int64), np.asarray(src_len, dtype=np.int64)
        if src.ndim != 2 or src_len.shape != (src.shape[0],):
            raise ValueError(f"OnnxModel.search: src must be (batch, src_len) and src_len "
                             f"(batch,), got {src.shape} and {src_len.shape}")
        if options.policy.reduced:
            raise ValueError("OnnxModel.search: precision is fixed by the export "
                             f"({self.meta['dtype']}); pass precision=None")
        want_attention = options.attention and self.attends
        max_len = math.ceil(options.max_len_a * src.shape[1] + options.max_len_b)
        encoded = self.encode(src, src_len)

        def decoder(pair: Any) -> tuple[Any, Any]:
            enc, state = pair

            def step(state: Any, y: Any) -> tuple[Any, Any, Any]:
                logp, new, weights = self.step(enc, state, y)
                return logp, new, weights if want_attention else None

            return step, state

        return run(decoder, encoded, src_len, options=options, max_len=max_len, xp=xp)


def _read_meta(path: pathlib.Path) -> dict[str, Any]:
    """``model.json`` read and checked, or a ValueError naming it and the problem."""
    try:
        meta = json.loads(reading.read_bytes(path, limit=META_BYTES,
                                             what="OnnxModel:").decode("utf-8"))
    except reading.InputError:
        raise
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"OnnxModel: {path} is not JSON: {e}") from None
    except RecursionError:
        raise ValueError(f"OnnxModel: {path} is not an xpseq export's model.json (its JSON "
                         "nests too deep)") from None
    if not isinstance(meta, dict) or meta.get("format") not in range(1, FORMAT + 1):
        raise ValueError(f"OnnxModel: {path} is not the model.json of an xpseq export")
    if meta["format"] == FORMAT and not isinstance(meta.get("digest"), str):
        raise ValueError(f"OnnxModel: {path} has no digest: the file was edited since the "
                         "export wrote it; export the checkpoint again")
    if meta["format"] != FORMAT:
        raise ValueError(f"OnnxModel: {path} is of format {meta['format']}, written by an "
                         f"older xpseq without a digest over its files; export the "
                         f"checkpoint again (format {FORMAT})")
    vocabs: dict[str, Any] = meta.get("vocabs") or {}
    expected = {"kind": str, "config": dict, "dtype": str, "vocabs": dict, "search": dict,
                "special_ids": dict, "graphs": dict}
    wrong = [k for k, t in expected.items() if not isinstance(meta.get(k), t)]
    if not wrong and not all(isinstance(vocabs.get(side), list) and vocabs[side] and all(
            isinstance(w, str) for w in vocabs[side]) for side in ("src", "tgt")):
        wrong = ["vocabs"]
    if wrong:
        raise ValueError(f"OnnxModel: {path}: {', '.join(wrong)} missing or not what an xpseq "
                         "export writes")
    return cast(dict[str, Any], meta)
