"""`bertkit explain`: each topic's numbers say what the Transformer/BERT tutorials claim, and its pictures are drawn."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bertkit.cli import main
from bertkit.models.functional import sinusoidal_positions
from bertkit.pictures.explain import TOPICS, explain
from bertkit.pictures.explain.positional_encoding import shift_matrix
from conftest import model_dir_or_skip
from test_figures import assert_real_picture
from tolerance import allowed_difference, assert_close

pytestmark = pytest.mark.xdist_group("explain")  # module fixtures (a browser, the topics' runs) once

CHEAP_TOPICS = ("positional-encoding", "permutation", "layernorm", "scaling", "residual", "rnn-gradients")
PICTURES = {
    "positional-encoding": ["pe_heatmap_50x128", "pe_heatmap_2048x512", "pe_similarity_100x16", "pe_dot_by_distance",
                            "pe_columns_vs_binary", "rope_scores_16"],
    "permutation": ["permutation"],
    "layernorm": ["layernorm_vs_batchnorm"],
    "scaling": ["scaling_entropy"],
    "residual": ["residual_gradients"],
    "rnn-gradients": ["rnn_gradients"],
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Each cheap topic run once, pictures included."""
    out = tmp_path_factory.mktemp("explain")
    return {topic: explain(topic, out=out) for topic in CHEAP_TOPICS}


def test_topic_list():
    assert set(TOPICS) == {*CHEAP_TOPICS, "attention", "multihead", "patches", "contextual", "it-animal", "toy-task",
                           "positions", "receptive-field", "unilm"}
    with pytest.raises(ValueError, match="unknown topic 'rope'"):
        explain("rope")


@pytest.mark.parametrize("topic", CHEAP_TOPICS)
def test_pictures_are_written(results, topic):
    result = results[topic]
    assert [p.stem for p in result.pictures] == PICTURES[topic]
    for path in result.pictures:
        assert_real_picture(path)
    assert all(f"picture  {p}" in result.report() for p in result.pictures)


# ---- positional-encoding -------------------------------------------------------------------------

def test_positional_encoding_numbers(results):
    n = results["positional-encoding"].numbers
    expected = [[0, 1, 0, 1], [0.841, 0.540, 0.010, 1.000], [0.909, -0.416, 0.020, 1.000]]
    assert np.allclose(n["pe_d4"], expected, atol=1e-3)
    assert np.allclose(n["pe2_from_pe1"], expected[2], atol=1e-3)                     # M_1 PE(1) = PE(2)
    assert np.allclose(n["shift_matrix_k1_d4"], [[0.540, 0.841, 0, 0], [-0.841, 0.540, 0, 0],
                                                 [0, 0, 1.000, 0.010], [0, 0, -0.010, 1.000]], atol=1e-3)
    for k, error in n["shift_max_error"].items():                                   # one M_k for all 2048 pos
        assert error < 1e-6, (k, error)
        assert n["shift_orthogonality_error"][k] < 1e-12
    assert n["norm_min"] == pytest.approx(8.0, abs=1e-5) and n["norm_max"] == pytest.approx(8.0, abs=1e-5)
    dots = n["dot_by_distance"]
    assert dots[0] == pytest.approx(64.0, abs=1e-4)
    assert dots[0] > dots[1] > dots[2] > dots[5] > dots[10] > dots[50] > dots[100]
    assert max(n["dot_spread_over_pos"].values()) < 1e-5                            # depends on k only
    # rotary positions: a query and a key turned by t and s score the same at every pair with one offset s - t
    assert max(n["rope_spread_by_offset"].values()) < 1e-10
    assert min(n["added_spread_by_offset"].values()) > 1.0                        # added PE: position leaks in


