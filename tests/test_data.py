"""The data layer: the toy English -> Zhoric task, vocabularies, TSV corpora, and batches
made from the encoded toy data."""

from __future__ import annotations

import collections
import re

import numpy as np
import pytest

from xpseq.data import BOS_ID, EOS_ID, PAD_ID, UNK_ID, ToyDataset, Vocab, make_batches
from xpseq.data import toy as zh_toy
from xpseq.data.toy import generate_pairs, make_dataset
from xpseq.data.toy import translate as toy_translate
from xpseq.data.tsv import read_parallel_tsv, write_parallel_tsv

QUICK = dict(n_train=400, n_dev=60, n_test_per_bucket=25)


@pytest.fixture(scope="module")
def full() -> ToyDataset:
    return make_dataset(seed=0)                     # the default sizes (about 0.2 s)


def english_set(pairs) -> set[tuple[str, ...]]:
    return {tuple(en) for en, _ in pairs}


def n_phrases(english: list[str]) -> int:
    return sum(w in zh_toy.PREPOSITIONS for w in english)


# --------------------------------------------------------------------------- the toy task

# Written by hand from the grammar in the module docstring, not produced by the code.
HAND_TRANSLATIONS = [
    ("the cat sees the dog",
     "pelu zo hanto vimet"),
    ("the old farmer sees the red cat near the house behind the small tree",
     "tovak gesh zo pelu varu kebra ki olim mibi dava vimet"),
    ("the brave soldier carries the stone under the bridge beside the river above the green "
     "field around the tower",
     "vettar karvi zo kilpa kovin soti nashu pesu mubo velm ulo dastel gulu bolgat"),
]


@pytest.mark.parametrize("english, zhoric", HAND_TRANSLATIONS)
def test_translate_matches_hand_written_zhoric(english, zhoric):
    assert toy_translate(english.split()) == zhoric.split()


@pytest.mark.parametrize("english, message", [
    ("the blue cat sees the dog",
     r"english_tokens\[1\] = 'blue': expected an adjective or a noun, found a word not in"),
    ("The cat sees the dog", r"english_tokens\[0\] = 'The'.*must be lowercase"),
    ("the cat the dog", r"english_tokens\[2\] = 'the': expected a verb"),
    ("the cat sees dog", r"english_tokens\[3\] = 'dog': expected 'the'"),
    ("the cat sees the dog cat", r"english_tokens\[5\] = 'cat': expected a preposition"),
    ("the cat sees the dog near", r"ends after 6 words, expected 'the'"),
    ("", r"ends after 0 words"),
])
def test_translate_rejects_ungrammatical_input_naming_the_position(english, message):
    with pytest.raises(ValueError, match=message):
        toy_translate(english.split())


def test_translate_rejects_a_string_and_non_string_tokens():
    with pytest.raises(TypeError, match="not a string"):
        toy_translate("the cat sees the dog")
    with pytest.raises(TypeError, match=r"english_tokens\[1\] is int"):
        toy_translate(["the", 3])


def test_lexicon_sizes_and_disjoint_languages():
    assert (len(zh_toy.NOUNS), len(zh_toy.ADJECTIVES), len(zh_toy.VERBS), len(zh_toy.PREPOSITIONS)) == (
        28, 12, 12, 8)
    assert len(zh_toy.ENGLISH_WORDS) == len(zh_toy.ZHORIC_WORDS) == 61
    assert not zh_toy.ENGLISH_WORDS & zh_toy.ZHORIC_WORDS
    for table in (zh_toy.NOUNS, zh_toy.ADJECTIVES, zh_toy.VERBS, zh_toy.PREPOSITIONS):
        assert len(set(table.values())) == len(table)            # one-to-one


def test_same_seed_same_data_different_seed_different_data():
    a, b, c = make_dataset(**QUICK, seed=3), make_dataset(**QUICK, seed=3), make_dataset(
        **QUICK, seed=4)
    assert a == b
    assert a.train != c.train and a.dev != c.dev
    assert all(a.test[k] != c.test[k] for k in range(1, 5))
    assert generate_pairs(50, phrases=range(4), seed=7) == generate_pairs(
        50, phrases=range(4), seed=7)
    assert generate_pairs(50, phrases=range(4), seed=7) != generate_pairs(
        50, phrases=range(4), seed=8)


def test_quick_sizes_give_a_prefix_of_the_same_test_buckets(full):
    quick = make_dataset(**QUICK, seed=0)
    assert (len(quick.train), len(quick.dev)) == (400, 60)
    for k in range(5):
        assert quick.test[k] == full.test[k][:25]


