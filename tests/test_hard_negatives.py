"""Hard-negative mining: the rules on hand-built vectors (rank, margin, near copies, other positives, random fill,
dropping mislabelled pairs), and `bertkit mine-negatives` end to end on a tiny BERT: the file it writes trains."""

from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pytest

from bertkit.cli import main
from bertkit.data.embedding_data import read_embedding_file
from bertkit.data.hard_negatives import mine_hard_negatives
from bertkit.errors import InputError
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.modeling import BertModel

pytestmark = pytest.mark.usefixtures("one_thread")


def unit(rows) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float64)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


# one query, five documents; its positive is document 0 (score 0.8); margin 0.95 skips scores of 0.76 and more
QUERY = unit([[0.8, 0.6, 0.0]])
DOCS = unit([[1.0, 0.0, 0.0],     # 0 the positive: score 0.8
             [0.79, 0.61, 0.0],   # 1 scores 0.9999, above the positive: ranks first, skipped by the margin
             [0.97, 0.0, 0.243],  # 2 a near copy of the positive (cosine 0.97) scoring 0.776: skipped either way
             [0.0, 1.0, 0.0],     # 3 scores 0.6: hard
             [0.0, 0.0, 1.0]])    # 4 scores 0: easy


def test_the_highest_ranked_document_is_skipped_as_a_likely_positive_and_a_near_copy_too():
    mined = mine_hard_negatives(QUERY, DOCS, [0], candidates=3)  # the first three others: 1, 2, 3
    assert mined.negatives == [[3]] and mined.positive_rank.tolist() == [2] and mined.filled == 0
    # copies allowed, 2 is still over the margin (0.776 >= 0.76) ...
    assert mine_hard_negatives(QUERY, DOCS, [0], candidates=3, duplicate=1.0).negatives == [[3]]
    # ... and under a looser one (0.776 < 0.99 x 0.8 = 0.792) it is the hardest left
    assert mine_hard_negatives(QUERY, DOCS, [0], candidates=2, duplicate=1.0, margin=0.99).negatives == [[2]]
    assert mine_hard_negatives(QUERY, DOCS, [0], candidates=2).negatives[0] != [2]  # with the copy rule: not 2


def test_negatives_come_from_the_first_candidates_at_random_and_the_seed_fixes_them():
    draws = {tuple(mine_hard_negatives(QUERY, DOCS, [0], candidates=4, seed=seed).negatives[0]) for seed in range(20)}
    assert draws == {(3,), (4,)}  # the two the rules leave, both drawn
    assert mine_hard_negatives(QUERY, DOCS, [0], negatives=2, candidates=4).negatives == [[3, 4]]
    same = [mine_hard_negatives(QUERY, DOCS, [0], candidates=4, seed=7).negatives for _ in range(3)]
    assert same[0] == same[1] == same[2]
    # none of the first two is hard: one is drawn from the rest, never from what the rules skip
    filled = {mine_hard_negatives(QUERY, DOCS, [0], candidates=2, seed=seed).negatives[0][0] for seed in range(20)}
    assert filled == {3, 4}


def test_too_few_hard_candidates_are_filled_at_random_never_with_a_positive():
    docs = unit([[1, 0, 0], [0.99, 0.01, 0], [0, 0, 1], [0, 1, 0]])
    query = unit([[1, 0.001, 0]])
    # 1 is over the margin; only 2 and 3 remain, and both are in the first 3 candidates
    mined = mine_hard_negatives(query, docs, [0], negatives=3, candidates=3, related=[frozenset({0})])
    assert sorted(mined.negatives[0]) == [1, 2, 3] and mined.filled == 1
    # another positive of the same anchor is never a negative, hard or random
    mined = mine_hard_negatives(query, docs, [0], negatives=2, candidates=2, related=[frozenset({0, 1})])
    assert sorted(mined.negatives[0]) == [2, 3]


def test_pairs_whose_positive_ranks_low_are_dropped_when_asked():
    queries = unit([[1, 0, 0], [0, 0, 1]])
    docs = unit([[1, 0, 0], [0.9, 0.1, 0], [0, 1, 0.1], [0, 0.5, 0.5]])
    # query 1's positive is document 2 (score 0.0995), ranked second after document 3 (0.707)
    mined = mine_hard_negatives(queries, docs, [0, 2], max_positive_rank=1)
    assert mined.kept.tolist() == [True, False] and mined.negatives[1] == []
    assert mined.positive_rank.tolist() == [1, 2]


