"""The README's Python examples run as printed (the training one at smaller sizes) and
show what their comments say."""

from __future__ import annotations

import ast
import pathlib
import re

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def block(word: str) -> str:
    [found] = [b for b in BLOCKS if word in b]
    return found


def test_the_ten_lines_train_translate_save_and_load(tmp_path, monkeypatch, capsys):
    pytest.importorskip("jax")
    source = block("Translator.train")
    assert len(source.strip().splitlines()) <= 10
    small = source.replace("n_train=8000", "n_train=200").replace("epochs=10", "epochs=1")
    assert "n_train=200)" in small and "epochs=1," in small       # the sizes were found
    monkeypatch.chdir(tmp_path)
    names: dict = {}
    exec(compile(small, "README.md", "exec"), names)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("['") and len(printed) == 6
    assert [line.split(":")[0] for line in printed[1:]] == [f"{n} phrases" for n in range(5)]
    assert (tmp_path / "toy.safetensors").is_file()
    assert names["same"].backend.name == "jax"
    sentence = ["the old cat sees the dog near the house"]
    assert names["same"].translate(sentence) == names["model"].translate(sentence)


def shown_output(after: str) -> list[str]:
    """The ```text block the README shows after the code block holding ``after``."""
    text = (ROOT / "README.md").read_text()
    start = text.index(after)
    return re.search(r"```text\n(.*?)```", text[start:], re.S).group(1).splitlines()


def scores(lines: list[str]) -> list[tuple[float, float]]:
    found = [re.fullmatch(r"\d phrases: BLEU ([\d.]+), exact (\d+)%", line) for line in lines]
    assert all(found), lines
    return [(float(m.group(1)), float(m.group(2))) for m in found]


