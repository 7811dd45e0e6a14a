"""Training sentence vectors: the losses by hand, the cached (GradCache) loss's gradients against the uncached loss's,
its dropout replayed, and two torchrun processes gathering their vectors against one process with the whole batch."""

from __future__ import annotations

import copy
import json
import math
import random
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from bertkit.data.embedding_data import check_crop, crop_view
from bertkit.errors import InputError
from bertkit.training.embedding_losses import cosent, embedding_loss, info_nce, simcse
from bertkit.training.embedding_model import EmbeddingCollator, EmbeddingSettings
from tolerance import assert_close
from torchrun import run_torchrun

sys.path.insert(0, str(Path(__file__).parent))
import _embedding_worker as worker  # noqa: E402

WORKER = Path(__file__).parent / "_embedding_worker.py"

pytestmark = pytest.mark.usefixtures("one_thread")


# ---- the losses by hand --------------------------------------------------------------------------

def test_info_nce_by_hand_with_a_hard_negative_and_both_ways():
    anchors = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    positives = torch.tensor([[1.0, 1.0], [0.0, 2.0]])            # cosines to anchor 0: 1/√2, 0
    negatives = torch.tensor([[-1.0, 0.0], [1.0, 0.0]])           # cosines to anchor 0: -1, 1
    t = 0.5
    loss = info_nce(anchors, torch.cat([positives, negatives]), temperature=t)
    s = 1 / math.sqrt(2)
    row0 = -math.log(math.exp(s / t) / sum(math.exp(c / t) for c in (s, 0, -1, 1)))
    row1 = -math.log(math.exp(1 / t) / sum(math.exp(c / t) for c in (s, 1, 0, 0)))
    assert loss.item() == pytest.approx((row0 + row1) / 2, rel=1e-6)
    # the other way: each positive against the anchors (no hard negatives there)
    back0 = -math.log(math.exp(s / t) / (math.exp(s / t) + math.exp(s / t)))
    back1 = -math.log(math.exp(1 / t) / (math.exp(0 / t) + math.exp(1 / t)))
    both = info_nce(anchors, torch.cat([positives, negatives]), temperature=t, symmetric=True)
    assert both.item() == pytest.approx(((row0 + row1) / 2 + (back0 + back1) / 2) / 2, rel=1e-6)


def test_cosent_by_hand_only_the_order_of_the_scores_counts():
    first = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    second = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])  # cosines 1, 0, -1
    t = 0.5
    # scores say pair 1 > pair 0 > pair 2: the terms (i, j) with s_i > s_j are (1,0), (1,2), (0,2)
    expected = math.log(1 + math.exp((1 - 0) / t) + math.exp((-1 - 0) / t) + math.exp((-1 - 1) / t))
    assert cosent(first, second, torch.tensor([0.5, 0.9, 0.1]), t).item() == pytest.approx(expected, rel=1e-6)
    assert cosent(first, second, torch.tensor([5.0, 9.0, 1.0]), t).item() == pytest.approx(expected, rel=1e-6)
    # the gold order is the cosines' order: only the small terms are left
    best = math.log(1 + math.exp(-1 / t) + math.exp(-1 / t) + math.exp(-2 / t))
    assert cosent(first, second, torch.tensor([3.0, 2.0, 1.0]), t).item() == pytest.approx(best, rel=1e-6)


def test_simcse_is_info_nce_between_two_views_and_losses_are_named():
    a, b = torch.randn(5, 8), torch.randn(5, 8)
    assert simcse(a, b).item() == pytest.approx(info_nce(a, b).item())
    columns = torch.stack([a, b])
    assert embedding_loss("simcse", columns, None).item() == pytest.approx(simcse(a, b).item())
    with pytest.raises(ValueError, match="cosent loss needs scored pairs"):
        embedding_loss("cosent", columns, None)
    with pytest.raises(ValueError, match="loss must be one of"):
        embedding_loss("triplet", columns, None)


# ---- cropped views -------------------------------------------------------------------------------

CLS, SEP = 2, 3


