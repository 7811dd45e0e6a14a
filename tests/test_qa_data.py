"""Extractive QA data: SQuAD-format files, the named sets, windows over long contexts and their labels, checked
against transformers' overflowing tokens, run_qa.py's labelling and a direct check by characters."""

import json
import string
import warnings

import pytest
import transformers

from bertkit.data.qa import (
    MAX_QUERY_LENGTH,
    Answer,
    NotSquadError,
    QAExample,
    load_qa,
    qa_windows,
    read_squad,
    sample_file,
    token_span,
)
from bertkit.data.readers import DataWarning
from bertkit.tokenizer import BertTokenizer

WORDS = [f"w{i}" for i in range(60)] + ["who", "what", "when", "is", "the", "answer", "of"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *string.ascii_lowercase, *string.digits,
         *(f"##{c}" for c in string.ascii_lowercase + string.digits), *WORDS, ".", ",", "?", "é"]


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    """bertkit's tokenizer and transformers' fast one on the same small vocabulary."""
    folder = tmp_path_factory.mktemp("vocab")
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    return BertTokenizer.from_pretrained(folder), transformers.BertTokenizerFast(str(folder / "vocab.txt"))


def squad_file(tmp_path, qas, context="w1 w2 w3 w4 w5", name="data.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"version": "v2.0", "data": [{"title": "T", "paragraphs": [
        {"context": context, "qas": qas}]}]}), encoding="utf-8")
    return path


# ---- files ---------------------------------------------------------------------------------------

def test_squad_v1_and_v2_questions_are_read_with_offsets(tmp_path):
    path = squad_file(tmp_path, [
        {"id": "a", "question": "who is w3?", "answers": [{"text": "w3", "answer_start": 6}]},
        {"id": "b", "question": "what?", "answers": [], "is_impossible": True,
         "plausible_answers": [{"text": "w1", "answer_start": 0}]},
        {"id": "c", "question": " when? ", "answers": [{"text": "w4 w5", "answer_start": "9"},
                                                        {"text": "w5", "answer_start": 12}]}])
    a, b, c = read_squad(path)
    assert (a.id, a.question, a.answers, a.is_impossible, a.title) == ("a", "who is w3?", [Answer("w3", 6)], False, "T")
    assert (b.answers, b.is_impossible) == ([], True)
    assert c.question == "when?" and c.answers == [Answer("w4 w5", 9), Answer("w5", 12)]
    assert c.context[c.answers[0].start:c.answers[0].end] == "w4 w5"


def test_unusable_questions_are_skipped_and_counted_with_their_ids(tmp_path):
    path = squad_file(tmp_path, [
        {"id": "ok", "question": "q", "answers": [{"text": "w2", "answer_start": 3}]},
        {"id": "empty", "question": "  ", "answers": [{"text": "w2", "answer_start": 3}]},
        {"id": "offset", "question": "q", "answers": [{"text": "w2", "answer_start": 4}]},
        {"id": "bad", "question": "q", "answers": [{"answer_start": 3}]},
        {"id": "ok", "question": "again", "answers": [{"text": "w2", "answer_start": 3}]}])
    with pytest.warns(DataWarning, match=r"skipped 4 questions, kept 1: an empty question \(id empty\); an "
                                         r"answer_start that does not point at the answer in the context \(id "
                                         r"offset\); answers that are not .* \(id bad\); an id seen before \(id ok\)"):
        examples = read_squad(path)
    assert [e.id for e in examples] == ["ok"]
    with warnings.catch_warnings():  # for evaluation only the answer texts count, as in the official scripts
        warnings.simplefilter("ignore")
        kept = read_squad(path, need_offsets=False)
    assert [e.id for e in kept] == ["ok", "offset"]


