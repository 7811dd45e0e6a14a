"""The translation and language-model pipelines and their commands, on small synthetic files and on real hsk."""

import argparse
import json
import math
import random

import pytest
import torch

from bertkit.cli import main
from bertkit.inference.batching import TruncationWarning
from bertkit.pipelines import lm, translation
from bertkit.pipelines.options import parse_pair
from bertkit.pipelines.translation import TranslationCollator, TranslationOptions, length_batches
from bertkit.tokenizer import detokenize
from conftest import fetch_or_skip

ZH_DIGITS = "零一二三四五六七八九"
EN_DIGITS = "zero one two three four five six seven eight nine".split()


@pytest.fixture(scope="module")
def numerals_tsv(tmp_path_factory):
    """Chinese numerals -> English words ("四八六" -> "Four eight six."): 800 pairs a tiny model learns fast."""
    rng = random.Random(0)
    lines = []
    for _ in range(800):
        digits = [rng.randrange(10) for _ in range(rng.randint(2, 5))]
        lines.append("".join(ZH_DIGITS[d] for d in digits) + "\t" + " ".join(EN_DIGITS[d] for d in digits).capitalize()
                     + ".")
    path = tmp_path_factory.mktemp("data") / "numerals.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_parse_pair():
    assert parse_pair("zh-en") == ("zh", "en")
    for bad in ("zh", "zh-zh", "zh-en-de", "-en"):
        with pytest.raises(ValueError, match="--pair"):
            parse_pair(bad)


@pytest.mark.parametrize("raw,lang,expected", [
    ("he said , \" it ' s mine \" .", "en", "he said, \" it's mine \"."),
    ("bethlehem - judah ( the city ) : 3 %", "en", "bethlehem-judah (the city): 3%"),
    ("i don ' t know ? yes !", "en", "i don't know? yes!"),
    ("我 们 去 北 京 ， ok 吗 ？", "zh", "我们去北京，ok吗？"),
])
def test_detokenize(raw, lang, expected):
    assert detokenize(raw, lang) == expected


def test_length_batches_group_similar_lengths_and_keep_each_pair_once():
    rng = random.Random(1)
    examples = [([1] * rng.randint(1, 30), [2] * rng.randint(1, 30)) for _ in range(103)]
    batches = length_batches(examples, 10, seed=0)
    assert len(batches) == 10 and all(len(b) == 10 for b in batches)     # full batches only; 3 left over
    ids = [id(pair) for b in batches for pair in b]
    assert len(set(ids)) == 100
    spread = [max(len(t) for _, t in b) - min(len(t) for _, t in b) for b in batches]
    assert max(spread) <= 4                                             # sorted: targets of a batch agree in length
    assert length_batches(examples, 10, seed=0) == batches


def test_length_batches_by_tokens_fill_a_token_budget_and_keep_every_pair():
    rng = random.Random(2)
    examples = [([1] * rng.randint(1, 30), [2] * rng.randint(1, 40)) for _ in range(203)]
    batches = length_batches(examples, 10, seed=0, max_tokens=120)
    assert sorted(id(pair) for b in batches for pair in b) == sorted(map(id, examples))  # none left out
    padded = [len(b) * max(len(t) for _, t in b) for b in batches]
    assert max(padded) <= 120
    # the budget, not a pair count, sets the size: short targets come many to a batch, long ones few
    assert len(batches[0]) >= 20 and len(batches[-1]) <= 3
    # full: one more pair (the next, no shorter one) would have gone over the budget
    for b, following in zip(batches, batches[1:]):
        assert (len(b) + 1) * len(following[0][1]) > 120
    assert length_batches(examples, 10, seed=0, max_tokens=120) == batches


def test_batch_tokens_below_max_length_is_refused(tmp_path):
    with pytest.raises(ValueError, match="batch_tokens 50 is below max_length 96"):
        TranslationOptions(data="bible", out=str(tmp_path), max_steps=1, batch_tokens=50)


