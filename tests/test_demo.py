"""`xpseq demo` runs every section end to end (tiny sizes on numpy, which trains with its
hand-derived gradients: the real numbers come from `make demo`, quoted in the README)."""

from __future__ import annotations

import re

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