def test_missing_fields_are_named_by_reason_and_id(tmp_path):
    path = tmp_path / "fields.json"
    path.write_text(json.dumps({"data": [{"paragraphs": [
        {"context": "w1 w2 w3", "qas": [
            {"id": "ok", "question": "q", "answers": [{"text": "w2", "answer_start": 3}]},
            {"id": "no-question", "answers": [{"text": "w2", "answer_start": 3}]},
            {"id": "no-answers", "question": "q"},
            {"id": "no-start", "question": "q", "answers": [{"text": "w2"}]},
            {"id": "no-text", "question": "q", "answers": [{"answer_start": 3}]},
            {"id": "empty-list", "question": "q", "answers": []}]},
        {"qas": [{"id": "no-context", "question": "q", "answers": [{"text": "w2", "answer_start": 3}]}]}]}]}),
        encoding="utf-8")
    with pytest.warns(DataWarning) as caught:
        examples = read_squad(path)
    assert [e.id for e in examples] == ["ok"]
    assert str(caught[0].message) == (
        f'{path}: skipped 6 questions, kept 1: no "question" (id no-question); no "answers", and not marked '
        'is_impossible (id no-answers); an answer without "answer_start" (id no-start); answers that are not a list '
        'of {text, answer_start} (id no-text); no answer, and not marked is_impossible (id empty-list); '
        'no "context" in its paragraph (id no-context)')
    with pytest.warns(DataWarning, match=r"skipped 5 questions, kept 2: .*"):  # evaluation needs no offsets
        kept = read_squad(path, need_offsets=False)
    assert [(e.id, e.answers) for e in kept] == [("ok", [Answer("w2", 3)]), ("no-start", [Answer("w2", -1)])]


def test_a_file_that_is_not_squad_json_is_named(tmp_path):
    (tmp_path / "lines.json").write_text('{"question": "q", "context": "c"}\n{"question": "r", "context": "d"}\n')
    with pytest.raises(NotSquadError, match="not SQuAD-format JSON: not JSON .*JSON Lines"):
        read_squad(tmp_path / "lines.json")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(NotSquadError, match=r"a top-level list; expected \{\"data\""):
        read_squad(tmp_path / "list.json")
    (tmp_path / "nodata.json").write_text('{"version": "1.1"}')
    with pytest.raises(NotSquadError, match=r"no \"data\" list \(keys: version\)"):
        read_squad(tmp_path / "nodata.json")
    (tmp_path / "noqas.json").write_text('{"data": [{"paragraphs": [{"context": "c"}]}]}')
    with pytest.raises(NotSquadError, match=r"data\[0\].paragraphs\[0\] has no \"qas\" list"):
        read_squad(tmp_path / "noqas.json")
    only_bad = squad_file(tmp_path, [{"id": "x", "question": "q", "answers": [{"text": "zz", "answer_start": 0}]}])
    with pytest.warns(DataWarning), pytest.raises(ValueError, match="has no usable questions"):
        read_squad(only_bad)


@pytest.mark.network
def test_the_named_sets_are_the_squad_excerpt_and_xquad(tmp_path):
    from conftest import fetch_or_skip

    fetch_or_skip("squad-excerpt")
    splits = load_qa("squad-excerpt")
    assert {k: len(v) for k, v in splits.items()} == {"train": 1027, "dev": 153}
    assert {e.title for e in splits["train"]} == {"University_of_Notre_Dame", "Beyoncé"}
    assert not {e.title for e in splits["train"]} & {e.title for e in splits["dev"]}  # SQuAD train vs dev articles
    first = splits["train"][0]
    assert (first.id, first.answers) == ("5733be284776f41900661182", [Answer("Saint Bernadette Soubirous", 515)])
    zh, en = load_qa("xquad-zh")["test"], load_qa("xquad-en")["test"]
    assert [e.id for e in zh] == [e.id for e in en] == [e.id for e in splits["dev"]]  # parallel: same questions
    assert (zh[0].question, zh[0].answers) == ("黑豹队的防守丢了多少分？", [Answer("308", 10)])
    for example in (*splits["train"], *zh):
        answer = example.answers[0]
        assert example.context[answer.start:answer.end] == answer.text
    cmrc = read_squad(sample_file("cmrc2018", "dev"))
    assert [len(e.answers) for e in cmrc] == [3, 3, 3]


# ---- windows -------------------------------------------------------------------------------------

def one_token_words(n):
    """A context of n words, one token each: word k spans characters [3k, 3k + 2) ("w0 w1 ...", for k < 10)."""
    return " ".join(f"w{k}" for k in range(n))


