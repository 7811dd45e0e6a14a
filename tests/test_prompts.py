"""Cloze prompts: templates and label words as token ids, the prompt classifier's scores against a hand
computation, its checkpoint as transformers' BertForMaskedLM, and fine-tuning through the masked-LM head."""

import json

import pytest
import torch
import transformers

from bertkit.data.prompts import PromptError, PromptTemplate, parse_label_words
from bertkit.inference import TruncationWarning, predict
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.heads import BertForMaskedLM, BertForPromptClassification, model_class_for
from bertkit.models.configuration import ConfigError
from bertkit.pipelines.finetune import FinetuneOptions, finetune
from bertkit.tokenizer import BertTokenizer
from test_finetune import LETTERS, letters_model  # noqa: F401  (a module fixture: the toy task's files)
from tolerance import assert_close

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab")
    (path / "vocab.txt").write_text("\n".join(SPECIALS + list("体育财经新闻：的了是在") + list(LETTERS)) + "\n")
    return BertTokenizer.from_pretrained(path)


def test_template_keeps_its_masks_and_cuts_the_text(tokenizer):
    template = PromptTemplate("[MASK][MASK]新闻：{text}")
    assert template.num_masks(tokenizer) == 2
    rows, cut = template.encode(tokenizer, ["体育的", "财经新闻的了是在"], max_length=10)
    tokens = [tokenizer.convert_ids_to_tokens(row) for row in rows]
    assert tokens[0] == ["[CLS]", "[MASK]", "[MASK]", "新", "闻", "：", "体", "育", "的", "[SEP]"]
    assert tokens[1] == ["[CLS]", "[MASK]", "[MASK]", "新", "闻", "：", "财", "经", "新", "[SEP]"]
    assert cut == [1]
    suffix = PromptTemplate("{text}是[MASK][MASK]")             # a mask after the text survives a cut as well
    rows, cut = suffix.encode(tokenizer, ["体育体育体育体育"], max_length=8)
    assert tokenizer.convert_ids_to_tokens(rows[0]) == ["[CLS]", "体", "育", "体", "是", "[MASK]", "[MASK]", "[SEP]"]
    assert suffix.label_word_ids(tokenizer, ["体育", "财经"]) == [tokenizer.convert_tokens_to_ids(["体", "育"]),
                                                                 tokenizer.convert_tokens_to_ids(["财", "经"])]


@pytest.mark.parametrize("template, words, message", [
    ("新闻：{text}", ["体育"], "at least one \\[MASK\\]"),
    ("[MASK][MASK]新闻", ["体育"], "exactly one \\{text\\}"),
    ("[MASK]新闻：{text}", ["体育"], "is 2 tokens, but the template has 1"),
    ("[MASK][MASK]：{text}", ["体育", "体育"], "share a label word"),
    ("[MASK][MASK]：{text}", ["体操"], "lacks"),
    ("[MASK]：{text}", ["体", "[MASK]"], "label word '\\[MASK\\]' is, or holds, a special token \\(\\[MASK\\]\\)"),
    ("[MASK][MASK]：{text}", ["体育", "体[SEP]"], "special token \\(\\[SEP\\]\\)"),
])
def test_bad_templates_and_label_words_are_clear_errors(tokenizer, template, words, message):
    with pytest.raises(PromptError, match=message):
        PromptTemplate(template).label_word_ids(tokenizer, words)


def test_a_text_holding_the_mask_token_is_refused(tokenizer):
    with pytest.raises(PromptError, match="contains the \\[MASK\\] token"):
        PromptTemplate("[MASK]：{text}").encode(tokenizer, ["a [MASK] b"], 20)


