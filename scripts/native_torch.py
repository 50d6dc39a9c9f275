"""The benchmark's reference: xpseq's attention model written as plain PyTorch.

The model of :mod:`xpseq.models.rnn` (LSTM cells, Luong ``general`` attention with
input feeding) in the way a PyTorch user writes it:
``nn.Embedding``, an ``nn.LSTM(bidirectional=True)`` over ``pack_padded_sequence``, an
``nn.LSTMCell`` decoder run by a Python loop over the target positions, and
``torch.optim.Adam``. The memory's projection ``W m_j`` is computed once per sentence (as
xpseq does), so both implementations do the same arithmetic.

:func:`beam_search_one` is the usual per-sentence beam search: a Python
list of ``(ids, score, state)`` hypotheses, one decoder call per hypothesis, ``topk`` per
hypothesis. Its candidate ranking, finishing rule, stopping rule and length penalties are
those of :func:`xpseq.core.decoding.beam_search`, in the same float32 arithmetic, so the
two give the same translations.

:class:`NativeTransformer` is :mod:`xpseq.models.transformer` as a PyTorch user writes it:
``nn.Transformer(batch_first=True)`` with ``nn.Embedding``, the sinusoidal positions and an
output ``nn.Linear``, loaded with xpseq's parameters (torch packs ``[W_q; W_k; W_v]`` into
``in_proj_weight``).

Used by ``scripts/bench.py``, ``tests/test_bench.py`` and ``tests/test_transformer.py``.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from xpseq.models.rnn import Seq2SeqConfig

__all__ = ["NativeSeq2Seq", "NativeTransformer", "check_supported", "make_native_step",
           "beam_search_one"]

BOS_ID, EOS_ID, PAD_ID = 1, 2, 0

# nn.LSTM names its reverse direction with a suffix; xpseq keeps it in a second cell.
_ENCODER_NAMES = {"W_ih": "weight_ih_l0", "W_hh": "weight_hh_l0", "b_ih": "bias_ih_l0",
                  "b_hh": "bias_hh_l0"}
_CELL_NAMES = {"W_ih": "weight_ih", "W_hh": "weight_hh", "b_ih": "bias_ih", "b_hh": "bias_hh"}


def check_supported(config: Seq2SeqConfig) -> None:
    """The reference implements one configuration: LSTM, Luong ``general``, input feeding,
    no dropout (so that every implementation does the same work)."""
    wanted = {"cell": "lstm", "attention": "general", "style": "luong", "input_feeding": True,
              "dropout": 0.0}
    wrong = {k: getattr(config, k) for k, v in wanted.items() if getattr(config, k) != v}
    if wrong:
        raise ValueError(f"the native reference supports {wanted}; the config has {wrong}")


class NativeSeq2Seq(nn.Module):
    """Bi-LSTM encoder, LSTMCell decoder with Luong general attention and input feeding."""

    def __init__(self, src_vocab: int, tgt_vocab: int, embed: int, hidden: int,
                 pad_id: int = PAD_ID):
        super().__init__()
        dec = 2 * hidden                                     # D: the decoder's units
        self.pad_id = pad_id
        self.src_embed = nn.Embedding(src_vocab, embed)
        self.tgt_embed = nn.Embedding(tgt_vocab, embed)
        self.encoder = nn.LSTM(embed, hidden, batch_first=True, bidirectional=True)
        self.decoder = nn.LSTMCell(embed + dec, dec)         # input: [E y_{t-1}; o_{t-1}]
        self.att = nn.Linear(2 * hidden, dec, bias=False)    # keys W m_j
        self.combine = nn.Linear(2 * hidden + dec, dec, bias=False)  # o = tanh(W_u [a; s])
        self.out = nn.Linear(dec, tgt_vocab)

    @classmethod
    def from_xpseq(cls, params: Mapping[str, np.ndarray], config: Seq2SeqConfig,
                   dtype: torch.dtype = torch.float32) -> "NativeSeq2Seq":
        """The model holding a copy of xpseq's parameters (``init_params`` names)."""
        check_supported(config)
        model = cls(config.src_vocab, config.tgt_vocab, config.embed, config.hidden,
                    config.pad_id).to(dtype)
        model.load_xpseq(params)
        return model

    def xpseq_parameters(self) -> dict[str, nn.Parameter]:
        """The module's parameters under xpseq's names (``param_shapes``)."""
        named: dict[str, nn.Parameter] = {
            "src_embed": self.src_embed.weight, "tgt_embed": self.tgt_embed.weight,
            "att.W": self.att.weight, "out.W_u": self.combine.weight,
            "out.W": self.out.weight, "out.b": self.out.bias,
        }
        for ours, theirs in _ENCODER_NAMES.items():
            named[f"enc_fwd.{ours}"] = getattr(self.encoder, theirs)
            named[f"enc_bwd.{ours}"] = getattr(self.encoder, theirs + "_reverse")
        for ours, theirs in _CELL_NAMES.items():
            named[f"dec.{ours}"] = getattr(self.decoder, theirs)
        return named

    def load_xpseq(self, params: Mapping[str, np.ndarray]) -> None:
        """Copy xpseq's parameter dict into the modules (the layouts are the same)."""
        targets = self.xpseq_parameters()
        missing = sorted(set(targets) ^ set(params))
        if missing:
            raise ValueError(f"parameter names differ from xpseq's: {missing}")
        with torch.no_grad():
            for name, tensor in targets.items():
                value = torch.as_tensor(np.array(params[name]))
                if tuple(value.shape) != tuple(tensor.shape):
                    raise ValueError(f"{name}: shape {tuple(value.shape)} != "
                                     f"{tuple(tensor.shape)}")
                tensor.copy_(value.to(tensor.dtype))

    # ------------------------------------------------------------------ the model

    def encode(self, src: torch.Tensor, src_len: torch.Tensor) -> dict:
        """Memory ``(B, S, 2H)``, its keys ``(B, S, D)``, the source mask and the decoder's
        first state ``(h, c, o)``."""
        packed = pack_padded_sequence(self.src_embed(src), src_len.cpu(), batch_first=True,
                                      enforce_sorted=False)
        outputs, (h_n, c_n) = self.encoder(packed)
        memory, _ = pad_packed_sequence(outputs, batch_first=True, total_length=src.shape[1])
        h0 = torch.cat([h_n[0], h_n[1]], dim=1)              # [h→_final; h←_final]
        c0 = torch.cat([c_n[0], c_n[1]], dim=1)
        mask = torch.arange(src.shape[1], device=src.device)[None, :] < src_len[:, None]
        return {"memory": memory, "keys": self.att(memory), "mask": mask,
                "state": (h0, c0, torch.zeros_like(h0))}

    def decode_step(self, y_prev: torch.Tensor, state: tuple, enc: dict) -> tuple:
        """One step: ``(logits (B, V), new state (h, c, o), attention (B, S))``."""
        h, c, o = state
        h, c = self.decoder(torch.cat([self.tgt_embed(y_prev), o], dim=1), (h, c))
        scores = torch.bmm(enc["keys"], h.unsqueeze(2)).squeeze(2)        # sᵀ W m_j
        alpha = torch.softmax(scores.masked_fill(~enc["mask"], float("-inf")), dim=1)
        context = torch.bmm(alpha.unsqueeze(1), enc["memory"]).squeeze(1)
        o = torch.tanh(self.combine(torch.cat([context, h], dim=1)))
        return self.out(o), (h, c, o), alpha

    def forward(self, src: torch.Tensor, src_len: torch.Tensor,
                tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits ``(B, T, V)``."""
        enc = self.encode(src, src_len)
        state = enc["state"]
        emb = self.tgt_embed(tgt_in)
        outputs = []
        for t in range(tgt_in.shape[1]):
            h, c, o = state
            h, c = self.decoder(torch.cat([emb[:, t], o], dim=1), (h, c))
            scores = torch.bmm(enc["keys"], h.unsqueeze(2)).squeeze(2)
            alpha = torch.softmax(scores.masked_fill(~enc["mask"], float("-inf")), dim=1)
            context = torch.bmm(alpha.unsqueeze(1), enc["memory"]).squeeze(1)
            o = torch.tanh(self.combine(torch.cat([context, h], dim=1)))
            outputs.append(o)
            state = (h, c, o)
        return self.out(torch.stack(outputs, dim=1))          # one projection for all steps

    def loss(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Mean cross-entropy over the real (non-pad) target tokens."""
        logits = self(batch["src"], batch["src_len"], batch["tgt_in"])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                               batch["tgt_out"].reshape(-1), ignore_index=self.pad_id)


