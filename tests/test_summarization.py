"""Summarisation: LEAD, the title tokenizer, the BERT-encoder model with copying, the pipeline and its commands."""

import json
import random
import shutil
import warnings

import pytest
import torch

from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.modeling import BertModel
from bertkit.models.registry import family_of, require
from bertkit.models.seq2seq.bert_encoder import BertSeq2Seq, BertSeq2SeqConfig
from bertkit.pipelines.options import SummarizationOptions
from bertkit.pipelines.summarization import (
    choose_lead_length,
    lead,
    load_summarizer,
    summarize,
    train_summarizer,
)
from bertkit.pipelines.summarization.pointer_generator import SummaryTokenizer
from bertkit.tokenizer import BertTokenizer
from bertkit.training.rouge import corpus_rouge
from conftest import fetch_or_skip, model_dir_or_skip
from test_bad_input import refused, run

pytestmark = pytest.mark.usefixtures("one_thread")

CHARACTERS = "张三在北京工作很好差的一是不了有人这中大为上个国我天气新闻"
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "。", *CHARACTERS]
ENCODER = dict(vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
               intermediate_size=32, max_position_embeddings=40)


def tiny_model(copy: bool = True, target_vocab: int = 12) -> BertSeq2Seq:
    torch.manual_seed(0)
    config = BertSeq2SeqConfig(encoder=BertConfig(**ENCODER).to_dict(), vocab_size=len(VOCAB),
                               decoder_vocab_size=target_vocab, d_model=16, decoder_layers=1, attention_heads=2,
                               ffn_dim=32, dropout=0.0, max_position_embeddings=12, pad_token_id=0, bos_token_id=2,
                               eos_token_id=3, unk_token_id=1, copy_attention=copy)
    model = BertSeq2Seq(config)
    mapping = torch.full((len(VOCAB),), 1)
    mapping[5:5 + target_vocab - 5] = torch.arange(5, target_vocab)  # the first target tokens are in the source
    model.source_to_target.copy_(mapping)
    return model.eval()


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    """A tiny random BERT with a vocabulary of a few Chinese characters."""
    path = tmp_path_factory.mktemp("encoder")
    torch.manual_seed(0)
    BertModel(BertConfig(**ENCODER)).save_pretrained(path)
    BertTokenizer({t: i for i, t in enumerate(VOCAB)}).save_pretrained(path)
    return path


