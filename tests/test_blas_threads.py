"""The front door limits NumPy's BLAS threads for its own calls and restores them after."""

from __future__ import annotations

import pytest
from threadpoolctl import threadpool_info, threadpool_limits

import xpseq
import xpseq.tasks.translator as translator_module
from xpseq import backends, g2p
from xpseq.g2p import converter as g2p_converter
from xpseq.models.rnn import Seq2SeqConfig


def blas() -> set[int]:
    return {p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"}


@pytest.fixture
def uncontrolled(monkeypatch: pytest.MonkeyPatch):
    """A caller that chose no BLAS threads, whose pool runs 2 (as on an idle 2-core
    machine): no environment variable, no set_threads."""
    if not blas():
        pytest.skip("NumPy reports no BLAS thread pool")
    for name in backends.BLAS_THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(backends, "_threads", None)
    with threadpool_limits(2, user_api="blas"):
        assert blas() == {2}
        yield


def test_limited_inside_and_restored_after(uncontrolled: None) -> None:
    with backends.blas_threads() as limit:
        assert limit == 1 and blas() == {1}
    assert blas() == {2}


def test_restored_after_an_error(uncontrolled: None) -> None:
    with pytest.raises(RuntimeError, match="inside"):
        with backends.blas_threads():
            raise RuntimeError("inside")
    assert blas() == {2}


@pytest.mark.parametrize("variable", backends.BLAS_THREAD_VARIABLES)
def test_a_callers_environment_is_left_alone(uncontrolled: None, variable: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(variable, "2")
    with backends.blas_threads() as limit:
        assert limit is None and blas() == {2}


def test_set_threads_is_the_callers_choice(uncontrolled: None,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backends, "_threads", 2)
    with backends.blas_threads() as limit:
        assert limit is None and blas() == {2}


def test_bad_threads_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="blas_threads: threads must be a positive int"):
        with backends.blas_threads(0):
            pass


def test_translator_and_g2p_compute_inside_the_limit(uncontrolled: None,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[set[int]] = []

    def fake_translate(decoder, tokens, *args, **kwargs):
        seen.append(blas())
        return [{"tokens": ["x"], "n_best": [["AH"]]} for _ in tokens]

    monkeypatch.setattr(translator_module, "translate", fake_translate)
    monkeypatch.setattr(g2p_converter, "translate", fake_translate)   # what G2P calls
    task = xpseq.toy_task(n_train=20, n_dev=5, n_test_per_bucket=2)
    config = Seq2SeqConfig(src_vocab=len(task.src_vocab), tgt_vocab=len(task.tgt_vocab))
    model = xpseq.Translator({}, config, task.src_vocab, task.tgt_vocab, backends.get("numpy"))
    assert model.translate(["the cat"]) == ["x"]
    assert g2p.load(backend="numpy").pronounce(["zyxwv"]) == [["AH"]]
    assert seen == [{1}, {1}]
    assert blas() == {2}


def test_training_runs_inside_the_limit(uncontrolled: None,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[set[int]] = []

    def fake_train_model(*args, **kwargs):
        seen.append(blas())
        raise KeyboardInterrupt          # the way a user stops a training

    monkeypatch.setattr(translator_module, "train_model", fake_train_model)
    task = xpseq.toy_task(n_train=20, n_dev=5, n_test_per_bucket=2)
    with pytest.raises(KeyboardInterrupt):
        xpseq.Translator.train(task, backend="numpy", progress=False)
    assert seen == [{1}] and blas() == {2}