@pytest.mark.slow
def test_the_first_example_prints_what_the_readme_shows(tmp_path, monkeypatch, capsys):
    """Run as printed (about 45 s): the right translation and the scores the README shows,
    BLEU to 0.5 and exact match to 3 points (trained to convergence, they hold across
    BLAS kernels: scripts/readme_scores.py records them with AVX-512 and AVX2 kernels)."""
    pytest.importorskip("jax")
    from xpseq.data.toy import translate

    monkeypatch.chdir(tmp_path)
    exec(compile(block("Translator.train"), "README.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    shown = shown_output("Translator.train")
    sentence = "the old cat sees the dog near the house".split()
    assert printed[0] == shown[0] == str([" ".join(translate(sentence))])
    got, claimed = scores(printed[1:]), scores(shown[1:])
    assert len(got) == len(claimed) == 5
    for (bleu, exact), (shown_bleu, shown_exact) in zip(got, claimed):
        assert abs(bleu - shown_bleu) <= 0.5 and abs(exact - shown_exact) <= 3, (got, claimed)


def test_the_attention_example_gives_the_padded_key_zero_weight():
    pytest.importorskip("torch")
    names: dict = {}
    exec(compile(block("scaled_dot_product_attention"), "README.md", "exec"), names)
    weights = names["be"].to_numpy(names["weights"])[0, 0]
    np.testing.assert_allclose(weights, [0.422319, 0.155362, 0.422319, 0.0], atol=1e-6)
    assert weights[3] == 0.0


def test_the_pronunciation_example_prints_what_its_comment_says():
    """Every line of the README's pronunciation example whose comment is a value returns
    that value (the others' comments are words)."""
    source = block("g2p.pronounce")
    names: dict = {}
    exec(compile(source, "README.md", "exec"), names)
    checked = 0
    for line in source.strip().splitlines():
        call, _, comment = line.partition("#")
        try:
            value = ast.literal_eval(comment.strip())
        except (ValueError, SyntaxError):
            continue
        assert eval(call, names) == value, line
        checked += 1
    assert checked >= 2


def test_every_install_page_leads_with_the_cpu_route():
    """The route .ci/install-cpu checks (PyTorch's CPU build, then the extras) comes first
    on the README, the getting-started page and the home page, before any GPU advice."""
    first = "pip install torch --index-url https://download.pytorch.org/whl/cpu"
    second = 'pip install ".[jax,torch,g2p]"'
    for page in ("README.md", "docs/getting-started.md", "docs/index.md"):
        text = (ROOT / page).read_text()
        assert first in text and second in text, page
        assert text.index(first) < text.index(second), page
        gpu = text.find("jax[cuda12]")
        assert gpu == -1 or gpu > text.index(second), page
    assert first in (ROOT / ".ci" / "install-cpu").read_text()


SHELL_BLOCKS = re.findall(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def xpseq_lines() -> list[list[str]]:
    """Every ``xpseq ...`` command of the README's shell blocks, split as a shell would
    (its comment dropped; what a pipe feeds it left out)."""
    import shlex

    found = []
    for text in SHELL_BLOCKS:
        for line in text.splitlines():
            words = shlex.split(line, comments=True)
            if "|" in words:                                    # printf ... | xpseq g2p
                words = words[words.index("|") + 1:]
            if words and words[0] == "xpseq":
                found.append(words)
    return found


def test_every_command_line_of_the_readme_is_one_the_command_takes():
    """Each ``xpseq`` line the README prints parses as printed (options, choices, the
    subcommand's own checks), so none stops on a missing or mistyped option."""
    from xpseq.app import cli
    from xpseq.backends import usable_cpus

    lines = xpseq_lines()
    assert len(lines) >= 12, lines
    for words in lines:
        argv = [w for w in words[1:] if w != "<"]               # (a redirection)
        if argv == ["--version"] or ("--devices" in argv and usable_cpus() < 2):
            continue                          # (--devices 2 is refused on one CPU)
        try:
            args, extra = cli.build().parser.parse_known_args(argv)
        except SystemExit as err:
            raise AssertionError(f"the README's `{' '.join(words)}` is refused") from err
        more = getattr(args, "more", None)
        assert not extra or (more and not any(e.startswith("-") for e in extra)), words
        if getattr(args, "check", None) is not None:
            args.check(args)


def test_the_readme_pronunciation_lines_run_as_printed(tmp_path):
    """The G2P lines (all but the minutes-long ``evaluate --shipped``) run from a shell as
    printed, and answer what their comments say: the dictionary's pronunciation of a
    dictionary word, in ARPAbet and IPA."""
    import os
    import subprocess
    import sys

    bin_dir = pathlib.Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    block = next(b for b in SHELL_BLOCKS if "xpseq g2p" in b)
    outputs = {}
    for line in block.splitlines():
        if "xpseq g2p" not in line:
            continue
        done = subprocess.run(line, shell=True, cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, (line, done.stderr)
        outputs[line.split("  #")[0].strip()] = done.stdout
    assert "hello\tHH AH0 L OW1" in outputs["xpseq g2p hello Dijkstra xylophone"]
    assert outputs["xpseq g2p --ipa hello xylophone"].startswith("hello\thəˈloʊ\n")
    assert outputs["xpseq g2p --no-stress hello"] == "hello\tHH AH L OW\n"
    [piped] = [v for k, v in outputs.items() if k.startswith("printf")]
    assert piped.splitlines() == ["hello\tHH AH0 L OW1", "world\tW ER1 L D"]
    [text] = [v for k, v in outputs.items() if "--text" in k]
    assert len(text.splitlines()) == 1 and " | $" not in text and "D AA1 L ER0 Z" in text


def test_the_readme_reads_in_five_minutes():
    """At most 200 lines: the run history lives on the benchmarks page."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, len(lines)
    assert "Since run" not in "\n".join(lines)


def test_each_g2p_figure_comes_with_the_command_that_reproduces_it():
    """The shipped model's figures with stress kept are what ``xpseq evaluate --shipped``
    prints (the manifest's scores), those with stress removed what ``xpseq evaluate
    --shipped --no-stress`` prints (the stress-free model beside it, not the stressed
    model's answers with their digits dropped, which ``--shipped`` also prints); the
    README and the G2P guide give both commands."""
    from xpseq import g2p

    manifest = g2p.shipped()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    guide = (ROOT / "docs" / "guide" / "g2p.md").read_text(encoding="utf-8")
    greedy = manifest["scores"]["greedy"]
    plain = manifest["no_stress"]["scores"]["greedy"]
    assert (f"**word error rate of {greedy['wer']:.2f} % and a phone error rate of "
            f"{greedy['per']:.2f} %** with stress kept") in readme
    assert f"(`--no-stress`) **{plain['wer']:.2f} % / {plain['per']:.2f} %**" in readme
    assert f"{greedy['wer_no_stress']:.2f}" not in readme
    for text in (readme, guide):
        assert re.search(r"xpseq evaluate --shipped\s+#", text) or \
            "`xpseq evaluate --shipped`" in text
        assert "xpseq evaluate --shipped --no-stress" in text
    assert f"| greedy | {plain['per']:.2f} | {plain['wer']:.2f} |" in guide
