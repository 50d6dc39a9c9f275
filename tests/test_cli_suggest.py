"""The command line's small edges, in process (no training): a mistyped subcommand, choice
or option is one line on stderr with exit code 2 that names the nearest one (``did you
mean``), an unknown option is reported before a missing required argument, the tour's
errors name the program that ran it, and the help says what each subcommand does.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

from xpseq import tour
from xpseq.app import cli

ROOT = pathlib.Path(__file__).resolve().parents[1]


def refused(argv: list[str], capsys) -> str:
    """The one line ``xpseq argv`` printed on stderr, refused as a bad argument (exit 2)."""
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    out, err = capsys.readouterr()
    assert exit_.value.code == 2, err
    assert out == "" and len(err.splitlines()) == 1, err
    return err


def squeezed(text: str) -> str:
    """``text`` with its whitespace (argparse's wrapping) as single spaces."""
    return " ".join(text.split())


# ------------------------------------------------------------------ did you mean


def test_trian_suggests_train(capsys):
    err = refused(["trian"], capsys)
    assert err.startswith("xpseq: error: argument COMMAND: invalid choice: 'trian'; "
                          "did you mean 'train'? (choose from 'demo', 'train',"), err
    assert err.rstrip().endswith("(see xpseq --help)")


def test_a_subcommand_after_global_options_is_checked_first(capsys):
    err = refused(["--threads", "1", "trian", "--xyzzy"], capsys)
    assert "invalid choice: 'trian'; did you mean 'train'?" in err and "--xyzzy" not in err


def test_a_mistyped_choice_names_the_nearest(capsys):
    err = refused(["train", "--out", "m.safetensors", "--model", "transfomer"], capsys)
    assert err.startswith("xpseq train: error: argument --model: invalid choice: "
                          "'transfomer'; did you mean 'transformer'? (choose from 'rnn', "
                          "'transformer')"), err


def test_modle_suggests_model_before_the_missing_out(capsys):
    err = refused(["train", "--modle", "transformer"], capsys)
    assert err == ("xpseq train: error: unrecognized arguments: --modle; did you mean "
                   "--model? (see xpseq train --help)\n")
    assert "--out" not in err and "required" not in err


@pytest.mark.parametrize("argv, typo, meant", [
    (["translate", "m.safetensors", "--bem", "5", "the cat"], "--bem", "--beam"),
    (["translate", "m.safetensors", "--max-tokns=3"], "--max-tokns", "--max-tokens"),
    (["evaluate", "m.safetensors", "--limt", "3"], "--limt", "--limit"),
    (["g2p", "--lookp", "hello"], "--lookp", "--lookup"),
    (["heatmap", "m.safetensors", "the cat", "--pgn", "h.png"], "--pgn", "--png"),
    (["data", "g2p", "--exprot", "d"], "--exprot", "--export"),   # before: --export required
    (["demo", "--quik"], "--quik", "--quick"),
    (["tour", "--lsit"], "--lsit", "--list"),
    (["--debgu", "train"], "--debgu", "--debug"),
])
def test_an_option_typo_names_the_nearest_option_of_its_subcommand(argv, typo, meant,
                                                                   capsys):
    err = refused(argv, capsys)
    command = "xpseq" if argv[0].startswith("-") else f"xpseq {argv[0]}"
    assert err == (f"{command}: error: unrecognized arguments: {typo}; did you mean "
                   f"{meant}? (see {command} --help)\n")


def test_several_unknown_options_name_each_near_one(capsys):
    err = refused(["train", "--out", "m.safetensors", "--modle", "rnn", "--xyzzy"], capsys)
    assert ("unrecognized arguments: --modle --xyzzy; did you mean --model (for --modle)?"
            in err), err


@pytest.mark.parametrize("argv, line", [
    (["xyzzy"], "xpseq: error: argument COMMAND: invalid choice: 'xyzzy' (choose from "),
    (["translate", "m.safetensors", "--xyzzy", "the cat"],
     "xpseq translate: error: unrecognized arguments: --xyzzy (see xpseq translate --help)"),
    (["train", "--out", "m.safetensors", "--model", "qqq"],
     "xpseq train: error: argument --model: invalid choice: 'qqq' (choose from "),
])
def test_garbage_gets_the_plain_error_without_a_suggestion(argv, line, capsys):
    err = refused(argv, capsys)
    assert err.startswith(line), err
    assert "did you mean" not in err


def test_a_unique_prefix_is_still_an_option_and_an_ambiguous_one_is_refused(capsys):
    parser = cli.build().parser
    args = parser.parse_args(["train", "--out", "m.safetensors", "--epoch", "2"])
    assert args.epochs == 2
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "--out", "m.safetensors", "--d", "3"])
    assert "ambiguous option: --d could match" in capsys.readouterr().err


