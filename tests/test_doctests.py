"""The examples in the docstrings of the main entry points run and print what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

# module -> the objects whose docstrings must hold an example (the entry points)
ENTRY_POINTS = {
    "xpseq.core.masking": ["masked_softmax"],
    "xpseq.core.attention": ["scaled_dot_product_attention"],
    "xpseq.backends": ["get"],
    "xpseq.g2p": ["pronounce", "phonemize"],
    "xpseq.g2p.text": ["normalize"],
    "xpseq.tasks.translator": ["Translator"],
}


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    tests = {t.name.rpartition(".")[2]: t for t in finder.find(module)}
    for entry in ENTRY_POINTS[name]:
        assert entry in tests and tests[entry].examples, f"{name}.{entry} has no example"
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for test in tests.values():
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted > 0
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed"