def articles(n: int, seed: int) -> list[tuple[str, str]]:
    """(body, title) pairs whose body starts with its title, as much news does."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        title = "".join(rng.choice(CHARACTERS) for _ in range(rng.randint(3, 6)))
        out.append((title + "。" + "".join(rng.choice(CHARACTERS) for _ in range(20)), title))
    return out


# ---- LEAD -------------------------------------------------------------------------------------------

def test_lead_is_the_first_characters_without_white_space():
    assert lead(" 北京 天气很好。 大", 5) == "北京天气很"
    assert lead("短", 10) == "短"


def test_the_lead_length_is_the_best_rouge_l_on_the_articles_given():
    pairs = [("北京天气很好。这是新闻", "北京天气很好"), ("大人不在。中国工作", "大人不在")]
    length, sweep = choose_lead_length(pairs, lengths=(2, 4, 6, 8))
    # N = 4: "北京天气" vs 6 chars (F1 2·1·4/6 / (1 + 4/6) = 0.8), "大人不在" exact (1.0): mean 90.0
    # N = 6: exact (1.0), "大人不在。中" vs 4 chars (P 4/6, R 1: F1 0.8): mean 90.0 as well; ties go to the shorter
    assert [row["length"] for row in sweep] == [2, 4, 6, 8]
    assert sweep[1]["rougeL"] == pytest.approx(90.0) and sweep[2]["rougeL"] == pytest.approx(90.0)
    assert length == 4


# ---- the title tokenizer ------------------------------------------------------------------------------

def test_the_target_vocabulary_is_the_specials_then_the_title_tokens_commonest_first():
    source = BertTokenizer({t: i for i, t in enumerate(VOCAB)})
    tokenizer = SummaryTokenizer.from_titles(source, ["北京天气", "天气很好", "天"])
    vocab = tokenizer.target.get_vocab()
    assert list(vocab)[:8] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "天", "气", "北"]
    assert len(vocab) == 5 + 6
    assert tokenizer.encode_target(["天气人"]) == [[5, 6, 1, 3]]  # 人 is in no training title: [UNK]; then [SEP]
    mapping = tokenizer.source_to_target()
    assert mapping[VOCAB.index("天")] == 5 and mapping[VOCAB.index("人")] == 1 and mapping[0] == 0
    assert tokenizer.decode([2, 7, 8, 3, 0]) == "北京"


# ---- the model --------------------------------------------------------------------------------------

def test_copying_mixes_two_distributions_that_each_sum_to_one():
    model = tiny_model()
    ids = torch.tensor([[2, 5, 6, 7, 3, 0], [2, 8, 9, 3, 0, 0]])
    mask = (ids != 0).long()
    labels = torch.tensor([[5, 6, 3], [9, 3, -100]])
    out = model(ids, mask, labels=labels)
    assert out.logits.exp().sum(-1).detach() == pytest.approx(torch.ones(2, 3), abs=1e-5)
    with torch.no_grad():  # gate ≈ 0: every probability comes from copying, so only the source's tokens have any
        model.copy_gate.weight.zero_()
        model.copy_gate.bias.fill_(-40.0)
    probs = model(ids, mask, labels=labels).logits.exp()
    # [CLS] and [SEP] (2, 3) map to the target's [UNK] (1) in this model, the other source tokens to themselves
    assert probs[0, :, [1, 5, 6, 7]].sum(-1).detach() == pytest.approx(torch.ones(3), abs=1e-5)
    assert probs[1, :, [1, 8, 9]].sum(-1).detach() == pytest.approx(torch.ones(3), abs=1e-5)
    assert float(probs[0, :, 8:].max().detach()) < 1e-6  # 8 and up are not in the first source (padding copies nothing)


def test_given_encoder_states_replace_the_encoder_and_decoding_with_a_cache_matches_without():
    model = tiny_model()
    ids = torch.tensor([[2, 5, 6, 7, 3], [2, 8, 9, 3, 0]])
    mask = (ids != 0).long()
    labels = torch.tensor([[5, 6, 3], [9, 3, -100]])
    states = model.encoder(ids, mask).last_hidden_state
    full = model(ids, mask, labels=labels)
    cached = model(ids, mask, labels=labels, encoder_hidden_states=states)
    torch.testing.assert_close(cached.logits, full.logits)
    assert cached.loss.item() == pytest.approx(full.loss.item())
    greedy = model.generate(ids, mask, max_new_tokens=6)
    assert torch.equal(greedy, model.generate(ids, mask, max_new_tokens=6, use_cache=False))
    assert greedy[:, 0].tolist() == [2, 2] and greedy.size(1) <= 7
    beams = model.generate(ids, mask, max_new_tokens=6, num_beams=3)
    assert beams[:, 0].tolist() == [2, 2]


def test_warm_start_takes_the_encoder_and_its_embeddings_and_a_saved_model_loads_back(tmp_path):
    model = tiny_model(copy=False)
    torch.manual_seed(1)
    pretrained = BertModel(BertConfig(**ENCODER))
    mapping = torch.full((len(VOCAB),), 1)
    mapping[VOCAB.index("天")] = 7
    model.warm_start(pretrained, mapping)
    torch.testing.assert_close(model.encoder.embeddings.word_embeddings.weight,
                               pretrained.embeddings.word_embeddings.weight)
    torch.testing.assert_close(model.decoder.embed_tokens.weight[7],
                               pretrained.embeddings.word_embeddings.weight[VOCAB.index("天")])
    assert model.lm_head.weight is model.decoder.embed_tokens.weight  # the output layer is tied to them
    model.save_pretrained(tmp_path)
    assert family_of(tmp_path).name == "summarization"
    loaded = BertSeq2Seq.from_pretrained(tmp_path)
    ids = torch.tensor([[2, 10, 11, 3]])
    torch.testing.assert_close(loaded(ids, labels=torch.tensor([[7, 3]])).logits,
                               model(ids, labels=torch.tensor([[7, 3]])).logits)
    assert torch.equal(loaded.source_to_target, mapping)
    assert require(tmp_path, "summarize").name == "summarization"
    with pytest.raises(ValueError, match="translate takes translation models"):
        require(tmp_path, "translate")


# ---- the pipeline -----------------------------------------------------------------------------------

def test_training_on_given_articles_writes_the_model_and_scores_it_beside_lead(tmp_path, encoder_dir):
    splits = {"train": articles(48, 0), "dev": articles(10, 1), "test": articles(6, 2)}
    options = SummarizationOptions(out=str(tmp_path / "run"), architecture="pointer-generator",
                                   model=str(encoder_dir), max_steps=3, batch_size=8, max_source_length=24,
                                   max_target_length=8, decoder_layers=1, decoder_heads=2, decoder_ffn=32,
                                   num_beams=2, progress=False)
    report = train_summarizer(options, splits)
    titles = [title for _, title in splits["test"]]
    # every title ends its body's first characters, so LEAD at the chosen N scores as it says
    assert report["lead"] == pytest.approx(corpus_rouge([lead(b, report["lead_length"]) for b, _ in splits["test"]],
                                                        titles))
    assert report["lead_length"] == 4 and report["lead_dev"][0]["length"] == 4
    assert report["steps"] == 3 and report["test_articles"] == 6 and report["train_pairs"] == 48
    assert report["trained_parameters"] < report["parameters"]  # the encoder is held
    assert set(report["rouge"]) == {"rouge1", "rouge2", "rougeL"}
    model, tokenizer = load_summarizer(tmp_path / "run")
    again = summarize(model, tokenizer, [b for b, _ in splits["test"]], num_beams=2, max_new_tokens=8,
                      max_source_length=24)
    assert again == [s["summary"] for s in report["samples"]]
    saved = json.loads((tmp_path / "run" / "report.json").read_text())
    assert saved["rouge"] == report["rouge"]


@pytest.fixture(scope="module")
def inews_encoder_dir(tmp_path_factory):
    """A tiny random BERT over m3e-small's vocabulary (one token per Chinese character)."""
    fetch_or_skip("inews")
    m3e = model_dir_or_skip("m3e-small")
    path = tmp_path_factory.mktemp("m3e-vocab")
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=21128, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32, max_position_embeddings=32)).save_pretrained(path)
    for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(m3e / name, path)
    return path