def test_sizes_and_phrase_counts_per_split(full):
    assert (len(full.train), len(full.dev)) == (12000, 500)
    assert sorted(full.test) == [0, 1, 2, 3, 4]
    for k, pairs in full.test.items():
        assert len(pairs) == 300
        for en, zh in pairs:
            assert n_phrases(en) == k
            assert sum(w in zh_toy.PREPOSITIONS.values() for w in zh) == k
            assert 5 + 3 * k <= len(en) <= 7 + 3 * k
    for split in (full.train, full.dev):
        counts = collections.Counter(n_phrases(en) for en, _ in split)
        assert set(counts) == {0, 1, 2, 3}
        assert min(counts.values()) > len(split) / 4 * 0.8       # roughly uniform


def test_generate_pairs_phrases_argument():
    assert {n_phrases(en) for en, _ in generate_pairs(40, phrases=2, seed=0)} == {2}
    assert {n_phrases(en) for en, _ in generate_pairs(80, phrases=[1, 4], seed=0)} == {1, 4}
    assert generate_pairs(0, phrases=1, seed=0) == []
    for bad, message in [({"phrases": []}, "phrases is empty"),
                         ({"phrases": [1, -1]}, "non-negative ints"),
                         ({"phrases": "2"}, "int or a sequence"),
                         ({"phrases": 1, "seed": -1}, "seed must be a non-negative int")]:
        with pytest.raises(ValueError, match=message):
            generate_pairs(3, **{"seed": 0, **bad})
    with pytest.raises(ValueError, match="n must be a non-negative int"):
        generate_pairs(-1, phrases=1, seed=0)


def test_splits_are_disjoint_by_english_sentence(full):
    train, dev = english_set(full.train), english_set(full.dev)
    tests = [english_set(full.test[k]) for k in range(5)]
    assert len(train) == len(full.train) and len(dev) == len(full.dev)   # no repeats inside
    assert all(len(t) == 300 for t in tests)
    assert not train & dev
    for t in tests:
        assert not t & train and not t & dev


def test_bucket_4_is_longer_than_every_training_sentence(full):
    seen = full.train + full.dev
    assert min(len(en) for en, _ in full.test[4]) > max(len(en) for en, _ in seen)
    assert min(len(zh) for _, zh in full.test[4]) >= max(len(zh) for _, zh in seen)
    assert max(n_phrases(en) for en, _ in seen) == 3


def test_every_generated_pair_is_its_translation(full):
    """translate(en) == zh, and independently of translate: the verb goes last, one subject
    marker, the determiners go, and the content words map one to one."""
    lexicon = {**zh_toy.NOUNS, **zh_toy.ADJECTIVES, **zh_toy.VERBS, **zh_toy.PREPOSITIONS}
    pairs = full.train + full.dev + [p for k in range(5) for p in full.test[k]]
    for en, zh in pairs:
        assert toy_translate(en) == zh
        k = n_phrases(en)
        verb = en[3] if en[1] in zh_toy.ADJECTIVES else en[2]
        assert zh[-1] == zh_toy.VERBS[verb] and zh.count("zo") == 1
        assert len(zh) == len(en) - (2 + k) + 1
        assert collections.Counter(zh) - collections.Counter(["zo"]) == collections.Counter(
            lexicon[w] for w in en if w != "the")


def test_generated_vocabularies_are_the_lexicon_and_disjoint(full):
    english = {w for en, _ in full.train for w in en}
    zhoric = {w for _, zh in full.train for w in zh}
    assert english == zh_toy.ENGLISH_WORDS and zhoric == zh_toy.ZHORIC_WORDS
    assert not english & zhoric
    assert all(w.islower() and w.isalpha() for w in english | zhoric)


def test_make_dataset_rejects_bad_sizes():
    with pytest.raises(ValueError, match="n_dev must be a non-negative int"):
        make_dataset(n_dev=-1)
    with pytest.raises(ValueError, match="seed must be a non-negative int"):
        make_dataset(seed=1.5)


# --------------------------------------------------------------------------- Vocab

def test_vocab_reserved_ids_and_frequency_order():
    v = Vocab.build([["b", "a", "b"], ["c", "a"], ["d"]])
    assert v.to_list() == ["<pad>", "<s>", "</s>", "<unk>", "a", "b", "c", "d"]
    assert [v.id(t) for t in ("<pad>", "<s>", "</s>", "<unk>")] == [PAD_ID, BOS_ID, EOS_ID,
                                                                      UNK_ID]
    assert len(v) == 8 and "a" in v and "z" not in v
    assert Vocab.build([["c", "a"], ["d"], ["b", "a", "b"]]) == v    # input order irrelevant
    assert Vocab.build([["b", "a", "b"], ["c", "a"]], min_count=2).to_list()[4:] == ["a", "b"]
    assert Vocab.build([["z", "z", "y"]]).to_list()[4:] == ["z", "y"]    # count before alphabet


