"""The server's dynamic batching without HTTP: batches fill to the padded-token budget in arrival order, every
request gets its own outputs in order, a failing batch fails only its requests, a text whose output is not finite
fails only itself, and stopping answers what is queued."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from bertkit.inference.batching import EncodedText, NonFiniteOutputError
from bertkit.inference.serving.batcher import Batcher, Job
from bertkit.inference.serving.model import ServedModel
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.modeling import BertModel
from bertkit.tokenizer import BertTokenizer

TIMEOUT = 30.0


def rows(*lengths: int) -> list[EncodedText]:
    return [EncodedText(list(range(n)), [0] * n) for n in lengths]


def run_jobs(batcher: Batcher, groups: list[list[EncodedText]], start_first: bool = False) -> list[list]:
    """Submit one job per group (all before the worker starts, unless `start_first`), and their outputs."""
    async def main():
        loop = asyncio.get_running_loop()
        if start_first:
            batcher.start()
        jobs = [Job(group, loop) for group in groups]
        for job in jobs:
            batcher.submit(job)
        if not start_first:
            batcher.start()
        return await asyncio.wait_for(asyncio.gather(*(job.future for job in jobs)), TIMEOUT)

    try:
        return asyncio.run(main())
    finally:
        batcher.stop(TIMEOUT)


def test_batches_fill_the_padded_token_budget_in_arrival_order():
    seen = []

    def run(batch):
        seen.append([len(row.input_ids) for row in batch])
        return [f"{len(row.input_ids)}" for row in batch]

    sizes = []
    batcher = Batcher(run, max_batch_tokens=12, observe=lambda n, tokens, seconds: sizes.append((n, tokens)))
    outputs = run_jobs(batcher, [rows(4, 4), rows(3, 4, 2, 20)])
    # 3 rows x 4 = 12 fit; a 4th would make 16; 20 is over the budget and goes alone
    assert seen == [[4, 4, 3], [4, 2], [20]]
    assert sizes == [(3, 12), (2, 8), (1, 20)]
    assert outputs == [["4", "4"], ["3", "4", "2", "20"]]
    assert not batcher.alive


def test_a_failing_batch_fails_its_requests_and_the_worker_serves_on():
    calls = []

    def run(batch):
        calls.append(len(batch))
        if len(calls) == 1:
            raise RuntimeError("out of memory")
        return [len(row.input_ids) for row in batch]

    batcher = Batcher(run, max_batch_tokens=4)
    first, second = run_jobs(batcher, [rows(2, 2), rows(3)])
    assert all(isinstance(output, RuntimeError) for output in first)
    assert second == [3]


def test_stop_answers_what_is_queued_and_refuses_more():
    batcher = Batcher(lambda batch: [len(row.input_ids) for row in batch], max_batch_tokens=100)
    assert run_jobs(batcher, [rows(n) for n in range(1, 30)], start_first=True) == [[n] for n in range(1, 30)]

    async def late():
        batcher.submit(Job(rows(1), asyncio.get_running_loop()))

    with pytest.raises(RuntimeError, match="stopped"):
        asyncio.run(late())
    with pytest.raises(ValueError, match="max_batch_tokens"):
        Batcher(lambda batch: batch, max_batch_tokens=0)


def test_a_text_whose_output_is_not_finite_fails_alone(tmp_path):
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "cat"]
    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=32, max_position_embeddings=16))
    model.save_pretrained(tmp_path)
    BertTokenizer({token: i for i, token in enumerate(vocab)}).save_pretrained(tmp_path)
    served = ServedModel.load(tmp_path)
    with torch.no_grad():
        served.model.embeddings.word_embeddings.weight[vocab.index("bad")] = float("nan")
    outputs = served.run(served.rows(["good cat", "bad cat", "cat"]))
    assert isinstance(outputs[1], NonFiniteOutputError)
    alone = served.run(served.rows(["good cat", "cat"]))
    np.testing.assert_allclose(outputs[0], alone[0], atol=1e-6)
    np.testing.assert_allclose(outputs[2], alone[1], atol=1e-6)