@pytest.mark.slow
def test_summarize_train_and_summarize_on_inews_through_the_command_line(tmp_path, capsys, inews_encoder_dir):
    out = tmp_path / "run"
    code, stdout, err = run(capsys, "summarize-train", "--out", out, "--architecture", "pointer-generator",
                            "--model", inews_encoder_dir, "--max-steps", 2, "--batch-size", 8,
                            "--max-source-length", 16, "--max-target-length", 8,
                            "--decoder-layers", 1, "--decoder-heads", 2, "--decoder-ffn", 32, "--lead-length", 24,
                            "--max-test", 4, "--beams", 1, "--no-progress", "--threads", 1)
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    assert "LEAD  ROUGE-1" in stdout and f"ROUGE-L {report['rouge']['rougeL']:.2f}" in stdout
    assert report["lead_length"] == 24 and report["test_articles"] == 4 and report["steps"] == 2
    assert report["train_pairs"] + report["train_targets_too_long"] == 5298  # inews' train split
    assert 0 < report["train_pairs"] < 5298  # less its titles over 8 tokens
    assert {"config.json", "model.safetensors", "source_tokenizer", "target_tokenizer", "generation_config.json",
            "metrics.jsonl", "report.json"} <= {p.name for p in out.iterdir()}
    code, stdout, err = run(capsys, "summarize", "--model", out, "北京今天天气很好，新闻说明天下雨。", "第二篇")
    assert code == 0, err
    assert len(stdout.splitlines()) == 2


