"""A trained model as ONNX graphs, traced from the same array-API code it trains with.

:func:`onnx` writes three files into a folder:

``encoder.onnx``
    ``(src (batch, src_len) int64, src_len (batch,) int64)`` to the encoded source
    (``enc.<name>``, the model's ``encode``) and the decoder's first state
    (``state.<name>``).
``step.onnx``
    ``(enc.<name>..., state.<name>..., y_prev (batch,) int64)`` to ``log_probs (batch,
    tgt_vocab)``, the next state (``next.<name>``) and, when the model attends,
    ``attention (batch, src_len)``: one step of the model's ``decoder``, its state
    explicit. An RNN's state is its hidden (and cell) state and, with input feeding, the
    last attentional vector; a Transformer's is its key/value cache: ``state.t (batch,)``,
    the position of the step, and per decoder layer ``i`` the self-attention keys and
    values of the steps decoded so far, ``state.k<i>``, ``state.v<i>`` ``(batch, heads,
    steps, d_model / heads)``, which each step returns one step longer (the source's
    cross-attention keys and values are computed once, by the encoder graph: ``enc.k<i>``,
    ``enc.v<i>``).
``model.json``
    The model kind and configuration, the vocabularies, what the checkpoint was trained
    for (``metadata``: ``task``, ``stress`` for a G2P model, a toy task's ``data``), the
    search options of the command (``max_len = ceil(a · src_len + b)``), the dtype, how
    the model splits its input text and joins its output (``tokens``: ``{"src": "word" |
    "char" | "char-nospace", "tgt": ...}``, :mod:`xpseq.data.tokens`: words at whitespace,
    joined with spaces; or the characters with ``"▁"`` for a space, joined with nothing;
    ``"char-nospace"``, an older checkpoint's characters without spaces; ``"bpe"`` or
    ``"unigram"``, subword pieces, whose trained tokenizer's JSON text is
    ``tokenizers``: ``{"src": text or None, "tgt": ...}``), and the graphs' inputs and
    outputs with their shapes.

The graphs are recorded by running the model's own kernels on ``ndonnx`` arrays
(:mod:`xpseq.backends._onnx`): the parameters are constants, the inputs
``ndonnx.argument`` arrays whose batch and lengths are symbolic, and an RNN encoder's
loop over the source an ONNX ``Loop``. :mod:`xpseq.export.runtime` decodes with them over
onnxruntime (greedy and beam search, the same loops as :func:`xpseq.search.search`), and
:func:`xpseq.export.decoders.load_decoder` (``xpseq.load_decoder``) opens either a
checkpoint on a backend or an export on onnxruntime as one
:class:`~xpseq.search.Decoder`.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any, Mapping

import numpy as np

from xpseq import backends, models
from xpseq.data import tokens as tok
from xpseq.data.batching import BOS_ID, EOS_ID, PAD_ID
from xpseq.io import files

__all__ = ["onnx", "trace", "names_of", "rebuild", "without_empty_checks", "graph_shapes",
           "digest", "FORMAT", "DTYPES", "kinds"]

#: The version of the folder's layout, written into ``model.json``. Format 2 added the
#: digest (:func:`digest`); an export of format 1 (without it) is refused: export again.
FORMAT = 2
#: The dtypes an export computes in.
DTYPES = ("float32", "float64")
FILES = ("encoder.onnx", "step.onnx", "model.json")


def digest(encoder: bytes, step: bytes, meta: Mapping[str, Any]) -> str:
    """The SHA-256 that ``model.json`` stores as ``digest``: over the two graphs' bytes and
    ``meta`` itself (its ``digest`` entry aside, as canonical JSON), each part preceded by
    its length. :class:`~xpseq.export.runtime.OnnxModel` refuses a folder whose files no
    longer give it: an edited vocabulary, a graph copied from another export."""
    import hashlib

    text = json.dumps({k: v for k, v in meta.items() if k != "digest"}, sort_keys=True,
                      ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    h = hashlib.sha256()
    for part in (encoder, step, text):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def kinds() -> list[str]:
    """The model kinds that export: those that declare their decoder's shapes
    (``kernels.decoder_spec``, see :mod:`xpseq.models.protocol`)."""
    return [k for k in models.available() if models.get(k).kernels.decoder_spec is not None]


def names_of(tree: Any, prefix: str) -> dict[str, Any]:
    """The leaves of a nested dict/tuple of arrays by dotted name: ``{"enc.memory": ...,
    "state.h": ...}`` (tuples by index)."""
    out: dict[str, Any] = {}
    if isinstance(tree, Mapping):
        for key, value in tree.items():
            out.update(names_of(value, f"{prefix}.{key}"))
    elif isinstance(tree, (tuple, list)):
        for i, value in enumerate(tree):
            out.update(names_of(value, f"{prefix}.{i}"))
    elif tree is not None:
        out[prefix] = tree
    return out


def rebuild(flat: Mapping[str, Any], template: Any, prefix: str) -> Any:
    """The inverse of :func:`names_of`: ``template``'s structure with ``flat``'s leaves."""
    if isinstance(template, Mapping):
        return {k: rebuild(flat, v, f"{prefix}.{k}") for k, v in template.items()}
    if isinstance(template, (tuple, list)):
        return type(template)(rebuild(flat, v, f"{prefix}.{i}") for i, v in enumerate(template))
    return None if template is None else flat[prefix]


def graph_shapes(config: Any) -> dict[str, dict[str, list[Any]]]:
    """The shapes of the graphs' inputs and outputs, from what the model kind declares of
    its encoded source and decoder state (``kernels.decoder_spec``): ``"encoded"``
    (``enc.<name>``), ``"state"`` (``state.<name>``, a step's input, ``steps`` symbolic)
    and ``"first"`` (the encoder graph's first state: no step decoded, ``steps`` 0).

    Raises
    ------
    ValueError
        The model kind declares no shapes (it does not export).
    """
    model = models.of(config)
    if model.kernels.decoder_spec is None:
        raise ValueError(f"export: a {model.kind!r} model cannot be exported yet; the kinds "
                         f"that can: {kinds()}")
    spec = model.kernels.decoder_spec(config)
    state = {f"state.{k}": list(v) for k, v in spec["state"].items()}
    return {"encoded": {f"enc.{k}": list(v) for k, v in spec["encoded"].items()},
            "state": state,
            "first": {k: [0 if d == "steps" else d for d in v] for k, v in state.items()}}


def _check_declared(what: str, computed: Mapping[str, Any], declared: Mapping[str, list[Any]],
                    kind: str, sizes: Mapping[str, int] | None = None) -> None:
    """The arrays are those the model kind declares, of the declared ranks, and every
    size known equals the declared one (a symbolic one too, given its value in
    ``sizes``)."""
    if sorted(computed) != sorted(declared):
        raise ValueError(f"export: the {kind} model declares {what} {sorted(declared)} but "
                         f"computes {sorted(computed)}")
    for name, array in computed.items():
        dims = [d if sizes is None else sizes.get(d, d) for d in declared[name]]
        fits = len(array.shape) == len(dims) and all(
            n is None or isinstance(d, str) or n == d for n, d in zip(array.shape, dims))
        if not fits:
            raise ValueError(f"export: the {kind} model declares {name} of shape "
                             f"{declared[name]}, but computes {tuple(array.shape)}")


def _verify(model: Any, params: Mapping[str, np.ndarray], config: Any, attention: bool,
            shapes: Mapping[str, dict[str, list[Any]]]) -> None:
    """The declared shapes hold on NumPy: a batch of 2 sources of 3 tokens, one step."""
    np_be = backends.get("numpy")
    src, src_len = np.full((2, 3), 3, dtype=np.int64), np.array([3, 2], dtype=np.int64)
    encoded = model.kernels.encode(params, config, src, src_len, scan=np_be.scan, xp=np_be.xp)
    step, state = model.kernels.decoder(params, config, encoded, attention=attention,
                                        max_len=None, xp=np_be.xp)
    _, state, _ = step(state, np.full((2,), 3, dtype=np.int64))
    sizes = {"batch": 2, "src_len": 3, "steps": 1}
    _check_declared("the encoded source", names_of(encoded, "enc"), shapes["encoded"],
                    model.kind, sizes)
    _check_declared("the decoder state", names_of(state, "state"), shapes["state"],
                    model.kind, sizes)


def trace(params: Mapping[str, np.ndarray], config: Any, *, dtype: str = "float32",
          attention: bool = True) -> tuple[Any, Any, dict[str, Any]]:
    """The encoder and decoder-step graphs of a model (``onnx.ModelProto`` each) and what
    :func:`onnx` writes of them into ``model.json`` (``"inputs"`` and ``"outputs"`` of each
    graph, with shapes). ``params`` are NumPy arrays; ``dtype`` is what the graphs
    compute in (:data:`DTYPES`). Parameters stored in float16 stay float16 in the graphs,
    each cast to ``dtype`` where it is read (onnxruntime folds the casts once, when it
    loads the graph): half the size, and the same values as the parameters cast on
    load."""
    if dtype not in DTYPES:
        raise ValueError(f"export: dtype must be one of {list(DTYPES)}, got {dtype!r}")
    model = models.of(config)
    shapes = graph_shapes(config)
    enc_shapes, state_shapes = shapes["encoded"], shapes["state"]
    onnx_be = backends.get("onnx")
    cast = {k: np.asarray(v).astype(dtype) for k, v in params.items()}
    _verify(model, cast, config, attention, shapes)

    stored = {k: np.asarray(v) if np.asarray(v).dtype == np.float16 else cast[k]
              for k, v in params.items()}
    encoder, step_graph, step_out = _record(model, stored, dtype, config, attention, onnx_be,
                                            enc_shapes, state_shapes)
    spec = {
        "encoder": {"inputs": {"src": ["batch", "src_len"], "src_len": ["batch"]},
                    "outputs": {**enc_shapes, **shapes["first"]}},
        "step": {"inputs": {**enc_shapes, **state_shapes, "y_prev": ["batch"]},
                 "outputs": sorted(step_out)},
    }
    return encoder, step_graph, spec


def _record(model: Any, stored: Mapping[str, np.ndarray], dtype: str, config: Any,
            attention: bool, onnx_be: Any, enc_shapes: dict[str, list[Any]],
            state_shapes: dict[str, list[Any]]) -> tuple[Any, Any, dict[str, Any]]:
    import ndonnx

    kernels = model.kernels

    # The encoder graph.
    compute = getattr(ndonnx, dtype)
    p = {k: ndonnx.asarray(v) if v.dtype == dtype else ndonnx.asarray(v).astype(compute)
         for k, v in stored.items()}
    src_arg = ndonnx.argument(shape=("batch", "src_len"), dtype=ndonnx.int64)
    len_arg = ndonnx.argument(shape=("batch",), dtype=ndonnx.int64)
    encoded = kernels.encode(p, config, src_arg, len_arg, scan=onnx_be.scan, xp=onnx_be.xp)
    _, state0 = kernels.decoder(p, config, encoded, attention=attention, max_len=None,
                                xp=onnx_be.xp)
    _check_declared("the encoded source", names_of(encoded, "enc"), enc_shapes, model.kind)
    _check_declared("the decoder state", names_of(state0, "state"), state_shapes, model.kind)
    enc_out = {**names_of(encoded, "enc"), **names_of(state0, "state")}
    encoder = ndonnx.build({"src": src_arg, "src_len": len_arg}, enc_out)

    # The step graph: the encoded source and the state as inputs.
    def argument(name: str, like: Any, shapes: dict[str, list[Any]]) -> Any:
        return ndonnx.argument(shape=tuple(shapes[name]), dtype=like.dtype)

    enc_args = {n: argument(n, a, enc_shapes) for n, a in names_of(encoded, "enc").items()}
    state_args = {n: argument(n, a, state_shapes) for n, a in names_of(state0, "state").items()}
    y_arg = ndonnx.argument(shape=("batch",), dtype=ndonnx.int64)
    step, _ = kernels.decoder(p, config, rebuild(enc_args, encoded, "enc"),
                              attention=attention, max_len=None, xp=onnx_be.xp)
    log_probs, new_state, weights = step(rebuild(state_args, state0, "state"), y_arg)
    step_out = {"log_probs": log_probs,
                **{"next" + n[len("state"):]: a for n, a in names_of(new_state, "state").items()}}
    if weights is not None:
        step_out["attention"] = weights
    step_graph = ndonnx.build({**enc_args, **state_args, "y_prev": y_arg}, step_out)
    for proto in (encoder, step_graph):
        without_empty_checks(proto.graph)
    return encoder, step_graph, step_out


def without_empty_checks(graph: Any) -> int:
    """Replace, in an ONNX ``graph`` and the graphs inside it (a ``Loop``'s body), each
    ``If`` that ndonnx wraps around a matrix product, to handle an empty operand, by the
    product itself, and drop the nodes that then compute nothing used. The models never
    multiply empty matrices (a search of no sentences never runs a step); the graph runs
    faster without a branch per product (1.3× for a toy model's step). Returns the
    number of products unwrapped."""
    from onnx import AttributeProto, helper

    count = 0
    nodes = []
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == AttributeProto.GRAPH and node.op_type != "If":
                count += without_empty_checks(attr.g)
        branches = {a.name: a.g for a in node.attribute if a.type == AttributeProto.GRAPH}
        inner = branches.get("else_branch")
        if (node.op_type == "If" and inner is not None and len(node.output) == 1
                and [n.op_type for n in inner.node] == ["MatMul", "Identity"]):
            nodes.append(helper.make_node("MatMul", list(inner.node[0].input),
                                          list(node.output), name=f"{node.name}_matmul"))
            count += 1
        else:
            nodes.append(node)
    needed = {o.name for o in graph.output}
    kept = []
    for node in reversed(nodes):
        if any(o in needed for o in node.output):
            kept.append(node)
            needed.update(_names_read(node))
    del graph.node[:]
    graph.node.extend(reversed(kept))
    return count


def _names_read(node: Any) -> set[str]:
    """The names a node reads, those its subgraphs read from outside them included."""
    from onnx import AttributeProto

    names = set(node.input)
    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH:
            for inner in attr.g.node:
                names |= _names_read(inner)
    return names


def onnx(checkpoint: str | os.PathLike, folder: str | os.PathLike, *,
         dtype: str | None = None) -> pathlib.Path:
    """Export a checkpoint (a translator or G2P model saved by xpseq) as ONNX graphs into
    ``folder`` (created; files already there are never overwritten): ``encoder.onnx``,
    ``step.onnx`` and ``model.json`` (see this module). ``dtype`` is what the graphs
    compute in, ``"float32"`` or ``"float64"``; ``None``: the stored dtype, float32 for
    one narrower than float32 (float16, bfloat16). Parameters stored in float16 (the
    shipped G2P model's) stay float16 in the graphs, cast where they are read: half the
    size, and the values the checkpoint decodes with. Returns the folder.

    The files are written through :func:`xpseq.io.files.write_set`: into a temporary
    folder inside ``folder`` (its own file system, even for a mount point or a symbolic
    link to another one), then moved in, ``model.json`` last; an export that fails (a full
    disk, an interrupt) leaves no file of its own in ``folder``, and one killed half-way
    is rolled back by the next export into that folder.

    Raises
    ------
    FileNotFoundError
        ``checkpoint`` does not exist.
    xpseq.train.checkpoint.CheckpointError
        ``checkpoint`` is not an xpseq checkpoint.
    ValueError
        It holds no vocabularies or metadata ``tokens`` that name no mode, ``dtype`` is not
        one of :data:`DTYPES`, ``folder`` is not a folder, or already holds one of the
        files (all checked before the tracing).
    """
    from xpseq.search import SearchOptions
    from xpseq.train import checkpoint as ckpt

    if isinstance(folder, (str, os.PathLike)) and os.fspath(folder) == "":
        raise files.OutputRefused("export: folder is empty; give a folder name")
    out = pathlib.Path(folder)
    if out.exists() and not out.is_dir():
        raise ValueError(f"export: {out} is not a folder (the export writes three files into "
                         "a folder)")
    if out.is_dir():
        files.clean_stale(out)              # an export killed half-way: rolled back
    existing = [f for f in FILES if (out / f).exists() or (out / f).is_symlink()]
    if existing:
        raise ValueError(f"export: {out} already holds {', '.join(existing)}; choose an "
                         "empty folder (nothing is overwritten)")
    if not os.path.exists(checkpoint):
        raise FileNotFoundError(f"export: no checkpoint {os.fspath(checkpoint)} (no such "
                                "file)")
    loaded = ckpt.load(checkpoint)
    if not loaded.vocabs:
        raise ValueError(f"export: {checkpoint} holds no vocabularies; an export needs them")
    stored = str(next(iter(loaded.params.values())).dtype)
    if dtype is None:
        dtype = "float64" if stored == "float64" else "float32"
    src_mode, tgt_mode = tok.of_model(loaded.metadata)     # (a bad entry: refused first)
    encoder, step, spec = trace(loaded.params, loaded.config, dtype=dtype)
    options = SearchOptions()
    meta = {
        "format": FORMAT,
        "kind": loaded.model.kind,
        "config": loaded.config.to_dict(),
        "dtype": dtype,
        "stored_dtype": stored,
        "weights_dtype": "float16" if stored == "float16" else dtype,    # in the graphs
        "vocabs": loaded.vocabs,
        # What the checkpoint says it was trained for (a G2P model: task and stress).
        "metadata": {k: v for k, v in (loaded.metadata or {}).items()
                     if k in ("task", "stress", "tokens", "data")},
        "search": {"max_len_a": options.max_len_a, "max_len_b": options.max_len_b,
                   "length_penalty": options.length_penalty, "alpha": options.alpha},
        "special_ids": {"pad": PAD_ID, "bos": BOS_ID, "eos": EOS_ID},
        # how a deployment splits its input text and joins the output (xpseq.data.tokens)
        "tokens": {"src": src_mode, "tgt": tgt_mode},
        # a subword side's trained tokenizer, its JSON text (None for word and char)
        "tokenizers": {"src": getattr(src_mode, "tokenizer", None),
                       "tgt": getattr(tgt_mode, "tokenizer", None)},
        "graphs": spec,
        "source": os.fspath(checkpoint),
    }
    graphs = {"encoder.onnx": encoder.SerializeToString(),
              "step.onnx": step.SerializeToString()}
    meta["digest"] = digest(graphs["encoder.onnx"], graphs["step.onnx"], meta)
    # all three files or none (xpseq.io.files.write_set), model.json last
    files.write_set(out, {**graphs, "model.json": (json.dumps(meta, indent=1,
                                                              ensure_ascii=False)
                                                   + "\n").encode("utf-8")},
                    kind={"encoder.onnx": "onnx", "step.onnx": "onnx", "model.json": "json"},
                    inputs=[checkpoint])
    return out