def answer_tokens(offsets, answer: Answer) -> list[int]:
    """The direct check: the tokens whose characters overlap the answer's, found by scanning them all."""
    return [k for k, (s, e) in enumerate(offsets) if s < answer.end and e > answer.start]


@pytest.mark.parametrize("max_length, doc_stride", [(16, 4), (20, 7), (12, 0), (384, 128)])
def test_windows_are_transformers_overflowing_tokens(tokenizers, max_length, doc_stride):
    ours, theirs = tokenizers
    examples = [QAExample("a", "who is w3?", " ".join(f"w{k % 60}" for k in range(50))),
                QAExample("b", "what", "w1 w2 ééé abcdef, w7"), QAExample("c", "w5 w6", "w9")]
    windows = qa_windows(examples, ours, max_length, doc_stride, labels=False)
    reference = theirs([e.question for e in examples], [e.context for e in examples], truncation="only_second",
                       max_length=max_length, stride=doc_stride, return_overflowing_tokens=True)
    assert [w.input_ids for w in windows] == reference["input_ids"]
    assert [w.token_type_ids for w in windows] == reference["token_type_ids"]
    assert [w.example for w in windows] == reference["overflow_to_sample_mapping"]


def test_labels_at_window_boundaries_past_the_first_window_and_across_two(tokenizers):
    """A one-token question and max_length 16 leave 12 context tokens per window; doc_stride 4 starts them at
    tokens 0, 8, 16, 24 of a 30-token context: windows [0, 12), [8, 20), [16, 28), [24, 30). Context token k sits
    at position k - first + 3 of a window ([CLS] question [SEP] first)."""
    tokenizer = tokenizers[0]
    context = " ".join(f"w{k}" for k in range(30))
    starts = {k: context.index(f"w{k}", 3 * k) for k in range(30)}

    def answer(first, last):
        return Answer(context[starts[first]:starts[last] + len(f"w{last}")], starts[first])

    cases = {"at the end of window 0, inside window 1": (answer(10, 11), [(13, 14), (5, 6), (0, 0), (0, 0)]),
             "across the end of window 0: whole only in window 1": (answer(11, 13), [(0, 0), (6, 8), (0, 0), (0, 0)]),
             "first token of window 2, last of window 1": (answer(16, 19), [(0, 0), (11, 14), (3, 6), (0, 0)]),
             "past the first window's max_length: only in window 3": (answer(28, 29), [(0, 0), (0, 0), (0, 0),
                                                                                       (7, 8)]),
             "longer than a window: in none": (answer(5, 17), [(0, 0)] * 4)}
    for name, (gold, expected) in cases.items():
        windows = qa_windows([QAExample("x", "who", context, [gold])], tokenizer, 16, 4)
        assert [len(w.offsets) for w in windows] == [12, 12, 12, 6]
        assert [(w.start_position, w.end_position) for w in windows] == expected, name
        for w in windows:  # the direct check: labelled exactly where every answer token lies in the window
            tokens = answer_tokens(w.offsets, gold)
            whole = len(tokens) == len(gold.text.split())
            assert (w.start_position, w.end_position) == ((tokens[0] + 3, tokens[-1] + 3) if whole else (0, 0))
            if whole:
                assert context[w.offsets[tokens[0]][0]:w.offsets[tokens[-1]][1]] == gold.text


def test_unanswerable_and_unlabelled_windows_point_at_cls(tokenizers):
    tokenizer = tokenizers[0]
    context = one_token_words(9)
    impossible = qa_windows([QAExample("x", "who", context, [], is_impossible=True)], tokenizer, 16, 4)
    unlabelled = qa_windows([QAExample("y", "who", context, [Answer("w2", 6)])], tokenizer, 16, 4, labels=False)
    labelled = qa_windows([QAExample("y", "who", context, [Answer("w2", 6)])], tokenizer, 16, 4)
    assert [(w.start_position, w.end_position) for w in impossible + unlabelled] == [(0, 0), (0, 0)]
    assert [(w.start_position, w.end_position) for w in labelled] == [(5, 5)]