def test_vocab_encode_decode_round_trip_and_unknowns():
    v = Vocab.build([["the", "cat", "sees", "the", "dog"]])
    ids = v.encode(["the", "dog", "sees", "the", "cat"], add_eos=True)
    assert ids[-1] == EOS_ID and all(i >= 4 for i in ids[:-1])
    assert v.decode(ids) == ["the", "dog", "sees", "the", "cat"]
    assert v.encode(["the", "zebra"]) == [v.id("the"), UNK_ID]
    assert v.id("zebra") == UNK_ID
    assert v.decode(v.encode(["zebra", "cat"])) == ["<unk>", "cat"]
    cat = v.id("cat")
    assert v.decode([BOS_ID, cat, EOS_ID, cat, PAD_ID]) == ["cat"]          # stops at </s>
    assert v.decode(np.array([cat, EOS_ID, cat, PAD_ID]), stop_at_eos=False) == ["cat", "cat"]
    assert v.decode([BOS_ID, cat, EOS_ID, cat], skip_special=False) == ["<s>", "cat"]


def test_vocab_checkpoint_round_trip_and_errors():
    v = Vocab.build([["x", "y", "y"]])
    assert Vocab.from_list(v.to_list()) == v
    assert Vocab.from_list(v.to_list()) != Vocab.build([["x", "y"]])       # other order
    with pytest.raises(ValueError, match="first four tokens must be"):
        Vocab.from_list(["<s>", "<pad>", "</s>", "<unk>", "x"])
    with pytest.raises(ValueError, match="'x' appears twice"):
        Vocab.from_list(["<pad>", "<s>", "</s>", "<unk>", "x", "x"])
    with pytest.raises(IndexError, match="id 6 is out of range for a vocabulary of size 6"):
        v.token(6)
    with pytest.raises(IndexError, match="id -1 is out of range"):
        v.decode([4, -1])
    with pytest.raises(TypeError, match="sequence 1: token 0 is int"):
        Vocab.build([["a"], [5]])
    with pytest.raises(TypeError, match="sequence 0: expected a sequence of tokens"):
        Vocab.build(["the cat"])
    with pytest.raises(TypeError, match="Vocab.encode: expected a sequence of tokens"):
        v.encode("xy")
    with pytest.raises(ValueError, match="min_count must be a positive int"):
        Vocab.build([["a"]], min_count=0)


# --------------------------------------------------------------------------- TSV

def test_tsv_round_trip_in_word_mode(tmp_path, full):
    path = tmp_path / "zh_toy.tsv"
    pairs = full.dev[:50]
    assert write_parallel_tsv(path, pairs) == 50
    assert path.read_text(encoding="utf-8").splitlines()[0] == (
        " ".join(pairs[0][0]) + "\t" + " ".join(pairs[0][1]))
    assert read_parallel_tsv(path) == pairs


def test_tsv_skips_blank_lines_crlf_and_bom(tmp_path):
    path = tmp_path / "c.tsv"
    path.write_bytes("\ufeffa  b\tc\r\n\n   \r\nd\t e f \n".encode("utf-8"))
    assert read_parallel_tsv(path) == [(["a", "b"], ["c"]), (["d"], ["e", "f"])]


def test_tsv_char_mode(tmp_path):
    path = tmp_path / "zh.tsv"
    path.write_text("猫 吃鱼\tthe cat eats fish\nhello\tHH AH0 L OW1\n", encoding="utf-8")
    assert read_parallel_tsv(path, tokens="char") == [     # a space between words: "▁"
        (["猫", "▁", "吃", "鱼"], list("the▁cat▁eats▁fish")),
        (list("hello"), list("HH▁AH0▁L▁OW1"))]
    assert read_parallel_tsv(path, tokens=("char", "word"))[1] == (
        list("hello"), ["HH", "AH0", "L", "OW1"])
    out = tmp_path / "out.tsv"
    write_parallel_tsv(out, [(["猫", "吃"], ["c", "a", "t"])], tokens="char")
    assert out.read_text(encoding="utf-8") == "猫吃\tcat\n"
    assert read_parallel_tsv(out, tokens="char") == [(["猫", "吃"], ["c", "a", "t"])]