# ---- UniLM ---------------------------------------------------------------------------------------------

def test_unilm_fine_tunes_every_weight_and_writes_what_it_saved(tmp_path, encoder_dir):
    splits = {"train": articles(48, 0), "dev": articles(10, 1), "test": articles(6, 2)}
    # the CPU in float32, where the titles are read back: on a GPU in bf16 an untrained writer's near-ties could fall
    # the other way
    options = SummarizationOptions(out=str(tmp_path / "run"), model=str(encoder_dir), max_steps=3, batch_size=8,
                                   max_source_length=24, max_target_length=8, num_beams=2, progress=False,
                                   device="cpu", bf16=False)
    report = train_summarizer(options, splits)
    assert report["architecture"] == "unilm" and report["steps"] == 3 and report["train_pairs"] == 48
    assert report["trained_parameters"] == report["parameters"]          # nothing held: the BERT itself learns
    assert report["fresh_head"]                                          # a bare encoder: no masked-LM head to keep
    model, tokenizer = load_summarizer(tmp_path / "run")
    assert type(model).__name__ == "BertForUniLM"
    assert family_of(tmp_path / "run").name == "BERT"
    saved = json.loads((tmp_path / "run" / "generation_config.json").read_text())
    assert saved == {"architecture": "unilm", "num_beams": 2, "length_penalty": 1.0, "max_source_length": 24,
                     "max_new_tokens": 8, "no_repeat_ngram_size": 2}
    settings = {k: v for k, v in saved.items() if k != "architecture"}  # as `bertkit summarize` reads them
    again = summarize(model, tokenizer, [b for b, _ in splits["test"]], **settings)
    assert again == [s["summary"] for s in report["samples"]]


def test_unilm_learns_to_copy_the_start_of_the_source(tmp_path):
    """Bodies that begin with their title: a few hundred steps of a small BERT write the title back (copying a
    token from the source by its place takes two layers: one to find the token written last, one to read on)."""
    encoder = tmp_path / "encoder"
    torch.manual_seed(0)
    BertModel(BertConfig(**{**ENCODER, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
                            "intermediate_size": 64, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
                            })).save_pretrained(encoder)
    BertTokenizer({t: i for i, t in enumerate(VOCAB)}).save_pretrained(encoder)
    splits = {"train": articles(512, 0), "dev": articles(8, 1), "test": articles(16, 2)}
    options = SummarizationOptions(out=str(tmp_path / "run"), model=str(encoder), max_steps=500, batch_size=32,
                                   learning_rate=3e-3, max_source_length=24, max_target_length=8, num_beams=1,
                                   label_smoothing=0.0, bf16=False, progress=False)
    report = train_summarizer(options, splits)
    assert report["rouge"]["rougeL"] > 80, report["samples"]


@pytest.mark.parametrize("suffix", [".tsv", ".jsonl"])
def test_a_pairs_file_trains_and_writes_with_one_command_each(tmp_path, capsys, encoder_dir, suffix):
    pairs = articles(10, 3)
    data = tmp_path / f"pairs{suffix}"
    data.write_text("".join(f"{body}\t{title}\n" if suffix == ".tsv" else
                            json.dumps({"source": body, "target": title}, ensure_ascii=False) + "\n"
                            for body, title in pairs), encoding="utf-8")
    out = tmp_path / "run"
    code, stdout, err = run(capsys, "summarize-train", "--out", out, "--data", data, "--model", encoder_dir,
                            "--max-steps", 2, "--batch-size", 4, "--max-source-length", 24, "--max-target-length", 8,
                            "--no-progress", "--threads", 1)
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    assert report["data"] == str(data) and report["train_pairs"] == 8 and report["test_articles"] == 1
    assert "unilm, " in stdout and "LEAD  ROUGE-1" in stdout
    code, stdout, err = run(capsys, "summarize", "--model", out, pairs[0][0], pairs[1][0])
    assert code == 0, err
    assert len(stdout.splitlines()) == 2