def test_long_questions_are_cut_with_one_warning(tokenizers):
    question = " ".join(["w1"] * (MAX_QUERY_LENGTH + 5))
    with pytest.warns(DataWarning, match=f"1 of 1 questions are longer than {MAX_QUERY_LENGTH} tokens"):
        windows = qa_windows([QAExample("q", question, "w2 w3")], tokenizers[0], 100, 10)
    assert windows[0].context_start == MAX_QUERY_LENGTH + 2


def test_window_settings_that_leave_no_context_are_refused(tokenizers):
    example = [QAExample("q7", "who is w1 w2", "w1")]
    with pytest.raises(ValueError, match="max_length 7 leaves no room for the context: question 'q7' takes 4 tokens"):
        qa_windows(example, tokenizers[0], 7, 0)
    with pytest.raises(ValueError, match=r"doc_stride 3 must be .* less than .* \(3 = max_length 10 - 4 question "
                                         r"tokens - 3 special tokens, where question 'q7' takes 4 tokens\)"):
        qa_windows(example, tokenizers[0], 10, 3)
    with pytest.raises(ValueError, match=r"doc_stride 128 must be .* \(124 = max_length 128 - 1 question tokens"):
        qa_windows(example, tokenizers[0], 128, 128)


def test_token_span_finds_the_tokens_under_characters():
    offsets = [(0, 3), (4, 7), (7, 9), (11, 12)]
    assert token_span(offsets, 4, 9) == (1, 2)
    assert token_span(offsets, 5, 8) == (1, 2)      # inside tokens: the tokens holding those characters
    assert token_span(offsets, 3, 4) is None        # only the space between two tokens
    assert token_span(offsets, 9, 12) == (3, 3)


@pytest.mark.network
@pytest.mark.slow
def test_windows_and_labels_of_the_real_set_match_run_qa(tokenizers):
    """On all 1,027 training questions and MiniLM's tokenizer, the windows are transformers' token for token and
    the labels are run_qa.py's, except where run_qa.py starts the answer on the window's final [SEP] (its scan
    for the start runs onto [SEP], whose offsets are (0, 0), when the answer's first token is the window's last
    context token); there the label here is the answer's token (the direct check)."""
    from conftest import fetch_or_skip, model_dir_or_skip

    fetch_or_skip("squad-excerpt")
    path = model_dir_or_skip("all-MiniLM-L6-v2")
    examples = load_qa("squad-excerpt")["train"]
    ours, theirs = BertTokenizer.from_pretrained(path), transformers.BertTokenizerFast.from_pretrained(path)
    for max_length, doc_stride in ((384, 128), (128, 32)):
        windows = qa_windows(examples, ours, max_length, doc_stride)
        enc = theirs([e.question for e in examples], [e.context for e in examples], truncation="only_second",
                     max_length=max_length, stride=doc_stride, return_overflowing_tokens=True,
                     return_offsets_mapping=True)
        assert [w.input_ids for w in windows] == enc["input_ids"]
        differ = 0
        for i, window in enumerate(windows):
            example = examples[window.example]
            gold = example.answers[0]
            reference = run_qa_label(enc["offset_mapping"][i], enc.sequence_ids(i), gold)
            tokens = answer_tokens(window.offsets, gold)
            if (window.start_position, window.end_position) != reference:
                differ += 1
                assert reference[0] == len(window.input_ids) - 1                  # run_qa's start on [SEP]
            if window.start_position:
                assert window.start_position - window.context_start == tokens[0]
                assert window.end_position - window.context_start == tokens[-1]
        assert differ == (0 if max_length == 384 else 4)


def run_qa_label(offsets, sequence_ids, gold: Answer) -> tuple[int, int]:
    """transformers' run_qa.py prepare_train_features, for one window (its labelling, as it is written)."""
    start = 0
    while sequence_ids[start] != 1:
        start += 1
    end = len(offsets) - 1
    while sequence_ids[end] != 1:
        end -= 1
    if not (offsets[start][0] <= gold.start and offsets[end][1] >= gold.end):
        return 0, 0
    while start < len(offsets) and offsets[start][0] <= gold.start:
        start += 1
    while offsets[end][1] >= gold.end:
        end -= 1
    return start - 1, end + 1
