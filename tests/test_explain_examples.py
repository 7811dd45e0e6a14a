"""`bertkit explain`'s worked examples: it-animal, toy-task, positions, receptive-field, and the binary counter
beside the positional-encoding columns. Their numbers are what the experiments really measure."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bertkit.cli import main
from bertkit.pictures.explain import REAL_MODEL_TOPICS, explain
from conftest import model_dir_or_skip
from test_figures import assert_real_picture

pytestmark = pytest.mark.xdist_group("explain")


def _pictures_are_real(result, names):
    assert [p.stem for p in result.pictures] == names
    for path in result.pictures:
        assert_real_picture(path)


# ---- positional-encoding: the binary counter -----------------------------------------------------

def test_binary_counter_beside_pe_columns(tmp_path):
    from bertkit.models.functional import sinusoidal_positions
    from bertkit.pictures.explain.positional_encoding import binary_bits

    assert binary_bits(16, 4)[5].tolist() == [1, 0, 1, 0] and binary_bits(16, 4)[12].tolist() == [0, 0, 1, 1]
    n = explain("positional-encoding", out=None, positions=256, shifts=(1,)).numbers
    assert n["bit_flips"] == {0: 63, 1: 31, 2: 15, 3: 7}                       # each higher bit half as often
    assert n["bit_periods"] == {0: 2, 1: 4, 2: 8, 3: 16}
    assert n["bits_of"][11] == [1, 1, 0, 1]
    wavelengths = n["column_wavelengths"]
    assert wavelengths[6] == wavelengths[7] == pytest.approx(2 * math.pi * 10000 ** (6 / 128))     # one (sin, cos)
    assert wavelengths[8] == pytest.approx(2 * math.pi * 10000 ** (8 / 128)) and wavelengths[8] > wavelengths[6]
    pe = sinusoidal_positions(64, 128).double().numpy()
    assert n["column_sign_changes"][6] == int((np.diff(np.sign(pe[:, 6])) != 0).sum()) == 14
    assert n["column_sign_changes"][6] > n["column_sign_changes"][8]          # later columns turn more slowly
    with pytest.raises(ValueError, match="columns must be PE columns 0..127"):
        explain("positional-encoding", out=None, columns=(6, 128))


# ---- toy-task ------------------------------------------------------------------------------------

def test_toy_task_data():
    from bertkit.pictures.explain.toy_task import decode, encode, random_words, targets_of, translate

    assert translate("abc") == "xyz" and translate("cab") == "yzx" and translate("h") == "s"
    words = ["abc", "hgfedcba", "cab", "d"]
    assert [decode(row).rstrip("?") for row in targets_of(encode(words)).tolist()] == [translate(w) for w in words]
    ids = random_words(200, (3, 8), torch.Generator().manual_seed(0))
    lengths = (ids != 0).sum(-1)
    assert lengths.min() == 3 and lengths.max() == 8
    assert ((ids != 0).int().diff(dim=-1) <= 0).all()                          # letters first, then padding


@pytest.fixture(scope="module")
def toy_task(tmp_path_factory):
    return explain("toy-task", out=tmp_path_factory.mktemp("toy"))


def test_toy_task_needs_positions(toy_task):
    n = toy_task.numbers
    assert n["none_letter_accuracy"] < 0.5 and n["none_word_accuracy"] < 0.05     # a bag of letters: no order
    assert n["sinusoidal_letter_accuracy"] > 0.97 and n["sinusoidal_word_accuracy"] > 0.9
    assert all(e["sinusoidal"] == e["target"] for e in n["examples"].values())
    assert n["examples"]["abcdef"]["target"] == "uvwxyz"
    _pictures_are_real(toy_task, ["toy_task_by_position"])


def test_toy_task_refuses_bad_options():
    with pytest.raises(ValueError, match="length must be 2..12"):
        explain("toy-task", out=None, length=1)
    with pytest.raises(ValueError, match="positions must be one of none, sinusoidal, learned, rotary"):
        from bertkit.pictures.explain.toy_task import ToyTransformer
        ToyTransformer("alibi")


# ---- positions -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def positions(tmp_path_factory):
    return explain("positions", out=tmp_path_factory.mktemp("positions"))


def test_positions_learned_sinusoidal_and_rotary(positions):
    n = positions.numbers
    assert n["train_lengths"] == [3, 8]
    reverse, previous = n["reverse"], n["previous"]
    for kind in ("sinusoidal", "learned"):
        for length in (4, 6, 8):
            assert reverse[kind][length]["letters"] > 0.97, (kind, length)
        for length in (10, 12, 16):                 # reversal past the trained lengths: neither generalises
            assert reverse[kind][length]["letters"] < 0.5 and reverse[kind][length]["words"] < 0.05, (kind, length)
            # an offset task, at places never trained: absolute positions lose letters there
            assert previous[kind][length]["words"] < 0.5, (kind, length)
    # rotary positions see offsets only: the reversal (a place in the word) does not fit, the previous letter (an
    # offset) holds at every length
    assert max(reverse["rotary"][length]["letters"] for length in (4, 6, 8)) < 0.8
    for length in (4, 6, 8, 10, 12, 16):
        assert previous["rotary"][length]["words"] > 0.99, length
    assert len(n["by_position_longest"]["learned"]) == 16
    assert "reuses vector 7" in positions.text and "offset 1 is offset 1 at any place" in positions.text
    _pictures_are_real(positions, ["positions_by_length", "positions_by_position"])


def test_learned_positions_past_the_table_reuse_the_last_vector():
    from bertkit.pictures.explain.toy_task import ToyTransformer

    model = ToyTransformer("learned", max_len=8)
    vectors = model.position_vectors(12)
    assert vectors.shape == (12, 32)
    assert torch.equal(vectors[:8], model.learned.weight) and (vectors[8:] == model.learned.weight[7]).all()
    assert ToyTransformer("sinusoidal").position_vectors(12)[9].abs().sum() > 0


# ---- receptive-field -----------------------------------------------------------------------------

def test_receptive_field_formula_matches_gradients(tmp_path):
    from bertkit.pictures.explain.receptive_field import layers_needed

    assert [layers_needed(n, 3) for n in (1, 2, 3, 4, 5, 33)] == [0, 1, 1, 2, 2, 16]
    assert layers_needed(33, 5) == 8 and layers_needed(33, 7) == 6 and layers_needed(10, 2) == 9
    result = explain("receptive-field", out=tmp_path, kernels=(2, 3, 5), tokens=21)
    n = result.numbers
    assert n["agree"] is True
    for k in (2, 3, 5):
        for distance in range(2, 22):
            assert n["measured"][k][distance] == math.ceil((distance - 1) / (k - 1)), (k, distance)
    assert n["field_width"][3] == [3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 21]   # L(k-1) + 1, then the edges
    assert n["field_width"][5][:3] == [5, 9, 13]
    assert n["attention_field_width"] == 21 and n["attention_all_connected"] is True
    _pictures_are_real(result, ["receptive_field_masks", "receptive_field_layers"])


def test_receptive_field_masks_are_bands():
    from torch import nn

    from bertkit.pictures.explain.receptive_field import dependence, same_length_conv

    torch.manual_seed(0)
    masks = dependence(nn.ModuleList(same_length_conv(3) for _ in range(2)), 9, seed=0)
    offset = np.arange(9)[None, :] - np.arange(9)[:, None]                    # input j - output i
    assert (masks[0] == (np.abs(offset) <= 1)).all() and (masks[1] == (np.abs(offset) <= 2)).all()
    even = dependence(nn.ModuleList([same_length_conv(4)]), 9, seed=0)[0]     # one token more after than before
    assert (even == ((offset >= -1) & (offset <= 2))).all()
    with pytest.raises(ValueError, match="kernels must be sizes of at least 2"):
        explain("receptive-field", out=None, kernels=(1,))


# ---- it-animal -----------------------------------------------------------------------------------

def test_it_animal_needs_the_words_as_tokens():
    from bertkit.pictures.explain.it_animal import token_index

    assert token_index(["[CLS]", "it", "was", "[SEP]"], "it", "it was") == 1
    with pytest.raises(ValueError, match="does not keep 'animal' as one token"):
        token_index(["[CLS]", "ani", "##mal", "[SEP]"], "animal", "animal")
    assert REAL_MODEL_TOPICS["it-animal"] == "all-MiniLM-L6-v2"


@pytest.mark.network
@pytest.mark.slow
def test_it_animal_on_minilm(tmp_path, capsys):
    minilm = model_dir_or_skip("all-MiniLM-L6-v2")
    from bertkit.models.bert.modeling import BertModel
    from bertkit.tokenizer import BertTokenizer

    result = explain("it-animal", out=tmp_path, model_dir=minilm)
    n = result.numbers
    assert (n["layers"], n["heads"]) == (6, 12)
    for label in ("tired", "wide"):
        r = n[label]
        weights = np.array(r["weights"])
        assert weights.shape == (6, 12, 15) and r["tokens"][10] == "it"
        assert np.allclose(weights.sum(-1), 1.0, atol=1e-5) and r["row_sum_error"] < 1e-5
        assert sum(r["largest_on"].values()) == 72
    # recompute one head straight from the model: layer 3, head 1, from "it" to "animal"
    model, tok = BertModel.from_pretrained(minilm), BertTokenizer.from_pretrained(minilm)
    with torch.no_grad():
        attentions = model(tok(n["sentences"]["tired"], return_tensors="pt")["input_ids"],
                           output_attentions=True).attentions
    assert n["tired"]["weights"][3][1][2] == pytest.approx(float(attentions[3][0, 1, 10, 2]), abs=1e-5)
    # what this model does: three heads pick 'animal' in each sentence, and 'wide' does not turn them to 'street'
    heads = {label: {word: {(layer, head) for layer, head, _ in n[label][f"heads_to_{word}"]}
                     for word in ("animal", "street")} for label in ("tired", "wide")}
    assert heads["tired"]["animal"] == {(0, 6), (3, 1), (5, 11)} and heads["tired"]["street"] == {(0, 3)}
    assert heads["wide"]["animal"] == {(0, 6), (4, 4), (5, 11)} and heads["wide"]["street"] == {(0, 3)}
    assert n["wide"]["mean_to_animal"] > n["wide"]["mean_to_street"]
    assert n["tired"]["mean_to_animal"] - n["tired"]["mean_to_street"] \
        > n["wide"]["mean_to_animal"] - n["wide"]["mean_to_street"]
    assert "still leans to 'animal'" in result.text
    _pictures_are_real(result, ["it_animal_heads", "it_animal_layers"])
    # the command line reads the English model by default, not m3e-small
    assert main(["explain", "it-animal", "--out", str(tmp_path / "cli")]) == 0
    assert "[CLS] 53" in capsys.readouterr().out
