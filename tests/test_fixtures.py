"""Checkpoints saved by earlier bertkit still load and compute what they computed when saved.

tests/fixtures/checkpoints/NAME/ holds a tiny model of each family as its `save_pretrained` wrote it, with
inputs and outputs recorded at the time (tests/fixtures/make_fixtures.py says which code wrote them).
"""

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tolerance import assert_close

FIXTURES = Path(__file__).parent / "fixtures" / "checkpoints"


def _load(name: str, directory: Path):
    from bertkit.models.bert import heads
    from bertkit.models.bert.modeling import BertModel
    from bertkit.models.gpt.modeling import GPT2LMHeadModel
    from bertkit.models.seq2seq.transformer import load_seq2seq

    family = name.split("-")[0]
    if family == "BertModel":
        return BertModel.from_pretrained(directory)
    if family.startswith("Bert"):
        return getattr(heads, family).from_pretrained(directory)
    if family == "GPTForCausalLM":  # bertkit's earlier GPT: its names are mapped onto GPT-2's on load
        return GPT2LMHeadModel.from_pretrained(directory)
    return load_seq2seq(directory)


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.iterdir()))
def test_saved_checkpoint_loads_and_computes_the_recorded_outputs(name):
    directory = FIXTURES / name
    recorded = load_file(str(directory / "expected.safetensors"))
    inputs = {k.removeprefix("input."): v for k, v in recorded.items() if k.startswith("input.")}
    outputs = {k.removeprefix("output."): v for k, v in recorded.items() if k.startswith("output.")}
    model = _load(name, directory)
    assert not model.training
    with torch.no_grad():
        result = model(**inputs)
    for field, expected in outputs.items():
        assert_close(getattr(result, field), expected, msg=f"{name}: {field}")


def test_every_family_has_a_fixture():
    names = {p.name.split("-")[0] for p in FIXTURES.iterdir()}
    assert names == {"BertModel", "BertForPreTraining", "BertForSequenceClassification", "BertForTokenClassification",
                     "GPTForCausalLM", "Seq2SeqTransformer", "RNNSeq2Seq"}