def test_words_after_a_double_dash_are_not_options():
    parser = cli.build().parser
    args, extra = parser.parse_known_args(["translate", "m.safetensors", "--", "--bem"])
    assert args.sentences == ["--bem"] and extra == []


# ---------------------------------------------------------------- the tour's name


def test_the_tour_through_xpseq_names_xpseq_tour(capsys):
    assert cli.main(["tour", "--lesson", str(len(tour.LESSONS) + 1)]) == 2
    out, err = capsys.readouterr()
    assert err.startswith(f"xpseq tour: error: there is no lesson {len(tour.LESSONS) + 1}; "
                          f"choose 1 to {len(tour.LESSONS)} (see xpseq tour --list)"), err
    assert "autodiff_tour" not in err and out == ""


def test_the_tour_names_the_program_it_is_given(capsys):
    assert tour.main(["--lesson", "999"], prog="python -m xpseq.tour") == 2
    assert capsys.readouterr().err.startswith("python -m xpseq.tour: error: there is no "
                                              "lesson 999")


@pytest.mark.parametrize("how, name", [
    (["scripts/autodiff_tour.py"], "autodiff_tour.py"),
    (["-m", "xpseq.tour"], "python -m xpseq.tour"),
])
def test_the_tour_run_directly_names_itself(how, name):
    done = subprocess.run([sys.executable, *how, "--lesson", "999"], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"{name}: error: there is no lesson 999"), done.stderr


# ------------------------------------------------------------------------ the help


def help_of(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        cli.main([*argv, "--help"])
    assert exit_.value.code == 0
    return squeezed(capsys.readouterr().out)


def test_the_demo_help_says_it_trains_its_three_models(capsys):
    from xpseq.app import demo

    text = help_of(["demo"], capsys)
    assert "trains three models" in text and not re.search(r"\btwo\b", text)
    assert "the plain seq2seq baseline (an LSTM without attention), the attention LSTM " \
           "(Luong general attention) and a small Transformer" in text
    assert "folder for the PNGs and the three checkpoints" in text
    # ... the models the demo trains: its names for them in the source.
    source = pathlib.Path(demo.__file__).read_text(encoding="utf-8")
    for name in ('"attention": ("rnn"', '"seq2seq": ("rnn"', '"transformer": ("transformer"'):
        assert name in source
    assert 'attention="general"' in source and 'attention="none"' in source
    listing = help_of([], capsys)
    assert "demo train seq2seq, attention and a Transformer on the toy task" in listing


def test_only_the_commands_that_print_n_best_take_n_best(capsys):
    assert "--n-best N" in help_of(["translate"], capsys)
    assert "--n-best N" in help_of(["g2p"], capsys)
    for command in (["evaluate"], ["heatmap"]):
        assert "--n-best" not in help_of(command, capsys)
    err = refused(["heatmap", "m.safetensors", "the cat", "--n-best", "2"], capsys)
    assert "unrecognized arguments: --n-best" in err


def test_the_heatmap_help_says_the_png_needs_png(capsys):
    assert "in the terminal (and as a PNG with --png)" in help_of([], capsys)
    assert "with --png as an image too" in help_of(["heatmap"], capsys)


def test_train_has_a_description(capsys):
    text = help_of(["train"], capsys)
    assert "Train an rnn or a Transformer (--model) on the toy task, a TSV corpus or the " \
           "CMU dictionary (--task)" in text