def test_collator_pads_sources_and_masks_labels():
    batch = TranslationCollator(pad_token_id=0)([[([5, 6, 3], [7, 3]), ([5, 3], [8, 9, 3])]], seeds=[0])
    assert batch["input_ids"].tolist() == [[5, 6, 3], [5, 3, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["labels"].tolist() == [[7, 3, -100], [8, 9, 3]]
    with pytest.raises(ValueError, match="empty"):
        TranslationCollator(0)([])


def test_options_are_checked():
    with pytest.raises(ValueError, match="max_steps or minutes"):
        TranslationOptions(data="hsk", out="x")
    with pytest.raises(ValueError, match="model"):
        TranslationOptions(data="hsk", out="x", max_steps=1, model="bert")
    with pytest.raises(FileNotFoundError, match="neither a dataset"):
        translation.load_pairs("no-such-file.tsv", "zh", "en")


def test_commands_offer_every_size_and_model_the_pipelines_have():
    from bertkit.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    options = {a.dest: a.choices for a in sub.choices["translate-train"]._actions}
    assert list(options["size"]) == list(translation.SIZES)
    assert list(options["model"]) == list(translation.MODELS)
    lm_options = {a.dest: a.choices for a in sub.choices["lm-train"]._actions}
    assert list(lm_options["size"]) == list(lm.GPT_PRESETS) == list(lm.RNN_LM_PRESETS)
    assert list(lm_options["model"]) == ["gpt", "rnn", "lstm", "gru"]
    assert {"rnn", "rnn-attention"} <= set(options["model"])
    assert list(options["attention_score"]) == ["additive", "dot"] and list(options["gru_variant"]) == ["torch",
                                                                                                       "tutorial"]


def test_translate_train_builds_the_rnn_its_options_name(numerals_tsv, tmp_path, capsys):
    out = tmp_path / "rnn"
    assert main(["translate-train", "--data", str(numerals_tsv), "--model", "rnn-attention", "--attention-score", "dot",
                 "--size", "tiny", "--max-steps", "3", "--batch-size", "16", "--beams", "1", "--max-test", "5",
                 "--no-progress", "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert (config["rnn_cell"], config["rnn_attention"], config["attention_score"]) == ("rnn", True, "dot")
    model, _ = translation.load_translator(out)
    assert type(model.attention).__name__ == "DotProductAttention" and model.encoder.mode == "RNN_TANH"
    capsys.readouterr()
    assert main(["translate", "--model", str(out), "--beams", "1", "四八六"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1
    tokenizer = translation.TranslationTokenizer.from_pretrained(out)
    options = TranslationOptions(data=str(numerals_tsv), out="x", max_steps=1, model="gru", gru_variant="tutorial")
    assert translation.model_config(options, tokenizer).gru_variant == "tutorial"


def test_translate_train_writes_a_model_that_translate_loads(numerals_tsv, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["translate-train", "--data", str(numerals_tsv), "--size", "tiny", "--max-steps", "8",
                 "--batch-size", "16", "--beams", "2", "--max-test", "20", "--no-progress", "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["model"] == "transformer" and report["steps"] == 8 and report["test_sentences"] == 20
    assert 0.0 <= report["bleu"] <= 100.0 and report["train_seconds"] > 0
    assert len(report["bleu_precisions"]) == 4 and 0.0 < report["brevity_penalty"] <= 1.0
    assert report["length_ratio"] > 0.0 and (report["brevity_penalty"] == 1.0) == (report["length_ratio"] >= 1.0)
    assert report["vocab_sizes"]["source"] > 10 and len(report["samples"]) == 8
    files = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "source_tokenizer", "target_tokenizer"} <= files
    assert "test BLEU" in capsys.readouterr().out
    assert main(["translate", "--model", str(out), "--beams", "1", "四八六", "零一"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(isinstance(line, str) for line in lines)
    model, tokenizer = translation.load_translator(out)
    assert translation.translate(model, tokenizer, ["四八六", "零一"], num_beams=1) == lines
    # a text longer than the model's positions is cut to them, and said: the translation covers only its start
    limit = model.config.max_position_embeddings
    long = "四八六" * limit
    with pytest.warns(TruncationWarning, match=f"1 of 2 texts are longer than the model's {limit} positions \\(the "
                                               f"first is text 2, {3 * limit + 1} tokens\\): each was cut to its "
                                               f"first {limit - 1} tokens"):
        cut = translation.translate(model, tokenizer, ["零一", long], num_beams=1, max_new_tokens=4)
    assert cut == translation.translate(model, tokenizer, ["零一", ("四八六" * limit)[:limit - 1]], num_beams=1,
                                        max_new_tokens=4)
    capsys.readouterr()
    assert main(["translate", "--model", str(out), "--beams", "1", "--max-new-tokens", "4", long]) == 0
    assert "bertkit translate: warning: 1 of 1 texts are longer than the model's" in capsys.readouterr().err


def test_length_penalty_is_chosen_on_dev_saved_and_used_by_translate(numerals_tsv, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["translate-train", "--data", str(numerals_tsv), "--size", "tiny", "--max-steps", "30",
                 "--batch-size", "16", "--learning-rate", "3e-3", "--beams", "3", "--tune-length-penalty",
                 "--max-test", "10", "--no-progress", "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    sweep = report["length_penalty_dev"]
    assert [row["length_penalty"] for row in sweep] == list(translation.LENGTH_PENALTIES)
    best = max(sweep, key=lambda row: row["bleu"])
    assert report["length_penalty"] == best["length_penalty"]
    assert translation.load_generation_config(out) == {"num_beams": 3, "length_penalty": best["length_penalty"]}
    assert "dev BLEU by length penalty" in capsys.readouterr().out
    # `translate` decodes with the saved settings unless told otherwise
    texts = ["四八六零一二", "零一"]
    assert main(["translate", "--model", str(out), *texts]) == 0
    model, tokenizer = translation.load_translator(out)
    expected = translation.translate(model, tokenizer, texts, num_beams=3, length_penalty=best["length_penalty"])
    assert capsys.readouterr().out.splitlines() == expected
    # a directory without the file falls back to the defaults of `generate`
    assert translation.load_generation_config(tmp_path) == {"num_beams": 4, "length_penalty": 1.0}


def test_translate_train_batches_by_tokens(numerals_tsv, tmp_path):
    out = tmp_path / "run"
    assert main(["translate-train", "--data", str(numerals_tsv), "--size", "tiny", "--max-steps", "3",
                 "--batch-tokens", "120", "--max-test", "5", "--no-progress", "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["batch_tokens"] == 120 and report["batch_size"] is None
    # targets of 2-5 words, "." and eos (4-7 tokens, a few more where WordPiece splits a word): 120 tokens
    # hold 12-30 of them, where --batch-size would have put its default 64
    assert 12 <= report["pairs_per_batch"] <= 30


@pytest.mark.slow
@pytest.mark.parametrize("model,steps,lr,floor", [("transformer", 120, 1e-3, 40.0), ("gru-attention", 150, 3e-3, 50.0)])
def test_pipeline_learns_numerals(numerals_tsv, tmp_path, model, steps, lr, floor):
    report = translation.train_translation(TranslationOptions(
        data=str(numerals_tsv), out=str(tmp_path / model), model=model, size="tiny", max_steps=steps, batch_size=32,
        learning_rate=lr, pre_ln=True, num_beams=2, progress=False))
    assert report["bleu"] > floor, report["samples"]


# ---- language model -------------------------------------------------------------------------------

def test_unigram_perplexity_and_blocks():
    assert lm.blocks(list(range(10)), 4) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    stream = [1, 1, 1, 2]                     # add-one counts over 3 ids: 1, 4, 2 of 7
    ppl = lm.unigram_perplexity(stream, [[0, 1, 2]], vocab_size=3)
    assert ppl == pytest.approx(math.exp(-(math.log(4 / 7) + math.log(2 / 7)) / 2))
    batch = lm.collate_blocks([[1, 2, 3], [4, 5, 6]])
    assert torch.equal(batch["input_ids"], batch["labels"])


@pytest.fixture(scope="module")
def tiny_corpus(tmp_path_factory):
    rng = random.Random(0)
    sentences = ["今天天气很好。", "我们去公园散步。", "他喜欢看书。", "这本书很有意思。", "明天会下雨吗？"]
    docs = ["".join(rng.choice(sentences) for _ in range(6)) for _ in range(60)]
    path = tmp_path_factory.mktemp("corpus") / "docs.txt"
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return path


def test_lm_train_beats_unigram_and_generate_writes_text(tiny_corpus, tmp_path, capsys):
    out = tmp_path / "gpt"
    assert main(["lm-train", "--corpus", str(tiny_corpus), "--size", "tiny", "--block-size", "32",
                 "--batch-size", "8", "--max-steps", "40", "--learning-rate", "3e-3", "--no-progress",
                 "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["perplexity"] < report["unigram_perplexity"] / 2, report
    assert "unigram" in capsys.readouterr().out
    assert main(["generate", "--model", str(out), "--max-new-tokens", "12", "今天"]) == 0
    text = capsys.readouterr().out.strip()
    assert text.startswith("今天") and len(text) > 2


def test_lm_train_trains_a_recurrent_lm_that_generate_continues(tiny_corpus, tmp_path, capsys):
    out = tmp_path / "gru"
    assert main(["lm-train", "--model", "gru", "--gru-variant", "tutorial", "--corpus", str(tiny_corpus), "--size",
                 "tiny", "--block-size", "16", "--batch-size", "8", "--max-steps", "30", "--learning-rate", "1e-2",
                 "--no-progress", "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["model"] == "gru" and report["perplexity"] < report["unigram_perplexity"] / 1.5, report
    assert capsys.readouterr().out.startswith(f"GRU LM ({report['parameters']:,} parameters)")
    config = json.loads((out / "config.json").read_text())
    assert (config["model_type"], config["rnn_cell"], config["gru_variant"]) == ("bertkit-rnn-lm", "gru", "tutorial")
    assert main(["generate", "--model", str(out), "--greedy", "--max-new-tokens", "12", "今天"]) == 0
    text = capsys.readouterr().out.strip()
    assert text.startswith("今天") and len(text) > 2


# ---- real data ------------------------------------------------------------------------------------

@pytest.mark.network
@pytest.mark.slow
def test_hsk_pipeline_runs_on_real_pairs(tmp_path):
    fetch_or_skip("hsk")
    report = translation.train_translation(TranslationOptions(
        data="hsk", out=str(tmp_path / "hsk"), size="tiny", max_steps=40, batch_size=32, learning_rate=1e-3,
        max_test_sentences=40, num_beams=2, progress=False))
    assert report["train_pairs"] > 3000 and report["test_sentences"] == 40
    assert report["vocab_sizes"]["source"] > 1000                      # Chinese by character
    assert report["dev_loss"] < math.log(report["vocab_sizes"]["target"])  # better than uniform after 40 steps
    model, tokenizer = translation.load_translator(tmp_path / "hsk")
    assert translation.translate(model, tokenizer, ["我们要不断创新。"])[0].strip()


def test_a_batch_larger_than_the_data_is_named_as_such(numerals_tsv, tmp_path, capsys):
    """640 training pairs, all within --max-length: the batch size is what is too large, not max_length."""
    assert main(["translate-train", "--data", str(numerals_tsv), "--size", "tiny", "--max-steps", "1",
                 "--batch-size", "5000", "--no-progress", "--out", str(tmp_path / "big")]) != 0
    err = capsys.readouterr().err
    assert "the training data has 640 usable pairs: fewer than one batch of 5000 (--batch-size); give a smaller " \
           "--batch-size, or more pairs" in err and "max-length" not in err
