"""`xpseq demo` runs every section end to end (tiny sizes on numpy, which trains with its
hand-derived gradients: the real numbers come from `make demo`, quoted in the README)."""

from __future__ import annotations

import re

import pytest

from xpseq.app import cli, demo
from xpseq.train import checkpoint

TINY = {"data": {"n_train": 120, "n_dev": 20, "n_test_per_bucket": 6},
        "model": {"embed": 8, "hidden": 8, "bucket": 32}, "epochs": 1, "beam_sentences": 10,
        "transformer": {"d_model": 8, "heads": 2, "encoder_layers": 1, "decoder_layers": 1,
                        "d_ff": 8}, "warmup": 2}


def test_demo_runs_every_section(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(demo, "QUICK", TINY)
    code = cli.main(["demo", "--quick", "--backend", "numpy", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    # With progress bars, each model's epoch is reported once (by the training loop).
    assert len(re.findall(r"^epoch 1: train loss", out, flags=re.M)) == 3, out
    for section in ("training the attention model", "training the seq2seq model",
                    "training the transformer model",
                    "by source length", "greedy vs beam search", "attention heatmap",
                    "teacher forcing vs autoregressive decoding", "demo finished"):
        assert section in out, section
    assert "| phrases | sentences | seq2seq BLEU" in out
    assert "| transformer BLEU | transformer exact |" in out
    assert "tok:none" in out                                   # sacrebleu's signature
    for row in ("greedy", "beam k=1", "beam k=3", "beam k=5"):
        assert f"| {row}" in out
    assert "| teacher-forced input | predicts | autoregressive input | predicts |" in out
    for name in ("attention_heatmap.png", "loss_curves.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
    # The trained models are kept, as checkpoints that translate and evaluate read.
    for name in ("attention", "seq2seq", "transformer"):
        path = tmp_path / f"{name}.safetensors"
        loaded = checkpoint.load(path)
        assert loaded.metadata == {"task": "toy", "data": dict(TINY["data"], seed=0)}
        assert str(path) in out
    assert cli.main(["translate", str(tmp_path / "attention.safetensors"), "the cat"]) == 0


def test_the_demo_replaces_only_what_xpseq_wrote(tmp_path, capsys):
    """``--out`` holding a user's text file named ``attention.safetensors``, a PNG another
    program wrote, a FIFO or being a file: refused before any training, each left as it
    was; ``--force`` replaces the user's regular files, never the FIFO. The demo's own
    files (an earlier run's) are replaced without asking."""
    import os

    from xpseq.app import outputs, plots
    from xpseq.app.errors import CommandError

    def refused(out, says):
        assert cli.main(["demo", "--quick", "--backend", "numpy", "--out", str(out)]) == 1
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and says in err, err

    users = tmp_path / "users"
    users.mkdir()
    (users / "attention.safetensors").write_text("my notes")
    refused(users, "attention.safetensors exists and was not written by xpseq")
    (users / "attention.safetensors").unlink()
    (users / "loss_curves.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)
    refused(users, "loss_curves.png exists and was not written by xpseq")
    outputs.check_demo_outputs(str(users), force=True)         # --force: replaced
    assert (users / "loss_curves.png").read_bytes()[:4] == b"\x89PNG"   # (not yet)
    os.mkfifo(users / "attention_heatmap.png")
    refused(users, "attention_heatmap.png is a FIFO (named pipe)")
    with pytest.raises(CommandError, match="is a FIFO"):         # never, even with --force
        outputs.check_demo_outputs(str(users), force=True)
    a_file = tmp_path / "a_file"
    a_file.write_text("mine")
    refused(a_file, "is not a folder")
    assert a_file.read_text() == "mine"
    ours = tmp_path / "ours"
    plots.save_loss_curves(ours / "loss_curves.png", {"m": [{"epoch": 1, "train_loss": 1.0,
                                                             "dev_loss": 1.0}]})
    assert outputs.is_own_png(ours / "loss_curves.png")
    outputs.check_demo_outputs(str(ours), force=False)         # an earlier run's: replaced
