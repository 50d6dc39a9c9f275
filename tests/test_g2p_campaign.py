"""The G2P campaign (xpseq.tasks.g2p_campaign): run names, which candidate ships, float16
storage, the stress-free model kept beside a stressed one, the manifest, a run's
candidates in its folder and the report. (Training, scoring and shipping end to end:
test_g2p.py's recipe-script tests.)"""

from __future__ import annotations

import pytest

from xpseq.tasks.g2p_campaign import (
    FIRST_RECIPE_SCORES,
    FLOAT16_TOLERANCE,
    STRESS_FREE_MARGIN,
    Campaign,
    Run,
    choose,
    manifest,
    report,
    stores_in_float16,
    stress_free_beside,
)


@pytest.mark.parametrize(("spec", "name", "kind", "seed", "distilled"), [
    ("rnn", "rnn", "rnn", None, False),
    ("transformer:2", "transformer-seed2", "transformer", 2, False),
    ("rnn:13:distilled", "rnn-seed13-distilled", "rnn", 13, True)])
def test_a_run_round_trips_between_its_spec_and_its_name(spec, name, kind, seed, distilled):
    run = Run.parse(spec)
    assert (run.name, run.kind, run.seed, run.distilled) == (name, kind, seed, distilled)
    assert Run.from_name(name) == run
    assert Run.parse(run.spec(5)).seed_or(0) == (5 if seed is None else seed)


@pytest.mark.parametrize("bad", ["lstm", "rnn:x", "rnn:1:teacher", "", "rnn:", 3])
def test_a_bad_run_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match="a run is transformer, rnn"):
        Run.parse(bad)


def test_the_lowest_dev_wer_ships_and_the_test_scores_never_count():
    options = [{"model": "rnn", "files": ["rnn.safetensors"], "dev_wer": 8.4, "test": 1.0},
               {"model": "tf", "files": ["tf.safetensors"], "dev_wer": 8.1, "test": 9.0},
               {"model": "both", "files": ["rnn.safetensors", "tf.safetensors"],
                "dev_wer": 7.9, "test": 9.9}]
    assert choose(options)["model"] == "both"
    assert choose(options, single=True)["model"] == "tf"
    with pytest.raises(ValueError, match="no candidate to ship .of a single model"):
        choose(options[2:], single=True)


def test_float16_ships_within_the_tolerance_either_way():
    assert FLOAT16_TOLERANCE == 0.05
    assert stores_in_float16(8.0, 8.0) and stores_in_float16(8.0, 8.04)
    assert stores_in_float16(8.0, 7.96) and not stores_in_float16(8.0, 8.06)
    assert not stores_in_float16(8.0, 7.9)


def test_a_stressed_model_keeps_the_stress_free_one_only_when_it_is_clearly_worse():
    plain = {"files": ["plain.safetensors"], "model": "plain", "storage": "float16",
             "dev_wer": 7.0, "scores": {"greedy": {"wer": 7.5}}, "command": "x",
             "stress": False}
    close = {"dev_wer_no_stress": 7.0 + STRESS_FREE_MARGIN}
    worse = {"dev_wer_no_stress": 7.0 + STRESS_FREE_MARGIN + 0.01}
    assert stress_free_beside(plain, close, stress=True)[0] is None
    kept, why = stress_free_beside(plain, worse, stress=True)
    assert kept == {k: v for k, v in plain.items() if k != "stress"} and "stays" in why
    stressed = {"stress": True, "dev_wer": 9.0, "no_stress": plain}   # kept from before
    assert stress_free_beside(stressed, worse, stress=True)[0]["files"] == plain["files"]
    assert stress_free_beside(plain, worse, stress=False)[0] is None
    assert stress_free_beside(None, worse, stress=True)[0] is None
    assert stress_free_beside(plain, {}, stress=True)[0] is None


def test_the_manifest_is_what_the_package_reads():
    from xpseq import g2p

    choice = {"model": "rnn, average", "dev_wer": 8.0, "dev_wer_no_stress": 6.0}
    entry = manifest(["rnn.safetensors"], choice, stress=True, storage="float16",
                     scores={"greedy": {"wer": 8.5}}, command="python scripts/g2p_recipe.py")
    assert entry["files"] == ["rnn.safetensors"] and entry["dev_wer_no_stress"] == 6.0
    assert set(entry) >= set(g2p.shipped()) - {"no_stress"}
    with pytest.raises(ValueError, match="storage must be"):
        manifest(["a"], choice, stress=False, storage="int8", scores={}, command="")
    with pytest.raises(ValueError, match="at least one file"):
        manifest([], choice, stress=False, storage="float32", scores={}, command="")


def _record(name="rnn", **extra):
    return {"name": name, "kind": "rnn", "seed": 0, "parameters": 1234, "best_epoch": 2,
            "stopped": "time_limit", "recipe": {"devices": 1},
            "history": [{"epoch": e, "minutes": e / 2, "steps": 10 * e, "train_loss": 1 / e,
                         "dev_loss": 2 / e, "dev_wer": 30 - e} for e in (1, 2)], **extra}


def test_a_run_without_epochs_offers_its_best_epoch_and_a_kept_average(tmp_path):
    campaign = Campaign(tmp_path / "out", split=None, backend=None)
    with pytest.raises(FileNotFoundError, match="run rnn has no checkpoint to score"):
        campaign.candidates(_record())
    (campaign.out / "rnn.safetensors").write_bytes(b"")
    assert campaign.candidates(_record()) == {"rnn, best epoch (2)": "rnn.safetensors"}
    # A member of an earlier session: its average and its record kept, its epochs gone.
    (campaign.out / "rnn.avg.safetensors").write_bytes(b"")
    assert campaign.candidates(_record(averaged=[3, 5])) == {
        "rnn, best epoch (2)": "rnn.safetensors",
        "rnn, average of epochs 3-5": "rnn.avg.safetensors"}


@pytest.mark.parametrize("stress", [False, True])
def test_the_report_lists_the_scores_the_curves_and_the_published_results(stress):
    row = {"model": "rnn, best epoch (2)", "dev_wer": 8.25, "search": "greedy", "per": 2.0,
           "wer": 8.5, "words": 100}
    if stress:
        row.update(per_no_stress=1.5, wer_no_stress=7.0)
    text = report({"runs": [_record()], "rows": [row]}, "made by a test")
    lines = text.splitlines()
    assert lines[0] == "made by a test"
    [scores] = [line for line in lines if line.startswith("| rnn, best epoch (2)")]
    cells = [c.strip() for c in scores.strip("|").split("|")]
    assert cells == ["rnn, best epoch (2)", "8.25", "greedy", "2.00", "8.50", "100"] + (
        ["1.50", "7.00"] if stress else [])
    assert ("stress removed" in text) == stress
    assert str(FIRST_RECIPE_SCORES["greedy"][1]) in text
    assert "Learning curve, rnn (1,234 parameters, seed 0, 1 devices" in text
    assert any(line.startswith("| 2 (best)") for line in lines)
    assert "Toshniwal & Livescu 2016" in text
