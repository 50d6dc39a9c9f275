"""G2P raises its warnings in one place, at the caller's line: whichever door was used (a
method, the module's function, a generator's consumer, the text front end), the warning's
frame is the caller's, never one of xpseq's."""

from __future__ import annotations

import warnings

from xpseq import g2p
from xpseq.g2p import notes
from xpseq.g2p.text import ControlCharacterWarning, normalize, normalize_noting

LONG = "b" * (g2p.MAX_WORD_LENGTH + 1)


def caught(call):
    with warnings.catch_warnings(record=True) as found:
        warnings.simplefilter("always")
        result = call()
    return result, found


def test_every_door_warns_at_the_callers_line():
    model = g2p.load(backend="numpy")
    doors = {
        "method": lambda: model.pronounce([LONG], lookup=False),
        "function": lambda: g2p.pronounce([LONG], backend="numpy", lookup=False),
        "generator": lambda: list(model.pronounce_iter(iter([LONG]), lookup=False)),
        "text": lambda: model.phonemize(f"say {LONG} and \x07 stop"),
        "normalize": lambda: normalize("a \x07 b"),
    }
    for name, call in doors.items():
        _, found = caught(call)
        assert found, name
        assert {w.filename for w in found} == {__file__}, (name, [w.filename for w in found])
        kinds = {w.category for w in found}
        assert kinds <= {g2p.LongWordWarning, ControlCharacterWarning}, (name, kinds)
    _, found = caught(doors["text"])
    assert {w.category for w in found} == {g2p.LongWordWarning, ControlCharacterWarning}


def test_the_notes_are_returned_by_the_inner_calls_not_raised():
    model = g2p.load(backend="numpy")
    from xpseq.search import options_for

    (answers, noted), found = caught(lambda: model.answer([LONG, "cat"],
                                                         options_for(1, 1, caller="t"), 1,
                                                         True, True))
    assert found == [] and answers[0] == [] and answers[1]
    assert [type(n) for n in noted] == [g2p.LongWordWarning]
    (tokens, noted), found = caught(lambda: normalize_noting("a \x07 b"))
    assert found == [] and tokens == ["a", "b"]
    assert [type(n) for n in noted] == [ControlCharacterWarning]
    assert notes.outside_level() >= 1


def test_every_door_hands_its_notes_to_the_caller_instead_when_asked():
    """``notes=`` takes each note (the same ``Warning`` it would raise) and no warning is
    raised; without it, warnings as before."""
    model = g2p.load(backend="numpy")
    doors = {
        "method": lambda take: model.pronounce([LONG, "-"], lookup=False, notes=take),
        "function": lambda take: g2p.pronounce([LONG, "-"], backend="numpy", lookup=False,
                                               notes=take),
        "generator": lambda take: list(model.pronounce_iter(iter([LONG, "-"]), lookup=False,
                                                            notes=take)),
        "function generator": lambda take: list(g2p.pronounce_iter(
            iter([LONG, "-"]), backend="numpy", lookup=False, notes=take)),
        "text": lambda take: model.phonemize(f"say {LONG} and \x07 stop", notes=take),
        "lines": lambda take: model.phonemize_lines([f"say {LONG}"], notes=take),
        "function text": lambda take: g2p.phonemize(f"say {LONG}", backend="numpy",
                                                    notes=take),
    }
    for name, call in doors.items():
        taken: list[Warning] = []
        answer, found = caught(lambda: call(taken.append))
        assert found == [], (name, found)
        assert taken and any(isinstance(n, g2p.LongWordWarning) for n in taken), name
        warned, found = caught(lambda: call(None))                    # the default
        assert warned == answer, name
        assert [(w.category, str(w.message)) for w in found] == [(type(n), str(n))
                                                                for n in taken], name