def test_positional_encoding_prints_the_table(capsys, tmp_path):
    assert main(["explain", "positional-encoding", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    for row in ("[ 0.000  1.000  0.000  1.000]", "[ 0.841  0.540  0.010  1.000]", "[ 0.909 -0.416  0.020  1.000]"):
        assert row in printed
    assert f"picture  {tmp_path / 'pe_heatmap_50x128.png'}" in printed
    assert (tmp_path / "pe_similarity_100x16.png").exists()


@pytest.mark.parametrize("dim, pos, k", [(8, 0, 1), (8, 17, 3), (64, 250, 40), (512, 1000, 511)])
def test_shift_matrix_maps_pe_pos_to_pe_pos_plus_k(dim, pos, k):
    pe = sinusoidal_positions(pos + k + 1, dim).double().numpy()
    assert np.allclose(shift_matrix(k, dim) @ pe[pos], pe[pos + k], atol=1e-6)


def test_shift_matrix_needs_even_dim():
    with pytest.raises(ValueError, match="dim must be even"):
        shift_matrix(1, 5)


# ---- permutation, layernorm, scaling, residual ---------------------------------------------------

def test_permutation_numbers(results):
    n = results["permutation"].numbers
    without, with_ = n["without_positions"], n["with_positions"]
    assert n["order"] == [0, 2, 3, 4, 5, 1]
    assert max(without.values()) < 1e-4          # outputs follow their words; the two "the"s are identical
    assert min(with_.values()) > 0.05            # positions: moving a word changes every output


def test_layernorm_numbers(results):
    n = results["layernorm"].numbers
    assert n["ln_sentence_change"] < 1e-6 < 0.1 < n["bn_sentence_change"]
    assert n["ln_token_mean"] < 1e-5 and n["ln_token_std_error"] < 1e-4
    assert n["bn_mean_shift_by_padding"] > 0.1     # padding drags BatchNorm's per-feature mean
    assert n["bn_feature_mean_real"] > 0.1         # so real tokens come out off-centre
    assert 0.3 < n["padding_fraction_a"] < 0.4


def test_scaling_numbers(results):
    n = results["scaling"].numbers
    dims = n["dims"]
    unscaled = [n[d]["entropy_unscaled"] for d in dims]
    scaled = [n[d]["entropy_scaled"] for d in dims]
    assert all(a > b for a, b in zip(unscaled, unscaled[1:])), unscaled     # entropy falls with d_k unscaled
    assert max(scaled) - min(scaled) < 0.1 and min(scaled) > 2.5             # and stays put when scaled
    assert max(scaled) < n["log_keys"]
    assert unscaled[-1] < 0.1 * scaled[-1]
    for d in dims:
        assert n[d]["score_std_unscaled"] == pytest.approx(math.sqrt(d), rel=0.1)
    grads = [n[d]["softmax_grad_unscaled"] for d in dims]
    assert all(a > b for a, b in zip(grads, grads[1:]))


def test_residual_numbers(results):
    n = results["residual"].numbers
    assert n[24]["residual"] >= 10 * n[24]["plain"]
    plain = [n[d]["plain"] for d in sorted(n)]
    assert all(a > b for a, b in zip(plain, plain[1:]))                      # vanishes with depth
    residual = [n[d]["residual"] for d in sorted(n)]
    assert max(residual) / min(residual) < 3                                  # does not
    assert n[1]["ratio"] == pytest.approx(1.0, rel=1e-3)                      # one block: same gradient path


def test_rnn_gradients_numbers(results):
    n = results["rnn-gradients"].numbers
    rnn = n["RNN"]["relative"]
    assert len(rnn) == 60 and rnn[-1] == 1.0
    assert all(a < b for a, b in zip(rnn, rnn[1:]))                          # shrinks at every step back
    assert n["RNN"]["first_over_last"] < 1e-2
    # the LSTM keeps orders of magnitude more, and more the more its forget gates remember
    assert n["LSTM b_f=1"]["first_over_last"] > 1e6 * n["RNN"]["first_over_last"]
    assert n["LSTM b_f=0"]["first_over_last"] < n["LSTM b_f=1"]["first_over_last"] < 1e-3
    assert n["LSTM chrono"]["first_over_last"] > 1e-2
    # attention: every earlier step alike, whatever its distance
    assert n["Transformer"]["spread_before_last"] < 3
    assert 1 / 3 < n["Transformer"]["first_over_previous"] < 3
    text = results["rnn-gradients"].text
    assert "steps back" in text and "Jozefowicz" in text and "chrono" in text


def test_numbers_only_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = explain("scaling", out=None, dims=(4, 64))
    assert result.pictures == [] and list(tmp_path.iterdir()) == []
    assert result.numbers[4]["entropy_unscaled"] > result.numbers[64]["entropy_unscaled"]


def test_bad_picture_format():
    with pytest.raises(ValueError, match="'png' or 'svg'"):
        explain("scaling", fmt="gif")


@pytest.mark.parametrize("text, what", [("", "empty"), ("   ", "only white space")])
def test_an_empty_text_is_refused_not_replaced_by_the_default(text, what, tmp_path, capsys):
    assert main(["explain", "attention", "--text", text, "--out", str(tmp_path / "pictures")]) == 2
    assert capsys.readouterr().err == (f"bertkit explain: error: the --text is {what}: it has no tokens, so nothing "
                                       "made for it could mean anything\n")
    assert not (tmp_path / "pictures").exists()


def test_cli_unknown_topic(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["explain", "rope"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'rope'" in capsys.readouterr().err


# ---- the real model ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def m3e_small():
    return model_dir_or_skip("m3e-small")


@pytest.mark.network
@pytest.mark.slow
def test_attention_topic_on_m3e_small(m3e_small, tmp_path):
    from bertkit.models.bert.modeling import BertModel
    from bertkit.tokenizer import BertTokenizer

    result = explain("attention", out=tmp_path, model_dir=m3e_small)
    n = result.numbers
    tokens = n["tokens"]
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    assert "".join(tokens[1:-1]) == "北京是中国的首都，也是一座历史悠久的城市。"
    L, H, T, _ = n["shape"]
    assert (L, H, T) == (4, 8, len(tokens))
    # recompute two of the numbers straight from the model
    model, tok = BertModel.from_pretrained(m3e_small), BertTokenizer.from_pretrained(m3e_small)
    enc = tok("北京是中国的首都，也是一座历史悠久的城市。", return_tensors="pt")
    with torch.no_grad():
        attentions = model(enc["input_ids"], output_attentions=True).attentions
    for layer, summary in enumerate(n["layers"]):
        assert summary["row_sum_error"] < 1e-5
        assert 0 < summary["entropy"] < math.log(T)
        assert summary["to_cls"] == pytest.approx(float(attentions[layer][0, :, :, 0].mean()), abs=1e-5)
        assert summary["to_sep"] == pytest.approx(float(attentions[layer][0, :, :, -1].mean()), abs=1e-5)
    assert [p.name for p in result.pictures] == [*(f"attention_layer{i}.png" for i in range(4)),
                                                 "attention_mean_per_layer.png", "attention.html"]
    for path in result.pictures[:-1]:
        assert_real_picture(path, min_side=300)
    assert "北" in result.pictures[-1].read_text(encoding="utf-8")


@pytest.mark.network
@pytest.mark.slow
def test_multihead_topic_on_m3e_small(m3e_small, tmp_path):
    result = explain("multihead", out=tmp_path, model_dir=m3e_small)
    heads = result.numbers["heads"]
    assert len(heads) == 32
    for head in heads:
        assert sum(head["profile"].values()) == pytest.approx(1.0, abs=1e-3)
        assert head["mean_distance"] > 0.5
    # heads differ: m3e-small has sharp previous-token and next-token heads next to broad ones
    best = {habit: max((h["share"] for h in heads if h["habit"] == habit), default=0)
            for habit in ("previous token", "next token")}
    assert best["previous token"] > 0.8 and best["next token"] > 0.8, best
    assert result.numbers["habit_counts"]["broad"] >= 8
    assert len({h["habit"] for h in heads}) >= 4
    distances = [h["mean_distance"] for h in heads]
    assert max(distances) > 3 * min(distances)
    assert [p.name for p in result.pictures] == ["multihead_profile.png", "multihead_distance.png"]
    for path in result.pictures:
        assert_real_picture(path)


# ---- patches, contextual -------------------------------------------------------------------------

def _drawn_seven() -> np.ndarray:
    digit = np.zeros((28, 28), dtype=np.uint8)
    digit[6:9, 6:22] = 255                                   # the bar
    for row in range(9, 24):                                 # the stroke down to the left
        column = 21 - (row - 9) // 2
        digit[row, column - 1:column + 2] = 200
    return digit


def test_patches_linear_equals_strided_convolution(tmp_path):
    from bertkit.pictures.explain.patches import flatten_patches, linear_from_conv

    result = explain("patches", out=tmp_path, digit=_drawn_seven())
    n = result.numbers
    assert set(n["cases"]) == {"digit 28 × 28, patch 4", "digit 28 × 28, patch 7", "digit 28 × 28, patch 14",
                               "colour 3 × 32 × 32, patch 4", "colour 3 × 32 × 32, patch 8"}
    for name, case in n["cases"].items():  # the convolution's and the matmul's rounding: relative to the output
        assert case["max_abs_difference"] <= allowed_difference(case["max_abs_output"], 1e-6), (name, case)
        assert case["max_abs_output"] > 0.1
    assert (n["cases"]["digit 28 × 28, patch 7"]["patches"], n["cases"]["digit 28 × 28, patch 7"]["vector_length"]) \
        == (16, 49)
    assert n["cases"]["colour 3 × 32 × 32, patch 8"]["vector_length"] == 192
    assert [p.name for p in result.pictures] == ["patches_grid.png", "patches_sequence.png"]
    for path in result.pictures:
        assert_real_picture(path)
    # the flattening really is patch by patch, row by row, channel first
    images = torch.arange(2 * 3 * 4 * 6, dtype=torch.float32).view(2, 3, 4, 6)
    patches = flatten_patches(images, 2)                                       # (2, 6, 12)
    assert torch.equal(patches[1, 4], images[1, :, 2:4, 2:4].reshape(-1))     # row 1, column 1 of a 2 × 3 grid
    # and a mismatch would show: the same weights on patches read column by column disagree
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 4, kernel_size=2, stride=2)
    linear = linear_from_conv(conv)
    x = torch.randn(1, 3, 4, 6)
    with torch.no_grad():
        by_conv = conv(x).flatten(2).transpose(1, 2)
        assert_close(linear(flatten_patches(x, 2)), by_conv, rtol=1e-6)
        assert (linear(flatten_patches(x.transpose(2, 3), 2)) - by_conv).abs().max() > 0.1


def test_patches_refuses_a_wrong_digit():
    with pytest.raises(ValueError, match="28 × 28 grey image"):
        explain("patches", out=None, digit=np.zeros((28, 27)))


@pytest.mark.network
def test_patches_draws_a_real_digit(tmp_path):
    from conftest import fetch_or_skip

    fetch_or_skip("mnist")
    result = explain("patches", out=None)
    assert result.numbers["digit_label"] == 7
    for name, case in result.numbers["cases"].items():
        assert case["max_abs_difference"] <= allowed_difference(case["max_abs_output"], 1e-6), (name, case)


@pytest.mark.network
@pytest.mark.slow
def test_contextual_topic_on_m3e_small(m3e_small, tmp_path):
    result = explain("contextual", out=tmp_path, model_dir=m3e_small)
    for name, n in result.numbers.items():
        static, contextual = np.array(n["static_cosine"]), np.array(n["contextual_cosine"])
        assert n["static_max_difference"] == 0.0 and np.allclose(static, 1.0, atol=1e-6)   # one vector, always
        off = ~np.eye(len(contextual), dtype=bool)
        assert contextual[off].max() < 0.95                                     # the context moves it
        assert n["same_sense_mean"] > n["other_sense_mean"] + 0.1, name         # and by meaning
    assert result.numbers["hang_xing"]["character"] == "行"
    assert "same sense" in result.text and "word2vec" in result.text
    assert [p.name for p in result.pictures] == ["contextual_hang_xing.png", "contextual_zhang_chang.png"]
    for path in result.pictures:
        assert_real_picture(path)


def test_the_readme_lists_the_topics_the_cli_has():
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    line = next(line for line in readme.splitlines() if line.startswith("| `bertkit explain TOPIC`"))
    assert re.findall(r"`([a-z-]+)`", line.split("|")[2]) == list(TOPICS)