def make_native_step(model: NativeSeq2Seq, lr: float = 1e-3) -> Callable[[Mapping], Any]:
    """``step(batch) -> loss``: one ``torch.optim.Adam`` step (the defaults otherwise)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)

    def step(batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = model.loss(batch)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


# -------------------------------------------------------------------- transformer


class NativeTransformer(nn.Module):
    """``nn.Transformer(batch_first=True)`` between embeddings (scaled by ``sqrt(d)``, plus
    sinusoidal positions) and an output ``nn.Linear``, with dropout 0: the
    ``transformer`` model kind of xpseq (sinusoidal positions, separate embeddings, an
    untied output layer)."""

    def __init__(self, config: Any, dtype: torch.dtype = torch.float32):
        super().__init__()
        if config.positions != "sinusoidal" or config.share_embeddings or config.tie_output:
            raise ValueError("NativeTransformer: sinusoidal positions, separate embeddings "
                             "and an untied output layer only")
        act = F.relu if config.activation == "relu" else \
            (lambda x: F.gelu(x, approximate="tanh"))
        self.config = config
        self.net = nn.Transformer(config.d_model, config.heads, config.encoder_layers,
                                  config.decoder_layers, config.d_ff, dropout=0.0,
                                  activation=act, batch_first=True,
                                  norm_first=config.norm == "pre").to(dtype)
        self.src_embed = nn.Embedding(config.src_vocab, config.d_model).to(dtype)
        self.tgt_embed = nn.Embedding(config.tgt_vocab, config.d_model).to(dtype)
        self.out = nn.Linear(config.d_model, config.tgt_vocab).to(dtype)
        self.dtype = dtype
        self.train()                 # no inference fast path (dropout is 0 anyway)

    def named_xpseq(self) -> dict[str, tuple[torch.Tensor, slice | None]]:
        """xpseq's parameter names -> (this module's tensor, rows of it or ``None``)."""
        d = self.config.d_model
        out: dict[str, tuple[torch.Tensor, slice | None]] = {}

        def attention(module: Any, prefix: str) -> None:
            for j, n in enumerate("qkv"):
                rows = slice(j * d, (j + 1) * d)
                out[f"{prefix}.W_{n}"] = (module.in_proj_weight, rows)
                out[f"{prefix}.b_{n}"] = (module.in_proj_bias, rows)
            out[f"{prefix}.W_o"] = (module.out_proj.weight, None)
            out[f"{prefix}.b_o"] = (module.out_proj.bias, None)

        def norm(module: Any, prefix: str) -> None:
            out[f"{prefix}.g"], out[f"{prefix}.b"] = (module.weight, None), (module.bias, None)

        def ff(layer: Any, prefix: str) -> None:
            out.update({f"{prefix}.W_1": (layer.linear1.weight, None),
                        f"{prefix}.b_1": (layer.linear1.bias, None),
                        f"{prefix}.W_2": (layer.linear2.weight, None),
                        f"{prefix}.b_2": (layer.linear2.bias, None)})

        for i, layer in enumerate(self.net.encoder.layers):
            attention(layer.self_attn, f"enc{i}.att")
            norm(layer.norm1, f"enc{i}.ln1")
            norm(layer.norm2, f"enc{i}.ln2")
            ff(layer, f"enc{i}.ff")
        norm(self.net.encoder.norm, "enc.ln")
        for i, layer in enumerate(self.net.decoder.layers):
            attention(layer.self_attn, f"dec{i}.self")
            attention(layer.multihead_attn, f"dec{i}.cross")
            for j in (1, 2, 3):
                norm(getattr(layer, f"norm{j}"), f"dec{i}.ln{j}")
            ff(layer, f"dec{i}.ff")
        norm(self.net.decoder.norm, "dec.ln")
        out.update({"src_embed": (self.src_embed.weight, None),
                    "tgt_embed": (self.tgt_embed.weight, None),
                    "out.W": (self.out.weight, None), "out.b": (self.out.bias, None)})
        return out

    @classmethod
    def from_xpseq(cls, params: Mapping[str, np.ndarray], config: Any,
                   dtype: torch.dtype = torch.float32) -> "NativeTransformer":
        model = cls(config, dtype)
        with torch.no_grad():
            for name, (tensor, rows) in model.named_xpseq().items():
                value = torch.tensor(np.asarray(params[name]), dtype=dtype)
                (tensor if rows is None else tensor[rows]).copy_(value)
        return model

    def xpseq_grads(self) -> dict[str, np.ndarray]:
        """The gradients of the last ``backward``, named as xpseq's parameters."""
        return {name: (tensor.grad if rows is None else tensor.grad[rows]).detach().numpy()
                for name, (tensor, rows) in self.named_xpseq().items()}

    def positions(self, length: int) -> torch.Tensor:
        """Vaswani et al.'s sinusoidal encodings, written in torch."""
        d = self.config.d_model
        pos = torch.arange(length, dtype=self.dtype)[:, None]
        rates = torch.pow(10000.0, -torch.arange(0, d, 2, dtype=self.dtype) / d)
        pe = torch.zeros(length, d, dtype=self.dtype)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * rates), torch.cos(pos * rates)
        return pe

    def forward(self, src: torch.Tensor, src_len: torch.Tensor,
                tgt_in: torch.Tensor) -> torch.Tensor:
        scale = math.sqrt(self.config.d_model)
        pad = torch.arange(src.shape[1])[None, :] >= src_len[:, None]
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.shape[1],
                                                                dtype=self.dtype)
        hidden = self.net(self.src_embed(src) * scale + self.positions(src.shape[1]),
                          self.tgt_embed(tgt_in) * scale + self.positions(tgt_in.shape[1]),
                          tgt_mask=causal, src_key_padding_mask=pad,
                          memory_key_padding_mask=pad)
        return self.out(hidden)

    def loss(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The label-smoothed cross-entropy over the real target tokens."""
        logits = self(batch["src"], batch["src_len"], batch["tgt_in"])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                               batch["tgt_out"].reshape(-1), ignore_index=self.config.pad_id,
                               label_smoothing=self.config.label_smoothing)


# ------------------------------------------------------------------- beam search


def _penalised(score: float, length: int, penalty: str) -> float:
    """The ranking score, in float32 as xpseq computes it for float32 models."""
    if penalty == "none":
        return score
    if penalty == "avg":
        return float(np.float32(score) / np.float32(length))
    raise ValueError(f"length penalty {penalty!r}: the reference supports 'none' and 'avg'")


@torch.no_grad()
def beam_search_one(model: NativeSeq2Seq, src_ids: list[int], *, k: int = 5,
                    length_penalty: str = "avg", max_len_a: float = 2.0,
                    max_len_b: float = 5.0) -> dict:
    """Beam search for one source sentence (ids ending in ``</s>``), hypothesis by
    hypothesis.

    The rules of :func:`xpseq.core.decoding.beam_search`: every step each live hypothesis
    proposes its ``k + 1`` best next tokens (enough: any other candidate has ``k`` live
    continuations ranked above it); the candidates are ranked by summed log-probability
    (ties: lower hypothesis, then lower token id); a ``</s>`` candidate ranked above the
    ``k``-th live continuation finishes; the ``k`` best other candidates stay live; at the
    length limit ``ceil(a · len(src) + b)`` the ``k`` best candidates finish; the search
    stops once no live hypothesis can beat the ``k``-th finished one. The finished pool
    keeps the ``k`` best by the length-penalised score.

    Returns ``{"ids": output ids without </s>, "score": summed log-probability}``.
    """
    model.eval()
    src = torch.tensor([src_ids], dtype=torch.long)
    enc = model.encode(src, torch.tensor([len(src_ids)], dtype=torch.long))
    limit = math.ceil(max_len_a * len(src_ids) + max_len_b)
    beams: list[tuple[list[int], float, tuple]] = [([BOS_ID], 0.0, enc["state"])]
    finished: list[tuple[float, float, list[int]]] = []        # (ranking, score, ids)
    for t in range(limit):
        candidates = []
        for i, (ids, score, state) in enumerate(beams):
            logits, new_state, _ = model.decode_step(torch.tensor([ids[-1]]), state, enc)
            logp = F.log_softmax(logits[0], dim=-1)
            top_lp, top_id = logp.topk(min(k + 1, logp.shape[0]))
            totals = top_lp + score                            # float32, as xpseq adds
            for total, word in zip(totals.tolist(), top_id.tolist()):
                candidates.append((total, i, word, new_state))
        candidates.sort(key=lambda c: (-c[0], c[1], c[2]))
        final = t + 1 >= limit
        live: list[tuple[list[int], float, tuple]] = []
        accepted = []
        for rank, (total, i, word, new_state) in enumerate(candidates):
            ids = beams[i][0] + [word]
            is_eos = word == EOS_ID
            take = rank < k if final else (is_eos and len(live) < k)
            if take and total > -math.inf:
                accepted.append((_penalised(total, t + 1, length_penalty), total, ids[1:]))
            if not is_eos and len(live) < k:
                live.append((ids, total, new_state))
            if (final and rank + 1 >= k) or (not final and len(live) == k):
                break                                  # no later candidate is used
        finished = sorted(finished + accepted, key=lambda f: -f[0])[:k]   # stable
        beams = live
        if final or not beams:
            break
        bound = beams[0][1] if length_penalty == "none" else \
            _penalised(beams[0][1], limit, length_penalty)
        if len(finished) == k and finished[-1][0] >= bound:
            break
    _, score, ids = finished[0]
    if ids and ids[-1] == EOS_ID:
        ids = ids[:-1]
    return {"ids": ids, "score": score}
