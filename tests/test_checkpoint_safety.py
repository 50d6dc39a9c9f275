"""Checkpoints under hostile and unlucky conditions.

Metadata under a digest (a format-1 file loads with one warning; a format-2 file whose
metadata was rewritten as format 1 is refused), the header checked before any array is
read (a large stray tensor costs nothing to refuse), each array read once, a file's mode
and a symbolic link kept by ``save``, a full disk reported with what was kept, and a
metrics log that never lists an epoch no checkpoint holds.
"""

from __future__ import annotations

import csv
import errno
import hashlib
import json
import os
import pathlib
import shutil
import stat
import subprocess
import sys
import tracemalloc
import warnings
from unittest import mock

import numpy as np
import pytest
from helpers import rewrite_metadata
from safetensors.numpy import save_file

from xpseq import backends
from xpseq.core.optim import adam
from xpseq.models.rnn import Seq2SeqConfig, init_params
from xpseq.tasks import g2p_recipe
from xpseq.tasks.experiment import model_config, task_from_pairs, train_model
from xpseq.train import TrainConfig, callbacks
from xpseq.train import checkpoint as ckpt

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
FORMAT1 = FIXTURES / "rnn_format1.safetensors"
TRANSFORMER = FIXTURES / "transformer_format2.safetensors"
CONFIG = Seq2SeqConfig(src_vocab=9, tgt_vocab=11, embed=3, hidden=2, attention="additive")