@pytest.mark.parametrize("bad_line, problem", [
    ("no tab here", "expected source<TAB>target, found no tab"),
    ("a\tb\tc", "expected source<TAB>target, found 2 tabs"),
    ("a\tb\tc\td", "expected source<TAB>target, found 3 tabs"),
    ("  \tb", "the source side is empty"),
    ("a\t  ", "the target side is empty"),
])
def test_tsv_malformed_line_names_file_and_line(tmp_path, bad_line, problem):
    path = tmp_path / "corpus.tsv"
    path.write_text(f"x\ty\n\nz\tw\n{bad_line}\nq\tr\n", encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(f"{path}:4: {problem}")):
        read_parallel_tsv(path)


def test_tsv_bad_utf8_missing_file_and_bad_mode(tmp_path):
    path = tmp_path / "latin1.tsv"
    path.write_bytes(b"ok\tfine\ncaf\xe9\tcoffee\n")
    with pytest.raises(ValueError, match=re.escape(f"{path}:2: not valid UTF-8")):
        read_parallel_tsv(path)
    missing = tmp_path / "nowhere.tsv"
    with pytest.raises(FileNotFoundError, match="nowhere.tsv"):
        read_parallel_tsv(missing)
    with pytest.raises(ValueError, match="tokens must be 'word', 'char'"):
        read_parallel_tsv(path, tokens="bytes")
    with pytest.raises(ValueError, match="^read_parallel_tsv: tokens: a 'bpe' side needs its "
                                         "trained tokenizer"):
        read_parallel_tsv(path, tokens="bpe")
    with pytest.raises(ValueError, match="tokens must be 'word', 'char'"):
        write_parallel_tsv(tmp_path / "w.tsv", [(["a"], ["b"])], tokens="chars")
    with pytest.raises(ValueError, match=r"pairs\[1\] target is empty"):
        write_parallel_tsv(tmp_path / "w.tsv", [(["a"], ["b"]), (["a"], [])])
    with pytest.raises(ValueError, match=r"pairs\[0\] source: token 1 'b c' is empty or holds"):
        write_parallel_tsv(tmp_path / "w.tsv", [(["a", "b c"], ["b"])])
    assert not (tmp_path / "w.tsv").exists()                      # nothing half-written


# --------------------------------------------------------------------------- batches

def test_make_batches_over_the_encoded_toy_data(full):
    src_vocab = Vocab.build(en for en, _ in full.train)
    tgt_vocab = Vocab.build(zh for _, zh in full.train)
    assert len(src_vocab) == len(tgt_vocab) == 4 + 61
    pairs = full.dev[:200] + full.test[4][:40]
    encoded = [(src_vocab.encode(en, add_eos=True), tgt_vocab.encode(zh)) for en, zh in pairs]
    assert all(UNK_ID not in s and UNK_ID not in t for s, t in encoded)
    batches = make_batches(encoded, batch_size=32, bucket=8)
    assert sum(len(b["src_len"]) for b in batches) == len(pairs)
    decoded = []
    for b in batches:
        assert b["src"].shape[1] % 8 == 0 and b["tgt_in"].shape[1] % 8 == 0
        assert b["tgt_in"].shape == b["tgt_out"].shape
        assert b["src"].shape[0] == b["tgt_in"].shape[0] <= 32
        for row in range(b["src"].shape[0]):
            n = int(b["src_len"][row])
            assert b["src"][row, n - 1] == EOS_ID
            decoded.append((src_vocab.decode(b["src"][row]), tgt_vocab.decode(b["tgt_out"][row])))
    assert sorted(decoded) == sorted(pairs)
    assert max(b["src"].shape[1] for b in batches) == 24          # 17-19 words + </s>


def test_package_exports():
    import xpseq.data as data

    assert data.toy_translate is zh_toy.translate and data.make_dataset is make_dataset
    assert data.generate_pairs is generate_pairs and data.ToyDataset is ToyDataset
    assert data.Vocab is Vocab
    assert (data.read_parallel_tsv, data.write_parallel_tsv) == (read_parallel_tsv,
                                                                 write_parallel_tsv)
    assert {"make_dataset", "toy_translate", "Vocab", "read_parallel_tsv"} <= set(data.__all__)


