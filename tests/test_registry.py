"""The registry of model families: every family bertkit knows is found by its config.json's model_type, `bertkit info`
summarises each, and a command refuses a family it cannot serve in one line naming it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers

from bertkit.cli import main
from bertkit.models.registry import FAMILIES, families_serving, family_for, family_of, require
from weights import randomise

FIXTURES = Path(__file__).parent / "fixtures" / "checkpoints"

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def directories(tmp_path_factory) -> dict[str, Path]:
    """A directory of each family: BERT and the earlier GPT / translation formats (bertkit's fixtures), a GPT-2
    and a ViT written by transformers."""
    root = tmp_path_factory.mktemp("families")
    torch.manual_seed(0)
    gpt2 = randomise(transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=300, n_positions=32, n_embd=16,
                                                                          n_layer=2, n_head=4)))
    gpt2.save_pretrained(root / "gpt2")
    vit = transformers.ViTForImageClassification(transformers.ViTConfig(
        image_size=16, patch_size=4, num_channels=1, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=24, num_labels=3))
    vit.save_pretrained(root / "vit")
    from bertkit.models.rnn_lm.configuration import RNNLMConfig
    from bertkit.models.rnn_lm.modeling import RNNForCausalLM

    RNNForCausalLM(RNNLMConfig(vocab_size=40, hidden_size=8, rnn_cell="gru")).save_pretrained(root / "rnn-lm")
    return {"bert": FIXTURES / "BertForSequenceClassification", "gpt2": root / "gpt2", "vit": root / "vit",
            "lm": FIXTURES / "GPTForCausalLM", "translation": FIXTURES / "Seq2SeqTransformer",
            "rnn": FIXTURES / "RNNSeq2Seq-gru-attention", "rnn-lm": root / "rnn-lm"}


@pytest.mark.parametrize("name, family, lines", [
    ("bert", "BERT", ["(BERT: BertForSequenceClassification)", "task checkpoint   weights under 'bert.', heads: "
                                                                "classifier", "layers            2  hidden"]),
    ("gpt2", "GPT-2", ["(GPT-2: GPT2LMHeadModel)", "layers            2  hidden 16  heads 4  ffn 64",
                       "vocab             300  positions 32 (absolute)", "bos 50256  eos 50256  pad None"]),
    ("vit", "ViT", ["(ViT: ViTForImageClassification)", "1 channel(s), 16 × 16 pixels in 4 × 4 patches",
                    "labels            LABEL_0, LABEL_1, LABEL_2"]),
    ("lm", "GPT-2", ["(GPT-2: no class named)", "layers"]),
    ("translation", "translation", ["(translation: no class named)", "model             Transformer: "]),
    ("rnn", "translation", ["model             GRU with attention: 1 encoder + 1 decoder layers"]),
    ("rnn-lm", "recurrent", ["(recurrent: RNNForCausalLM)", "layers            2 × GRU  hidden 8",
                             "vocab             40, output tied to the token embedding"]),
])
def test_info_summarises_every_family(directories, capsys, name, family, lines):
    assert family_of(directories[name]).name == family
    assert main(["info", str(directories[name])]) == 0
    out, err = capsys.readouterr()
    for line in lines:
        assert line in out, out
    assert "parameters" in out and "weights file" in out
    # only transformers' GPT-2 says something: its bos/eos 50256 lie outside its 300-token vocabulary
    assert err == ("bertkit info: warning: bos_token_id 50256 and eos_token_id 50256 are outside the vocabulary (size "
                   "300): generation cannot start from or stop at them (give a prompt; continuations run to "
                   "max_new_tokens)\n" if name == "gpt2" else "")


@pytest.mark.parametrize("command, name", [("predict", "translation"), ("encode", "vit"), ("export", "lm"),
                                           ("generate", "bert"), ("translate", "gpt2"), ("translate", "rnn-lm")])
def test_a_command_refuses_a_family_it_cannot_serve_naming_it(directories, capsys, command, name):
    path = directories[name]
    argv = {"predict": ["--model", path, "x"], "encode": ["--model", path, "x"],
            "export": ["--model", path, "--onnx", path.parent / "onnx-out"], "generate": ["--model", path, "x"],
            "translate": ["--model", path, "x"]}[command]
    assert main([command, *map(str, argv)]) == 2
    err = capsys.readouterr().err
    family = family_of(path)
    names = [f.name for f in families_serving(command)]
    able = " and ".join(names) if len(names) < 3 else f"{', '.join(names[:-1])} and {names[-1]}"  # "A, B and C"
    assert err == f"bertkit {command}: error: {path} holds a {family.name} model (model_type " \
                  f"'{family.model_types[0] if name != 'lm' else 'bertkit-gpt'}'); {command} takes {able} models\n"


def test_every_family_loads_its_own_class_from_the_registry(directories):
    from bertkit.models.gpt.modeling import GPT2LMHeadModel
    from bertkit.models.seq2seq.rnn import RNNSeq2Seq
    from bertkit.models.vit.modeling import ViTForImageClassification

    with pytest.warns():
        assert type(family_of(directories["gpt2"]).load(directories["gpt2"])) is GPT2LMHeadModel
    assert type(family_of(directories["vit"]).load(directories["vit"])) is ViTForImageClassification
    assert type(family_of(directories["rnn"]).load(directories["rnn"])) is RNNSeq2Seq
    assert type(family_of(directories["rnn-lm"]).load(directories["rnn-lm"])).__name__ == "RNNForCausalLM"
    assert family_for("bert").head("ner").__name__ == "BertForTokenClassification"


def test_the_families_and_what_serves_them():
    assert [f.name for f in FAMILIES] == ["BERT", "ModernBERT", "GPT-2", "ViT", "translation", "recurrent",
                                               "summarization"]
    assert [f.name for f in families_serving("encode")] == ["BERT", "ModernBERT"]
    assert [f.name for f in families_serving("generate")] == ["GPT-2", "recurrent"]
    assert [f.name for f in families_serving("attention")] == ["BERT", "ModernBERT", "GPT-2", "ViT", "translation"]
    assert [f.name for f in families_serving("export")] == ["BERT", "ModernBERT"]
    assert {f.inputs for f in FAMILIES} == {"text", "images"}
    with pytest.raises(ValueError, match="unknown command"):
        require(FIXTURES / "BertModel", "fly")


@pytest.mark.parametrize("old", ["bertkit.config", "bertkit.reference", "bertkit.models.heads", "bertkit.viz",
                                 "bertkit.explain.base", "bertkit.options", "bertkit.atomic", "bertkit.demo"])
def test_a_moved_module_is_found_under_its_new_name_only(old):
    # CHANGELOG.md lists where each went; nothing redirects the old names
    import importlib

    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


@pytest.mark.parametrize("module, old", [("bertkit.training.checkpointing", "CheckpointError"),
                                         ("bertkit.pipelines.demo", "build_vocab"),
                                         ("bertkit.pipelines.vision", "load_image_model"),
                                         ("bertkit.pipelines.vision", "classify_images"),
                                         ("bertkit.data.task_kinds", "label_names")])
def test_a_renamed_name_is_gone_from_its_old_place(module, old):
    import importlib

    with pytest.raises(AttributeError):
        getattr(importlib.import_module(module), old)


def _model_classes() -> dict[str, str]:
    """{name: home module} of every public model class (a PreTrainedModel subclass) defined in bertkit.models."""
    import importlib
    import inspect
    import pkgutil

    import bertkit.models
    from bertkit.models.pretrained import PreTrainedModel

    found = {}
    for info in pkgutil.walk_packages(bertkit.models.__path__, "bertkit.models."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (inspect.isclass(value) and issubclass(value, PreTrainedModel) and value is not PreTrainedModel
                    and value.__module__ == info.name and not name.startswith("_")):
                found[name] = info.name
    return found


def test_every_model_and_head_imports_from_bertkit():
    import importlib

    import bertkit

    classes = _model_classes()
    assert {"BertModel", "BertForPreTraining", "BertForMaskedLM", "BertForSequenceClassification",
            "BertForTokenClassification", "BertForPromptClassification", "BertForQuestionAnswering", "GPT2Model",
            "GPT2LMHeadModel", "ViTModel", "ViTForImageClassification", "Seq2SeqTransformer",
            "RNNSeq2Seq", "RNNForCausalLM"} <= set(classes)
    for name, home in classes.items():
        assert name in bertkit.__all__, name
        assert getattr(bertkit, name) is getattr(importlib.import_module(home), name), name
    from bertkit import BertForQuestionAnswering
    from bertkit.models.bert.heads import BertForQuestionAnswering as home

    assert BertForQuestionAnswering is home


def test_the_public_names_import_from_bertkit():
    import bertkit

    for name in bertkit.__all__:
        assert getattr(bertkit, name) is not None
    assert sorted(dir(bertkit)) == sorted(bertkit.__all__)