def prompt_model(tokenizer, seed=0):
    prompt = PromptTemplate("[MASK][MASK]新闻：{text}").config(tokenizer, ["体育", "财经", "新闻"])
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=24, max_position_embeddings=32, prompt=prompt,
                        id2label={0: "sports", 1: "finance", 2: "news"})
    torch.manual_seed(seed)
    model = BertForPromptClassification(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model


def test_class_scores_equal_a_hand_computation(tokenizer):
    model = prompt_model(tokenizer)
    rows, _ = PromptTemplate(model.config.prompt["template"]).encode(tokenizer, ["体育的了", "是在abc"], 32)
    width = max(map(len, rows))
    ids = torch.tensor([row + [0] * (width - len(row)) for row in rows])
    mask = (ids != 0).long()
    out = model(ids, mask, labels=torch.tensor([0, 2]))
    # by hand: the full masked-LM model, a softmax over the whole vocabulary at each [MASK], the label word's
    # log-probabilities summed over the two [MASK]s
    mlm = BertForMaskedLM(model.config.replace(prompt=None)).eval()
    mlm.load_state_dict(model.state_dict())
    log_probs = torch.log_softmax(mlm(ids, mask).logits, dim=-1).detach()         # (B, T, V)
    words = model.config.prompt["label_word_ids"]
    hand = torch.tensor([[float(log_probs[b, 1, w[0]] + log_probs[b, 2, w[1]]) for w in words] for b in range(2)])
    assert_close(out.logits, hand)
    expected = -(torch.log_softmax(hand, -1)[0, 0] + torch.log_softmax(hand, -1)[1, 2]) / 2
    assert_close(out.loss, expected)
    out.loss.backward()
    assert model.cls.predictions.bias.grad.abs().sum() > 0     # training goes through the masked-LM head
    with pytest.raises(ValueError, match="template's 2 \\[MASK\\] tokens"):
        model(ids[:, 2:])


def test_saved_prompt_model_is_a_masked_lm_for_transformers(tokenizer, tmp_path):
    model = prompt_model(tokenizer)
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["architectures"] == ["BertForMaskedLM"] and saved["prompt"]["label_words"] == ["体育", "财经", "新闻"]
    loaded = model_class_for(BertConfig.from_pretrained(tmp_path)).from_pretrained(tmp_path)
    assert type(loaded) is BertForPromptClassification
    ids = torch.tensor([PromptTemplate("[MASK][MASK]新闻：{text}").encode(tokenizer, ["体育在"], 32)[0][0]])
    torch.testing.assert_close(loaded(ids).logits, model(ids).logits, atol=0, rtol=0)
    transformers.logging.set_verbosity_error()
    theirs = transformers.BertForMaskedLM.from_pretrained(tmp_path).eval()
    ours = BertForMaskedLM.from_pretrained(tmp_path)
    assert_close(ours(ids).logits, theirs(ids).logits)


def test_prompt_config_is_checked(tokenizer):
    prompt = PromptTemplate("[MASK][MASK]新闻：{text}").config(tokenizer, ["体育", "财经"])
    base = dict(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                intermediate_size=24)
    with pytest.raises(ConfigError, match="2 label words for 3 labels"):
        BertConfig(**base, prompt=prompt, id2label={0: "a", 1: "b", 2: "c"})
    with pytest.raises(ConfigError, match="outside the vocabulary"):
        BertConfig(**{**base, "vocab_size": 7}, prompt=prompt)
    with pytest.raises(ValueError, match="needs config.prompt"):
        BertForPromptClassification(BertConfig(**base))


def test_prompt_fine_tuning_learns_the_toy_task(letters_model, tmp_path):  # noqa: F811
    results = finetune(FinetuneOptions(
        task="classify", model=str(letters_model / "model"), random_init=True, prompt="[MASK] {text}",
        label_words=["0=a", "1=x", "2=m"], train=str(letters_model / "train.tsv"),
        dev=str(letters_model / "dev.tsv"), test=str(letters_model / "test.tsv"), out=str(tmp_path / "run"),
        epochs=4, learning_rate=2e-3, batch_size=64, max_length=16, progress=False, select_best=False))
    assert results["test_accuracy"] >= 0.97, results
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["prompt"]["template"] == "[MASK] {text}" and saved["architectures"] == ["BertForMaskedLM"]
    # predict puts each text in the template it was fine-tuned with: the same test accuracy, one text at a time too
    model = model_class_for(BertConfig.from_pretrained(tmp_path / "run")).from_pretrained(tmp_path / "run")
    words = BertTokenizer.from_pretrained(tmp_path / "run")
    rows = [line.split("\t") for line in (letters_model / "test.tsv").read_text().splitlines()[1:]]
    predicted = predict(model, words, [text for text, _ in rows])
    assert sum(p["label"] == label for p, (_, label) in zip(predicted, rows)) / len(rows) == results["test_accuracy"]
    assert predict(model, words, rows[0][0])["label"] == predicted[0]["label"]
    with pytest.raises(ValueError, match="text_pairs cannot be given"):
        predict(model, words, ["a b"], ["c d"])
    with pytest.warns(TruncationWarning, match="inside the prompt template"):
        predict(model, words, [" ".join(LETTERS)])
    with pytest.raises(ValueError, match="none for 2"):
        finetune(FinetuneOptions(task="classify", model=str(letters_model / "model"), prompt="[MASK] {text}",
                                 label_words=["0=a", "1=x"], train=str(letters_model / "train.tsv"),
                                 dev=str(letters_model / "dev.tsv"), out=str(tmp_path / "bad"), max_steps=1))


def test_label_words_from_items_over_a_datasets_own():
    own = {"sports": "体育", "finance": "财经"}
    words = parse_label_words(["finance=股票", "news=新闻"], own)  # replaced in place, a new label after
    assert list(words.items()) == [("sports", "体育"), ("finance", "股票"), ("news", "新闻")]
    assert list(parse_label_words(["b=x", "a=y"])) == ["b", "a"]  # the labels in the order given
    assert parse_label_words(None, own) == own and parse_label_words([]) == {}
    for items, message in ((["sports"], "LABEL=WORD items, got 'sports'"), (["=体育"], "got '=体育'"),
                           (["a=x", "a=y"], "label 'a' is given twice")):
        with pytest.raises(PromptError, match=message):
            parse_label_words(items, own)