def test_a_pairs_file_too_small_or_unreadable_is_refused(tmp_path, capsys, encoder_dir):
    data = tmp_path / "pairs.jsonl"
    data.write_text('{"source": "张三在北京", "target": "张三"}\n{"text": "no"}\n', encoding="utf-8")
    message = refused(capsys, "summarize-train", "--out", tmp_path / "run", "--data", data, "--model", encoder_dir,
                      "--max-steps", 1, "--max-source-length", 24, "--max-target-length", 8)
    assert "has 1 usable source -> target pairs; at least 3 are needed" in message


# ---- bad input ----------------------------------------------------------------------------------------

def test_bad_summarization_input_is_one_line(tmp_path, capsys, encoder_dir, monkeypatch):
    def fetched():
        raise AssertionError("inews was fetched before the options were checked")

    monkeypatch.setattr("bertkit.data.summaries.load_articles", fetched)  # a refusal comes before the download
    out = tmp_path / "run"
    assert "--max-target-length must be at least 2, got 0" in refused(
        capsys, "summarize-train", "--out", out, "--max-steps", 1, "--max-target-length", "0")
    assert "give max_steps or minutes" in refused(capsys, "summarize-train", "--out", out)
    assert "does not exist" in refused(capsys, "summarize-train", "--out", out, "--max-steps", 1,
                                       "--model", tmp_path / "nowhere")
    pointer = ("--architecture", "pointer-generator")
    assert "--decoder-heads 3 does not divide the encoder's hidden size 16" in refused(
        capsys, "summarize-train", "--out", out, "--max-steps", 1, "--model", encoder_dir, "--decoder-heads", 3,
        "--max-source-length", 32, *pointer)
    assert "more than the encoder's 40 positions" in refused(
        capsys, "summarize-train", "--out", out, "--max-steps", 1, "--model", encoder_dir,
        "--max-source-length", 64, *pointer)
    assert "--max-source-length 32 + --max-target-length 16 is more than the model's 40 positions" in refused(
        capsys, "summarize-train", "--out", out, "--max-steps", 1, "--model", encoder_dir,
        "--max-source-length", 32, "--max-target-length", 16)
    assert "--data nowhere.tsv: no such file" in refused(capsys, "summarize-train", "--out", out, "--max-steps", 1,
                                                         "--data", "nowhere.tsv")
    assert "holds a BERT that has not learnt to write" in refused(capsys, "summarize", "--model", encoder_dir,
                                                                  "text")
    assert "does not exist" in refused(capsys, "summarize", "--model", tmp_path / "nowhere", "text")


def test_an_empty_title_is_said_with_the_reason():
    from bertkit.pipelines.summarization import EmptySummaryWarning, _warn_empty

    sources = [[2, 10, 11, 3], [2, 1, 1, 1, 3], [2, 12, 3]]  # [CLS] ... [SEP]; 1 is [UNK]
    with pytest.warns(EmptySummaryWarning, match=r"1 of 3 texts got an empty title \(the first is text 2\): 3 of its "
                                                 r"3 tokens are \[UNK\], characters not in the model's vocabulary"):
        _warn_empty(["标题", "", "另一个"], sources, unknown=1)
    with pytest.warns(EmptySummaryWarning, match="the model wrote no token it could turn into text"):
        _warn_empty(["", "x"], [[2, 10, 3], [2, 11, 3]], unknown=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _warn_empty(["a", "b"], [[2, 10, 3], [2, 11, 3]], unknown=1)  # every title written: nothing said