def old_digest(tensors: dict, covered: str | None) -> str:
    """The digest as checkpoints have always computed it (``tobytes`` of each tensor in
    name order), written out independently of the module."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        a = np.asarray(tensors[name], order="C")
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    if covered is not None:
        h.update(b"xpseq-metadata|" + covered.encode("utf-8"))
    return h.hexdigest()


def write_raw(path: pathlib.Path, tensors: dict, meta: dict) -> pathlib.Path:
    """A checkpoint file made by hand, with a valid digest (of the metadata too for
    format 2): what a deliberate editor writes."""
    text = json.dumps(meta)
    covered = text if meta["format"] == 2 else None
    save_file(tensors, str(path), metadata={"xpseq": text,
                                            "sha256": old_digest(tensors, covered)})
    return path


def good_parts(**config_fields) -> tuple[dict, dict]:
    """The tensors (with an Adam state) and the format-2 metadata of a valid checkpoint,
    without the format array that ``save`` adds."""
    config = Seq2SeqConfig(**{**CONFIG.to_dict(), **config_fields})
    params = init_params(config, seed=1)
    tensors = {f"params/{k}": v for k, v in params.items()}
    tensors.update({f"opt/m/{k}": v * 0.5 for k, v in params.items()})
    tensors.update({f"opt/v/{k}": v * v for k, v in params.items()})
    tensors["opt/step"] = np.asarray(3.0)
    tensors["opt/scale"] = np.asarray(1.0)
    meta = {"format": 2, "model": "rnn", "config": config.to_dict(), "vocabs": None,
            "optimizer": {"name": "adam", "hyperparams": {"lr": 0.01}},
            "train_state": {"epoch": 1, "step": 3}, "metadata": None}
    return tensors, meta


def saved(tmp_path: pathlib.Path, name: str = "model.safetensors") -> pathlib.Path:
    params = init_params(CONFIG, seed=3)
    opt = adam(0.01)
    return ckpt.save(tmp_path / name, config=CONFIG, params=params,
                     opt_state=opt.init(params), optimizer=opt,
                     train_state={"epoch": 2, "step": 7})


def no_warnings(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn(*args, **kwargs)


# ------------------------------------------------------------------- format 1 and 2


def test_a_format1_file_loads_with_one_warning_and_saves_again_as_format2(tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = ckpt.load(FORMAT1)
    assert [w.category for w in caught] == [ckpt.UnprotectedMetadataWarning]
    assert issubclass(ckpt.UnprotectedMetadataWarning, UserWarning)
    assert "UnprotectedMetadataWarning" in ckpt.__all__
    text = str(caught[0].message)
    assert str(FORMAT1) in text and "format-1" in text
    assert "not covered by its digest" in text and "saving it again writes format 2" in text
    fields = {k: getattr(loaded, k) for k in ("config", "params", "opt_state", "vocabs",
                                              "train_state", "metadata")}
    again = no_warnings(ckpt.load, ckpt.save(tmp_path / "again.safetensors", **fields))
    header = json.loads(again.path.read_bytes()[8:8 + int.from_bytes(
        again.path.read_bytes()[:8], "little")])
    assert json.loads(header["__metadata__"]["xpseq"])["format"] == 2
    for name, value in loaded.params.items():
        assert np.array_equal(again.params[name], value), name


def test_the_command_shows_the_format1_warning_as_one_line():
    sources = json.loads((FIXTURES / "rnn_format1.json").read_text())["sources"][:1]
    done = subprocess.run([sys.executable, "-m", "xpseq", "translate", str(FORMAT1),
                           "--backend", "numpy", *sources[0].split()],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, XPSEQ_DEBUG=""))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"xpseq: note: {FORMAT1} is a format-1 checkpoint"), line
    assert "Traceback" not in done.stderr


def _downgrade(meta: dict) -> None:
    meta["format"] = 1
    del meta["model"]


def test_a_format2_file_rewritten_as_format1_is_refused(tmp_path):
    path = saved(tmp_path)                  # today's format 2, with its format array
    rewrite_metadata(path, _downgrade)      # and the digest made again over the arrays
    with pytest.raises(ckpt.CheckpointError, match=r"the metadata says format 1, but the "
                       r"file was written as format 2 \(it holds xpseq/format"):
        ckpt.load(path)


def test_a_format2_file_without_the_format_array_rewritten_as_format1_is_refused(tmp_path):
    # Written before format 2 files carried the array: what only format 2 writes gives
    # them away, the plateau factor or another kind's parameters.
    tensors, meta = good_parts()
    _downgrade(meta)
    path = write_raw(tmp_path / "scale.safetensors", tensors, meta)
    with pytest.raises(ckpt.CheckpointError, match=r"written as format 2 \(it holds "
                                                   r"opt/scale, the plateau factor"):
        ckpt.load(path)
    transformer = tmp_path / "transformer.safetensors"
    shutil.copy(TRANSFORMER, transformer)
    rewrite_metadata(transformer, _downgrade)
    with pytest.raises(ckpt.CheckpointError, match=r"written as format 2 \(its parameters "
                                                   r"are a transformer model's"):
        ckpt.load(transformer)


def test_format2_files_without_the_format_array_still_load(tmp_path):
    transformer = no_warnings(ckpt.load, TRANSFORMER)
    assert transformer.model.kind == "transformer" and transformer.opt_state
    tensors, meta = good_parts()
    old = no_warnings(ckpt.load, write_raw(tmp_path / "old.safetensors", tensors, meta))
    assert float(old.opt_state["step"]) == 3.0
    # Files written now carry the array, covered by the digest, and it stays out of the
    # parameters and the optimiser state.
    path = saved(tmp_path)
    from safetensors import safe_open

    with safe_open(str(path), framework="np") as f:
        marker = f.get_tensor("xpseq/format")
    assert marker.dtype == np.uint8 and marker.shape == () and int(marker) == 2
    loaded = no_warnings(ckpt.load, path)
    assert not any("format" in k for k in loaded.params)
    assert set(loaded.opt_state) == {"step", "m", "v", "scale"}


# ------------------------------------------------------------- the header comes first


class Reads:
    """Wraps safetensors' ``safe_open`` and records every ``get_tensor`` call."""

    def __init__(self):
        import safetensors

        self.names: list[str] = []
        self.real = safetensors.safe_open

    def __call__(self, *args, **kwargs):
        reads, handle = self, self.real(*args, **kwargs)

        class Handle:
            def __enter__(self):
                self.f = handle.__enter__()
                return self

            def __exit__(self, *exc):
                return handle.__exit__(*exc)

            def __getattr__(self, name):
                return getattr(self.f, name)

            def get_tensor(self, name):
                reads.names.append(name)
                return self.f.get_tensor(name)

        return Handle()