def test_a_cropped_view_is_one_span_of_the_text_in_its_cls_and_sep():
    ids = [CLS, *range(10, 30), SEP]                               # 20 tokens between [CLS] and [SEP]
    rng = random.Random(0)
    for _ in range(200):
        view = crop_view(ids, 0.3, 0.7, rng)
        body = view[1:-1]
        assert view[0] == CLS and view[-1] == SEP
        assert 6 <= len(body) <= 14                                # round(20 x share), share in [0.3, 0.7]
        assert body == list(range(body[0], body[0] + len(body)))   # contiguous: a span, not a sample
    assert crop_view(ids, 0.3, 0.7, random.Random(5)) == crop_view(ids, 0.3, 0.7, random.Random(5))
    assert crop_view(ids, 1.0, 1.0, random.Random(1)) == ids        # a share of 1 keeps the whole text
    assert crop_view([CLS, 7, SEP], 0.1, 0.2, random.Random(1)) == [CLS, 7, SEP]  # at least one token stays
    assert crop_view([CLS, SEP], 0.3, 0.7, random.Random(1)) == [CLS, SEP]


def test_the_collator_crops_two_views_of_each_text_from_the_trainers_seeds():
    features = [{"texts": [[CLS, *range(10, 10 + n), SEP]]} for n in (12, 20, 8)]
    collate = EmbeddingCollator(0, crop=(0.3, 0.7))
    batch = collate(features, seeds=[11, 12, 13])
    assert batch["input_ids"].shape[0] == 6                       # column 0: first views, column 1: second views
    first, second = batch["input_ids"][:3], batch["input_ids"][3:]
    lengths = batch["attention_mask"].sum(1)
    for row, feature in enumerate(features):
        text = feature["texts"][0]
        for view, length in ((first[row], lengths[row]), (second[row], lengths[3 + row])):
            kept = view[1:int(length) - 1].tolist()
            assert kept and set(kept) <= set(text[1:-1])
    assert not torch.equal(first, second)                         # two different spans of the same texts
    again = collate(features, seeds=[11, 12, 13])
    assert torch.equal(again["input_ids"], batch["input_ids"])    # the same seeds crop the same way
    assert not torch.equal(collate(features, seeds=[21, 22, 23])["input_ids"], batch["input_ids"])


@pytest.mark.parametrize("crop,message", [((0.5,), "takes two shares"), ((0.7, 0.3), "0 < LOW <= HIGH <= 1"),
                                          ((0.0, 0.5), "0 < LOW <= HIGH <= 1"), ((0.5, 1.2), "got 0.5 1.2")])
def test_a_crop_outside_zero_to_one_is_refused(crop, message):
    with pytest.raises(InputError, match=message):
        check_crop(crop)


# ---- the cached loss -----------------------------------------------------------------------------

def batch_of(features):
    return EmbeddingCollator(0)(features)


