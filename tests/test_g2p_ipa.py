"""IPA output: the ARPAbet table, the stress marks at the start of the syllable (maximal
onset), and --ipa / ipa=True through the library and the command. The expected
transcriptions are General American ones as dictionaries print them (Wiktionary's US
pronunciations, with ɹ for r as the table says)."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

import pytest
from helpers import assert_ok, show

from xpseq import g2p
from xpseq.g2p.ipa import IPA, text_to_ipa, to_ipa

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("phones, expected", [
    ("HH AH0 L OW1", "həˈloʊ"),                      # hello
    ("AH0 B AW1 T", "əˈbaʊt"),                       # about
    ("IH0 K S T R IY1 M", "ɪkˈstɹim"),               # extreme: s t r begins the syllable
    ("IH2 N F ER0 M EY1 SH AH0 N", "ˌɪnfɚˈmeɪʃən"),  # information
    ("S IH1 NG ER0", "ˈsɪŋɚ"),                       # singer: ŋ begins no syllable
    ("K AE1 T", "ˈkæt"),                             # cat
    ("B ER1 D", "ˈbɝd"),                             # bird
    ("CH EH1 R IY0", "ˈtʃɛɹi"),                      # cherry
    ("JH AH1 JH", "ˈdʒʌdʒ"),                         # judge
    ("DH AH0", "ðə"),                                # the: no stress, no mark
    ("AH0 P L AY1", "əˈplaɪ"),                       # apply: p l is an onset
    ("AE1 T L AH0 S", "ˈætləs"),                     # atlas: t l is not
])
def test_words_in_ipa(phones, expected):
    assert to_ipa(phones.split()) == expected


def test_the_table_covers_arpabet_and_no_stress_drops_the_marks():
    assert len(IPA) == 39                               # 15 vowels, 24 consonants
    assert to_ipa("IH2 N F ER0 M EY1 SH AH0 N".split(), stress=False) == "ɪnfɚmeɪʃən"
    assert to_ipa("HH AH L OW".split()) == "hʌloʊ"      # no digits: AH is ʌ, no mark
    assert to_ipa([]) == ""
    assert text_to_ipa(["AY1", " ", "S", "IY1", " ", "?"]) == ["ˈaɪ", " ", "ˈsi", " ", "?"]


@pytest.mark.parametrize("bad, error", [("HH AH0", TypeError), (["XX"], ValueError),
                                        (["K3"], ValueError), (["K1"], ValueError),
                                        ([7], TypeError)])
def test_bad_phones_are_refused(bad, error):
    with pytest.raises(error, match="to_ipa"):
        to_ipa(bad)


def test_ipa_through_the_library():
    model = g2p.load(backend="numpy")
    assert model.pronounce(["hello", "read"], ipa=True) == ["həˈloʊ", "ˈɹɛd"]
    assert model.pronounce(["read"], beam=2, n_best=2, ipa=True) == [["ˈɹɛd", "ˈɹid"]]
    assert model.pronounce(["hello"], ipa=True, stress=False) == ["həloʊ"]
    assert list(model.pronounce_iter(["cat"], ipa=True)) == ["ˈkæt"]
    assert "".join(model.phonemize("Hello, you.", ipa=True)) == "həˈloʊ , ˈju ."
    with pytest.raises(TypeError, match="ipa must be"):
        model.pronounce(["hello"], ipa="yes")


def xpseq(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xpseq", *args], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, **kw)


def test_ipa_and_sentence_final_abbreviations_on_the_command_line():
    done = xpseq("g2p", "--backend", "numpy", "--ipa", "hello", "cat")
    assert_ok(done)
    assert done.stdout == "hello\thəˈloʊ\ncat\tˈkæt\n", show(done)
    done = xpseq("g2p", "--backend", "numpy", "--text", "--ipa", "Meet at 9 a.m. Then go.")
    assert_ok(done)
    assert done.stdout == "ˈmit ˈæt ˈnaɪn ˌeɪˈɛm . ˈðɛn ˈɡoʊ .\n", show(done)
    done = xpseq("g2p", "--backend", "numpy", "--text", "Open at 9 a.m.")
    assert done.stdout.rstrip().endswith("EY2 EH1 M | ."), show(done)


def test_a_terminal_with_no_input_gets_a_hint():
    """`xpseq g2p` reading a terminal says how to end the input (it would otherwise wait
    in silence); a pipe gets no hint."""
    # A pseudo-terminal's other end as the child's input and output, started without
    # running Python in the forked child (pty.fork would: JAX, loaded in this process by
    # other tests, warns that a fork of a multithreaded process may deadlock).
    fd, terminal = pty.openpty()
    child = subprocess.Popen([sys.executable, "-m", "xpseq", "g2p", "--backend", "numpy"],
                             stdin=terminal, stdout=terminal, stderr=terminal)
    os.close(terminal)
    output = b""
    try:
        while b"Ctrl-D" not in output:
            try:
                chunk = os.read(fd, 1024)
            except OSError:                             # the child closed the terminal
                break
            if not chunk:
                break
            output += chunk
        os.write(fd, b"\x04")                           # end of input
        child.wait(timeout=300)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        os.close(fd)
    assert b"reading words from the terminal" in output and b"Ctrl-D" in output
    piped = xpseq("g2p", "--backend", "numpy", input="cat\n")
    assert "terminal" not in piped.stderr and piped.stdout == "cat\tK AE1 T\n", show(piped)