def test_a_large_stray_tensor_is_refused_without_being_read(tmp_path):
    tensors, meta = good_parts()
    tensors["junk"] = np.ones(50 * 2**20 // 8)                    # 50 MB
    path = write_raw(tmp_path / "junk.safetensors", tensors, meta)
    reads = Reads()
    with mock.patch("safetensors.safe_open", reads), pytest.raises(
            ckpt.CheckpointError, match=r"unexpected tensor 'junk' \(dtype F64, shape "
                                        r"\(6553600,\)\)"):
        ckpt.load(path)
    assert reads.names == []                          # no array read at all


@pytest.mark.parametrize("name, value, message", [
    ("opt/junk", np.zeros(1000), r"optimiser state opt/junk has shape \(1000,\); an entry "
                                 r"that is not per parameter .* holds one number"),
    ("opt/m/nope", np.zeros(3), r"optimiser state 'm' does not cover the same parameters: "
                                r"missing \[\], unknown \['nope'\]"),
    ("stray", np.zeros(2), r"unexpected tensor 'stray'"),
    ("params/out.b", np.zeros(11, dtype=np.int64), r"parameter out.b has dtype I64"),
    ("xpseq/format", np.asarray(2.0), r"xpseq/format has dtype F64"),
    ("opt/step", np.asarray(1.0, dtype=np.float16).reshape(1, 1) * np.ones((2, 1)),
     r"opt/step has shape \(2, 1\)"),
])
def test_tensors_the_configuration_does_not_name_are_refused(tmp_path, name, value, message):
    tensors, meta = good_parts()
    tensors[name] = value
    path = write_raw(tmp_path / "odd.safetensors", tensors, meta)       # a valid digest
    reads = Reads()
    with mock.patch("safetensors.safe_open", reads), pytest.raises(ckpt.CheckpointError,
                                                                   match=message):
        ckpt.load(path)
    assert reads.names == []


def test_a_valid_file_is_read_once_without_a_second_copy(tmp_path):
    tensors, meta = good_parts(src_vocab=2**16 // 3 * 3, embed=32)     # a 16 MB embedding
    path = write_raw(tmp_path / "big.safetensors", tensors, meta)
    size = sum(a.nbytes for a in tensors.values())
    largest = max(a.nbytes for a in tensors.values())
    reads = Reads()
    tracemalloc.start()
    try:
        with mock.patch("safetensors.safe_open", reads):
            loaded = ckpt.load(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sorted(reads.names) == sorted(tensors)         # each tensor once
    # The arrays, and no copy of one of them to digest it (the finiteness check's
    # booleans, an eighth of the largest, are the main extra).
    assert peak < size + largest / 2, (peak, size, largest)
    assert np.array_equal(loaded.params["src_embed"], tensors["params/src_embed"])


# ------------------------------------------------------------------ mode and symlink


def test_save_keeps_the_mode_of_the_file_it_replaces(tmp_path):
    old_mask = os.umask(0o022)
    try:
        path = saved(tmp_path)
        assert stat.S_IMODE(path.stat().st_mode) == 0o644          # new: 0666 less umask
        path.chmod(0o600)
        saved(tmp_path)                                            # e.g. a resumed run
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        path.chmod(0o640)
        saved(tmp_path)
        assert stat.S_IMODE(path.stat().st_mode) == 0o640
    finally:
        os.umask(old_mask)
    assert [p.name for p in tmp_path.iterdir()] == ["model.safetensors"]


def test_save_through_a_symlink_writes_its_target_and_keeps_the_link(tmp_path):
    store, runs = tmp_path / "store", tmp_path / "runs"
    store.mkdir()
    runs.mkdir()
    real = saved(store, "real.safetensors")
    real.chmod(0o600)
    link = runs / "model.safetensors"
    link.symlink_to(real)
    params = {k: v + 1.0 for k, v in init_params(CONFIG, seed=3).items()}
    assert ckpt.save(link, config=CONFIG, params=params) == link
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert stat.S_IMODE(real.stat().st_mode) == 0o600
    assert np.array_equal(ckpt.load(real).params["out.W"], params["out.W"])
    assert sorted(p.name for p in store.iterdir()) == ["real.safetensors"]   # no temporary
    assert sorted(p.name for p in runs.iterdir()) == ["model.safetensors"]


# --------------------------------------------------- a full disk, and the metrics log


def tiny_task():
    """Reverse a sentence of 1-4 words of six."""
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(6)]

    def pairs(n):
        out = []
        for _ in range(n):
            src = [str(w) for w in rng.choice(words, size=int(rng.integers(1, 5)))]
            out.append((src, src[::-1]))
        return out

    return task_from_pairs(pairs(24), pairs(8), {})


TASK = tiny_task()


def train_tiny(folder: pathlib.Path, *, epochs: int, resume=None):
    """train_model on :data:`TASK` with a plateau rule (lowering the rate after every
    epoch but the first), early stopping, a metrics log and a checkpoint in ``folder``."""
    config = model_config(TASK, embed=4, hidden=4)
    train = TrainConfig(epochs=epochs, optimizer=adam(1e-2), progress=False, min_delta=1e9)
    parts = [callbacks.ReduceLROnPlateau(0.5), callbacks.MetricsLog(folder / "m.csv"),
             callbacks.EarlyStopping(patience=9)]
    return train_model(TASK, backends.get("numpy"), config, train, batch_size=8,
                       dtype="float64", callbacks=parts,
                       checkpoint=str(folder / "m.safetensors"), resume=resume)


def failing_save(at: int):
    """A stand-in for checkpoint.save whose call number ``at`` finds the disk full."""
    real, calls = ckpt.save, []

    def save(path, **fields):
        calls.append(path)
        if len(calls) == at:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(path, **fields)

    return mock.patch.object(ckpt, "save", side_effect=save)


def csv_rows(path: pathlib.Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_a_full_disk_names_the_checkpoint_and_what_was_kept(tmp_path):
    from xpseq.app.cli import _one_line

    path = tmp_path / "m.safetensors"
    with failing_save(at=2), pytest.raises(OSError) as caught:
        train_tiny(tmp_path, epochs=3)
    err = caught.value
    kept = ckpt.load(path)
    epoch, step = kept.train_state["epoch"], kept.train_state["step"]
    assert (epoch, step) == (1, 3)
    assert err.errno == errno.ENOSPC and err.filename == str(path)
    assert err.strerror == ("cannot write the checkpoint (No space left on device); the "
                            "previous one (epoch 1, step 3) is kept")
    assert _one_line(err) == f"{err.strerror}: {path}"          # what the command prints

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    with failing_save(at=1), pytest.raises(OSError, match="no checkpoint was written"):
        train_tiny(fresh, epochs=2)
    assert not (fresh / "m.safetensors").exists()

    with failing_save(at=1), pytest.raises(
            OSError, match=r"the one already there \(epoch 1, step 3\) is kept"):
        train_tiny(tmp_path, epochs=3, resume=kept)             # resumed, in place


def test_a_full_disk_while_writing_an_epoch_for_averaging_says_the_checkpoint_is_written(
        tmp_path):
    from xpseq.models.rnn import init_params as rnn_init
    from xpseq.train import fit

    config = model_config(TASK, embed=4, hidden=4)
    save = callbacks.SaveCheckpoint(tmp_path / "m.safetensors", keep_epochs=1)
    with failing_save(at=2), pytest.raises(OSError) as caught:    # the epoch's own file
        fit(config, rnn_init(config, seed=0), TASK.batches(TASK.train, 8),
            backends.get("numpy"), train=TrainConfig(epochs=2, progress=False),
            callbacks=[save])
    assert caught.value.errno == errno.ENOSPC
    assert caught.value.filename == str(tmp_path / "m.epoch1.safetensors")
    assert caught.value.strerror == (
        f"cannot write the parameters of epoch 1 for averaging (No space left on device); "
        f"the checkpoint {tmp_path / 'm.safetensors'} of that epoch is written")
    assert ckpt.load(tmp_path / "m.safetensors").train_state["epoch"] == 1


def test_the_metrics_log_lists_only_saved_epochs_and_a_resumed_run_is_exact(tmp_path):
    whole_dir, part_dir = tmp_path / "whole", tmp_path / "part"
    whole_dir.mkdir()
    part_dir.mkdir()
    _, whole = train_tiny(whole_dir, epochs=4)
    # (each record holds the factor the epoch trained with; the rule lowers it after)
    assert [h["lr_scale"] for h in whole.history] == [1.0, 1.0, 0.5, 0.25]
    with failing_save(at=3), pytest.raises(OSError, match="previous one .epoch 2, step 6"):
        train_tiny(part_dir, epochs=4)
    assert [r["epoch"] for r in csv_rows(part_dir / "m.csv")] == ["1", "2"]
    saved_two = ckpt.load(part_dir / "m.safetensors")
    # The checkpoint holds what the plateau rule decided at the end of epoch 2.
    assert float(saved_two.opt_state["scale"]) == 0.5
    assert saved_two.train_state["bad_epochs"] == 1
    _, rest = train_tiny(part_dir, epochs=4, resume=saved_two)
    for name, value in whole.params.items():
        assert np.array_equal(rest.params[name], value), name
    keys = ("epoch", "train_loss", "dev_loss", "steps", "lr_scale")
    assert ([{k: r[k] for k in keys} for r in csv_rows(part_dir / "m.csv")]
            == [{k: r[k] for k in keys} for r in csv_rows(whole_dir / "m.csv")])


def test_a_stale_row_of_an_interrupted_run_is_dropped_on_resume(tmp_path):
    train_tiny(tmp_path, epochs=2)
    log = tmp_path / "m.csv"
    rows = csv_rows(log)
    stale = dict(rows[-1], epoch="3", steps="9")        # logged, then the process died
    with open(log, "a", newline="", encoding="utf-8") as f:
        csv.DictWriter(f, fieldnames=list(rows[0])).writerow(stale)
    saved_two = ckpt.load(tmp_path / "m.safetensors")
    _, result = train_tiny(tmp_path, epochs=2, resume=saved_two)    # nothing left to train
    assert len(result.history) == 2
    assert csv_rows(log) == rows


def test_the_recipes_put_the_checkpoint_before_the_metrics_log(tmp_path):
    from xpseq.data.cmudict import G2PSplit

    split = G2PSplit(train={"ab": [("A", "B")], "ba": [("B", "A")]},
                     dev={"aa": [("A", "A")]}, test={"bb": [("B", "B")]}, stress=False)
    log = callbacks.MetricsLog(tmp_path / "m.csv")
    with mock.patch.object(g2p_recipe, "train_model",
                           side_effect=RuntimeError("stop here")) as train:
        with pytest.raises(RuntimeError, match="stop here"):
            g2p_recipe.train(split, backends.get("numpy"), checkpoint=str(tmp_path / "g.st"),
                             progress=False, dev_words=0, monitor="dev_loss",
                             callbacks=[log], lr_decay=0.5, patience=3)
    kinds = [type(cb).__name__ for cb in train.call_args.kwargs["callbacks"]]
    assert kinds.index("ReduceLROnPlateau") < kinds.index("SaveCheckpoint")
    assert kinds.index("RestoreBest") < kinds.index("SaveCheckpoint")
    assert kinds[-2:] == ["SaveCheckpoint", "MetricsLog"]