@pytest.mark.parametrize("given, message", [
    ({"negatives": 0}, "negatives must be at least 1"),
    ({"candidates": 1, "negatives": 2}, "candidates (1) must be at least negatives (2)"),
    ({"margin": 0.0}, "margin must be in (0, 1]"),
    ({"duplicate": 1.5}, "duplicate must be in (-1, 1]"),
    ({"max_positive_rank": 0}, "max_positive_rank must be at least 1"),
    ({"negatives": 5, "candidates": 5}, "the data has 5 distinct documents (positives), and a query's own positive "
                                         "is among them: fewer than the 5 others --negatives asks for a query"),
])
def test_settings_that_cannot_mine(given, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        mine_hard_negatives(QUERY, DOCS, [0], **given)


# ---- bertkit mine-negatives ----------------------------------------------------------------------

LETTERS = "abcdefghijklmnopqrstuvwxyz"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("mine")
    BertModel(BertConfig(vocab_size=5 + len(LETTERS), hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                         intermediate_size=64, max_position_embeddings=32)).save_pretrained(root / "model")
    (root / "model" / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *LETTERS]))
    rng = np.random.default_rng(0)
    rows = [(" ".join(rng.choice(list(LETTERS), 5)), " ".join(rng.choice(list(LETTERS), 6))) for _ in range(40)]
    rows.append((rows[0][0], " ".join(rng.choice(list(LETTERS), 6))))  # an anchor with two positives
    (root / "pairs.tsv").write_text("".join(f"{a}\t{p}\n" for a, p in rows))
    return root, rows


def mine(tiny, out, *more) -> int:
    root, _ = tiny
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return main(["mine-negatives", "--model", str(root / "model"), "--data", str(root / "pairs.tsv"),
                     "--out", str(out), "--no-progress", *more])


def test_the_command_writes_pairs_with_negatives_that_finetune_reads(tiny, tmp_path, capsys):
    root, rows = tiny
    assert mine(tiny, tmp_path / "hard.tsv", "--negatives", "2", "--candidates", "5") == 0
    said = capsys.readouterr().out
    assert "41 pairs, 41 distinct positives searched (cls vectors, " in said
    assert "wrote 41 rows with 2 negatives" in said
    assert "None tokens" not in said and re.search(r"cls vectors, \d+ tokens\)", said)  # the model's positions
    written = read_embedding_file(tmp_path / "hard.tsv")
    assert [example.texts[:2] for example in written] == rows
    positives_of_first = {rows[0][1], rows[-1][1]}
    for example in written:
        anchor, positive, *negatives = example.texts
        assert len(negatives) == 2 and positive not in negatives and len(set(negatives)) == 2
        assert all(n in {p for _, p in rows} for n in negatives)  # negatives are other pairs' positives
        if anchor == rows[0][0]:
            assert not positives_of_first & set(negatives)
    # the same seed writes the same file; JSONL keeps the texts as they are
    assert mine(tiny, tmp_path / "again.tsv", "--negatives", "2", "--candidates", "5") == 0
    assert (tmp_path / "again.tsv").read_text() == (tmp_path / "hard.tsv").read_text()
    assert mine(tiny, tmp_path / "hard.jsonl", "--negatives", "2", "--candidates", "5") == 0
    first = json.loads((tmp_path / "hard.jsonl").read_text().splitlines()[0])
    assert first["anchor"] == rows[0][0] and len(first["negative"]) == 2


def test_the_command_refuses_what_it_cannot_mine(tiny, tmp_path, capsys):
    root, _ = tiny
    assert mine(tiny, tmp_path / "x.tsv", "--negatives", "3", "--candidates", "2") == 2
    assert "--candidates 2 must be at least --negatives 3" in capsys.readouterr().err
    assert mine(tiny, tmp_path / "x.csv") == 2
    assert "give a file name ending in .tsv or .jsonl" in capsys.readouterr().err
    assert mine(tiny, root / "pairs.tsv", "--overwrite") == 2
    assert "is also --data, an input of this command" in capsys.readouterr().err
    assert mine(tiny, tmp_path / "a.tsv") == 0
    capsys.readouterr()
    assert main(["mine-negatives", "--model", str(root / "model"), "--data", str(tmp_path / "a.tsv"), "--out",
                 str(tmp_path / "b.tsv")]) == 2
    assert "already has negatives (1 a row)" in capsys.readouterr().err