def test_batches_by_token_count():
    rng = np.random.default_rng(3)
    pairs = [([4] * int(n) + [2], [5] * int(m))
             for n, m in zip(rng.integers(1, 30, 300), rng.integers(1, 30, 300))]
    pairs.append(([4] * 90 + [2], [5] * 3))                    # longer than max_tokens alone
    batches = make_batches(pairs, 12, bucket=4, max_tokens=256)
    seen = np.sort(np.concatenate([b["index"] for b in batches]))
    assert seen.tolist() == list(range(len(pairs)))             # every pair, once
    for b in batches:
        rows, width = b["src"].shape[0], max(b["src"].shape[1], b["tgt_in"].shape[1])
        assert rows <= 12                                       # batch_size still caps
        assert rows * width <= 256 or rows == 1, (rows, width)
    assert any(b["src"].shape == (1, 92) for b in batches)
    sizes = [b["src"].shape[0] for b in batches]
    assert max(sizes) > 2 * min(sizes)                          # short ones come many to a batch
    with pytest.raises(ValueError, match="max_tokens must be a positive int"):
        make_batches(pairs, 12, max_tokens=0)


def _rows(batch) -> list:
    """A batch's real rows as ``(index, source, target)`` with the padding cut off."""
    return [(int(i), batch["src"][r, :int(batch["src_len"][r])].tolist(),
             batch["tgt_out"][r][batch["tgt_out"][r] != PAD_ID].tolist())
            for r, i in enumerate(batch["index"]) if i >= 0]


@pytest.mark.parametrize("shapes", [1, 2, 3])
@pytest.mark.parametrize("max_tokens", [None, 300])
def test_shapes_bounds_the_batch_shapes_of_an_epoch(full, shapes, max_tokens):
    vocab = Vocab.build(en for en, _ in full.train)
    zh = Vocab.build(z for _, z in full.train)
    encoded = [(vocab.encode(en, add_eos=True), zh.encode(z)) for en, z in full.train[:3000]]
    free = make_batches(encoded, 64, bucket=8, max_tokens=max_tokens)
    bounded = make_batches(encoded, 64, bucket=8, max_tokens=max_tokens, shapes=shapes)
    seen = {b["src"].shape + b["tgt_in"].shape[1:] for b in bounded}
    assert len({b["src"].shape + b["tgt_in"].shape[1:] for b in free}) > 3
    assert len(seen) <= shapes
    # The same sentences in the same batches, only padded further: longer, or with empty
    # rows (pad source of length 1, pad targets, index -1) to reach the shape's B.
    assert len(bounded) == len(free)
    for f, b in zip(free, bounded):
        assert _rows(f) == _rows(b)
        assert b["src"].shape[0] >= f["src"].shape[0] and b["src"].shape[1] >= f["src"].shape[1]
        assert b["tgt_in"].shape[1] >= f["tgt_in"].shape[1]
        empty = b["index"] < 0
        assert empty.sum() == b["src"].shape[0] - f["src"].shape[0]
        assert (b["src_len"][empty] == 1).all() and (b["src"][empty] == PAD_ID).all()
        assert (b["tgt_in"][empty] == PAD_ID).all() and (b["tgt_out"][empty] == PAD_ID).all()
    # As many shapes as the epoch has anyway: nothing changes.
    enough = make_batches(encoded, 64, bucket=8, max_tokens=max_tokens, shapes=len(seen) + 99)
    assert all(all((e[k] == f[k]).all() for k in f) for e, f in zip(enough, free))


def test_shapes_pads_the_fewest_positions():
    # Batches of lengths 8, 8, 16, 40: two shapes keep the long one apart (not 8 | 16, 40).
    pairs = [([4] * n + [2], [5] * (n - 1)) for n in (7, 7, 15, 39)]
    batches = make_batches(pairs, 1, bucket=8, shapes=2)
    assert [b["src"].shape[1] for b in batches] == [16, 16, 16, 40]
    with pytest.raises(ValueError, match="shapes must be a positive int"):
        make_batches(pairs, 1, shapes=0)


def test_rows_pads_each_batch_to_the_smallest_size_that_holds_it():
    # 300 sentences, batches of at most the largest size (256) and the rest: 256 and 44,
    # the 44 padded to 64 with empty rows (source length 1, index -1).
    pairs = [([4] * (1 + i % 5) + [3], [5]) for i in range(300)]
    batches = make_batches(pairs, 1000, bucket=8, rows=(64, 16, 256))
    assert [b["src"].shape[0] for b in batches] == [256, 64]
    last = batches[-1]
    assert np.sum(last["index"] >= 0) == 44 and np.all(last["src_len"][44:] == 1)
    assert np.all(last["tgt_out"][44:] == PAD_ID)
    real = sorted(int(i) for b in batches for i in b["index"] if i >= 0)
    assert real == list(range(300))
    assert [b["src"].shape[0] for b in make_batches(pairs[:3], 8, rows=(16,))] == [16]
    for bad in ((), (0, 16), "16", (2.5,)):
        with pytest.raises(ValueError, match="rows must be a non-empty sequence"):
            make_batches(pairs, 8, rows=bad)