def gradients(model, batch) -> tuple[float, dict[str, torch.Tensor]]:
    output = model(**batch)
    output.loss.backward()
    return output.loss.item(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("loss", ["infonce", "cosent", "simcse"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_cached_loss_has_the_uncached_loss_and_gradients(loss, dtype):
    """Dropout off. In float64 the cached loss's gradients are the uncached loss's to 1e-12: the method is exact. In
    fp32 they agree within 1e-6 of the gradient's largest entry (CoSENT's reach 25 at temperature 0.05): the
    mini-batches sum the weights' gradients over the texts in another order than one batch does, which moves the
    last bits (absolute differences up to about 2e-5 for CoSENT, 4e-6 for InfoNCE, 1.5e-6 for SimCSE here)."""
    columns = worker.COLUMNS[loss]
    batch = batch_of(worker.make_features(12, columns, scored=loss == "cosent", seed=1))
    model = worker.build_model(loss, columns, None).to(dtype).train()
    plain_loss, plain = gradients(model, batch)
    largest = max(float(g.abs().max()) for g in plain.values())
    bound = 1e-12 if dtype == torch.float64 else 1e-6
    for size in (1, 5, 100):
        cached_model = copy.deepcopy(model)
        cached_model.zero_grad(set_to_none=True)
        cached_model.settings = EmbeddingSettings(loss, columns=columns, cached_batch=size,
                                                  symmetric=loss == "infonce")
        cached_loss, cached = gradients(cached_model, batch)
        assert cached_loss == pytest.approx(plain_loss, abs=bound * 10)
        assert cached.keys() == plain.keys() and "encoder.pooler.dense.weight" not in plain  # the pooler is held
        worst = max(float((cached[name] - plain[name]).abs().max()) for name in plain)
        assert worst <= bound * max(1.0, largest), (size, worst, largest)


def test_the_cached_loss_replays_each_mini_batchs_dropout():
    """With dropout on, the backward runs each mini-batch again with the random state of its first pass: the
    gradients are those of a forward that ran the same mini-batches with their graphs."""
    features = worker.make_features(8, 1, scored=False, seed=2)
    model = worker.build_model("simcse", 1, 3)
    model.encoder.config.hidden_dropout_prob = 0.1
    for module in model.modules():
        if hasattr(module, "p"):
            module.p = 0.1
        if hasattr(module, "dropout_prob"):
            module.dropout_prob = 0.1
    model.train()
    batch = batch_of(features)
    reference = copy.deepcopy(model)
    torch.manual_seed(11)
    cached_loss, cached = gradients(model, batch)
    torch.manual_seed(11)  # the same mini-batches, forward with their graphs, in the same order
    texts, rows = reference._texts(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    vectors = torch.cat([reference.embed(*chunk) for chunk in reference._chunks(texts)])
    loss = reference._loss(vectors, rows, None)
    loss.backward()
    assert loss.item() == pytest.approx(cached_loss, abs=1e-6)
    for name, p in reference.named_parameters():
        if p.grad is not None:
            assert_close(cached[name], p.grad, rtol=1e-6, msg=name)
    torch.manual_seed(11)
    assert abs(model(**batch).loss.item() - model.eval()(**batch).loss.item()) > 1e-4  # dropout did act


def test_columns_run_trimmed_to_their_own_longest():
    shapes = []
    model = worker.build_model("infonce", 2, None)
    model.encoder.register_forward_hook(lambda module, args, out: shapes.append(tuple(args[0].shape)))
    features = [{"input_ids": [2, 5, 3], "texts": [[2, 5, 3], [2, *range(5, 25), 3]]},
                {"input_ids": [2, 6, 7, 3], "texts": [[2, 6, 7, 3], [2, 6, 3]]}]
    model(**batch_of(features))
    assert shapes == [(2, 4), (2, 22)]


# ---- two processes = one process with the whole batch --------------------------------------------

def read_losses(out: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("loss,cached", [("infonce", None), ("cosent", None), ("simcse", 2)])
def test_torchrun_two_processes_gather_to_one_process_with_the_whole_batch(tmp_path, loss, cached):
    extra = ["--cached-batch", str(cached)] if cached else []
    run_torchrun([str(WORKER), str(tmp_path / "two"), "--loss", loss, *extra], tmp_path / "two",
                 tmp_path / "torchrun.log")
    worker.main([str(tmp_path / "one"), "--loss", loss, *extra])
    assert_close(read_losses(tmp_path / "two"), read_losses(tmp_path / "one"), rtol=1e-5, msg="losses")
    two = load_file(str(tmp_path / "two" / "model.safetensors"))
    for name, value in load_file(str(tmp_path / "one" / "model.safetensors")).items():
        assert_close(two[name], value, rtol=1e-5, msg=name)
    assert json.loads((tmp_path / "two" / "modules.json").read_text())[1]["path"] == "1_Pooling"


def test_gathering_without_a_process_group_is_the_tensor_itself():
    from bertkit.training.distributed import gather_with_grad

    x = torch.randn(3, 2, requires_grad=True)
    assert gather_with_grad(x) is x
    assert F.normalize(x).shape == (3, 2)
