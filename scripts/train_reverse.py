"""Train the attention model to reverse sequences, on JAX, PyTorch and NumPy, from one start.

Run: ``python -m scripts.train_reverse [--epochs N] [--backends jax,torch,numpy]
[--threads T]`` (about a minute on 2 cores with the defaults).

Every backend starts from the same ``init_params`` and sees the same batches. JAX and
PyTorch differentiate the loss themselves; NumPy runs the hand-derived backward pass.
Dropout masks come from each backend's generator (NumPy's for numpy and torch, so those
two follow the same curve; ``jax.random`` for JAX, so its curve is close, not equal). It
prints the loss per epoch, the number of JAX traces (compilations), the time per epoch,
and the accuracy of greedy reversal; then it saves the JAX model, loads the checkpoint on
every backend and checks that all give the same logits.
"""

from __future__ import annotations

import pathlib
import sys
import tempfile
import time

import numpy as np

from xpseq import backends
from xpseq.core.optim import adam
from xpseq.data import BOS_ID, EOS_ID, make_batches
from xpseq.models.rnn import Seq2SeqConfig, decode_step, encode, forward, init_params
from xpseq.train import TrainConfig, fit
from xpseq.train import checkpoint as ckpt
from xpseq.train.callbacks import EarlyStopping

from . import _common as common

VOCAB = 16            # ids 4..15 are symbols; 0-3 are <pad>, <s>, </s>, <unk>


def reverse_pairs(n: int, seed: int, max_len: int = 10) -> list[tuple[list[int], list[int]]]:
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(n):
        words = rng.integers(4, VOCAB, rng.integers(1, max_len + 1)).tolist()
        pairs.append((words + [EOS_ID], words[::-1]))
    return pairs


def greedy_accuracy(backend, config, params, pairs) -> float:
    """Share of sources whose greedy decoding is exactly the reversed sequence."""
    batch = make_batches(pairs, batch_size=len(pairs), bucket=1)[0]
    P = {k: backend.asarray(v) for k, v in params.items()}
    enc = encode(P, config, backend.asarray(batch["src"]), backend.asarray(batch["src_len"]),
                 scan=backend.scan)
    state, y = enc["state"], backend.asarray(np.full(len(pairs), BOS_ID))
    out = []
    for _ in range(batch["src"].shape[1] + 2):
        logits, state, _ = decode_step(P, config, y, state, enc)
        y = backend.xp.argmax(logits, axis=-1)
        out.append(backend.to_numpy(y))
    out = np.stack(out, axis=1)
    correct = 0
    for row, (src, tgt) in zip(out, sorted(pairs, key=lambda p: (len(p[0]), len(p[1])))):
        hyp = list(row[:list(row).index(EOS_ID)]) if EOS_ID in row else list(row)
        correct += hyp == tgt
    return correct / len(pairs)


def main(argv: list[str] | None = None) -> int:
    parser = common.script_parser(__doc__)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--backends", default="jax,torch,numpy")
    common.add_threads_option(parser)
    args = parser.parse_args(argv)
    names = [n for n in common.comma_list(args.backends) if n in backends.available()]
    common.set_torch_threads(args.threads, names)
    config = Seq2SeqConfig(VOCAB, VOCAB, embed=16, hidden=32, attention="general",
                           dropout=0.1)
    train = make_batches(reverse_pairs(2000, seed=0), batch_size=32, bucket=8)
    dev = make_batches(reverse_pairs(200, seed=1), batch_size=100, bucket=8)
    test = reverse_pairs(200, seed=2)
    start = init_params(config, seed=0)
    print(f"reverse task: {len(train)} batches of 32, {config}")
    print(f"torch threads: {args.threads}\n")
    results = {}
    for name in names:
        t0 = time.perf_counter()
        r = fit(config, start, train, backends.get(name), dev_batches=dev,
                train=TrainConfig(epochs=args.epochs, optimizer=adam(3e-3), progress=False),
                callbacks=[EarlyStopping(patience=2)])
        seconds = time.perf_counter() - t0
        acc = greedy_accuracy(backends.get(name), config, r.params, test)
        results[name] = r
        traces = "" if r.traces is None else f", {r.traces} traces (compilations)"
        print(f"{name}: {seconds:.1f} s for {len(r.history)} epochs{traces}, greedy reversal "
              f"exact on {acc:.0%} of 200 test sequences")
        print("  epoch  train loss  dev loss  traces  seconds")
        for h in r.history:
            t = "-" if h["traces"] is None else h["traces"]
            print(f"  {h['epoch']:>5}  {h['train_loss']:>10.4f}  {h['dev_loss']:>8.4f}  {t:>6}"
                  f"  {h['seconds']:>7.1f}")
    if not results:
        print(f"none of the backends {args.backends} is installed")
        return 1
    first = next(iter(results))
    with tempfile.TemporaryDirectory() as tmp:
        path = ckpt.save(pathlib.Path(tmp) / "reverse.safetensors", config=config,
                         params=results[first].params)
        batch = dev[0]
        logits = {}
        for name in backends.available():
            be = backends.get(name)
            loaded = ckpt.load(path, backend=be)
            out, _ = forward(loaded.params, loaded.config,
                             *[be.asarray(batch[k]) for k in ("src", "src_len", "tgt_in")],
                             scan=be.scan)
            logits[name] = be.to_numpy(out)
    worst = max(float(np.max(np.abs(v - logits["numpy"]))) for v in logits.values())
    print(f"\nthe {first}-trained checkpoint loaded on {', '.join(logits)}: "
          f"largest logit difference from numpy {worst:.1e}")
    return 0 if worst < 1e-10 else 1


if __name__ == "__main__":
    sys.exit(main())
