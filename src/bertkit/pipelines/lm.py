"""Language modelling, end to end: documents -> one token stream -> fixed-length blocks -> a model -> Trainer.

The model is GPT or a recurrent LM (vanilla RNN, LSTM or GRU: models/rnn_lm), trained and scored alike on the same
blocks, so their perplexities compare. A recurrent LM starts every block from a zero state, as GPT starts every
block with no context.

Each document becomes [CLS] text [SEP] in the stream ([CLS] = bos, [SEP] = eos), so generation can start
a document and knows where one ends. Whole documents are held out for evaluation; the report compares
the model's held-out perplexity with that of a unigram model (add-one smoothed token frequencies of the
training stream) on exactly the same predicted tokens.

A trained directory holds config.json + model.safetensors, the tokenizer files, metrics.jsonl and report.json.
"""

from __future__ import annotations

import math
import random
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from bertkit.errors import InputError
from bertkit.models.gpt.configuration import GPT2Config
from bertkit.models.gpt.modeling import GPT2LMHeadModel
from bertkit.models.rnn_lm.configuration import RNNLMConfig
from bertkit.models.rnn_lm.modeling import RNNForCausalLM
from bertkit.pipelines.options import LMOptions
from bertkit.pipelines.presets import GPT_PRESETS, RNN_LM_PRESETS
from bertkit.pipelines.run_directory import holds_out
from bertkit.utils import jsonfiles
from bertkit.utils.atomic import atomic_write_text
from bertkit.utils.devices import to_device

REPORT_NAME = "report.json"
OPTIONS_NAME = "lm_options.json"
SAMPLE_PROMPTS = {"zh": ["今天", "中国经济", "这本书"], "en": ["The", "In the beginning", "This book"]}


def load_texts(specs: Sequence[str]) -> list[str]:
    """Documents as strings, from corpus names (`bertkit.data.corpus.load_documents`) or text files."""
    from bertkit.data import corpus

    documents = []
    for spec in specs:
        docs = corpus.read_text_documents(spec) if Path(spec).exists() else corpus.load_documents(spec)
        documents += [" ".join(doc) for doc in docs]
    documents = [d for d in documents if d.strip()]
    if len(documents) < 2:
        raise InputError(f"{', '.join(specs)}: {len(documents)} non-empty documents; need at least 2 "
                         "(one to train on, one held out)")
    return documents


def token_stream(tokenizer, documents: Sequence[str]) -> list[int]:
    """[CLS] document [SEP] for each document, concatenated."""
    stream: list[int] = []
    for ids in tokenizer(list(documents), add_special_tokens=False)["input_ids"]:
        stream += [tokenizer.cls_token_id, *ids, tokenizer.sep_token_id]
    return stream


def blocks(stream: Sequence[int], block_size: int) -> list[list[int]]:
    """Consecutive, non-overlapping blocks of block_size tokens (the tail that does not fill one is dropped)."""
    return [list(stream[i: i + block_size]) for i in range(0, len(stream) - block_size + 1, block_size)]


def collate_blocks(items: list[list[int]], seeds: list[int] | None = None) -> dict[str, torch.Tensor]:
    """Blocks -> input_ids = labels (the model shifts them: position t predicts token t + 1)."""
    if not items:
        raise ValueError("empty batch: no blocks to collate")
    ids = torch.tensor(items, dtype=torch.long)
    return {"input_ids": ids, "labels": ids}


def unigram_perplexity(train_stream: Sequence[int], eval_blocks: Sequence[Sequence[int]], vocab_size: int) -> float:
    """Perplexity of add-one smoothed unigram frequencies on the tokens a causal LM predicts (all but each
    block's first)."""
    counts = torch.bincount(torch.tensor(train_stream), minlength=vocab_size).double() + 1.0
    logp = (counts / counts.sum()).log()
    targets = torch.tensor([list(b[1:]) for b in eval_blocks])
    return math.exp(-logp[targets].mean().item())


@torch.no_grad()
def model_perplexity(model: torch.nn.Module, eval_blocks: Sequence[Sequence[int]], batch_size: int = 32) -> float:
    """exp(mean next-token cross-entropy) over the held-out blocks, on the device the model is on."""
    model.eval()
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for start in range(0, len(eval_blocks), batch_size):
        ids = to_device(torch.tensor(eval_blocks[start: start + batch_size]), device)
        logits = model(ids).logits[:, :-1].float()
        total += torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1),
                                                   reduction="sum").item()
        count += ids[:, 1:].numel()
    return math.exp(total / count)


def generate_text(model: torch.nn.Module, tokenizer, prompt: str = "", max_new_tokens: int = 50,
                  **sampling: Any) -> str:
    """Continue a prompt from the start of a document ([CLS] prompt ...) until [SEP] or max_new_tokens."""
    from bertkit.tokenizer import detokenize

    ids = [tokenizer.cls_token_id] + tokenizer(prompt, add_special_tokens=False)["input_ids"]
    positions = getattr(model.config, "n_positions", None)  # GPT's; a recurrent LM reads any length
    if positions is not None:
        ids = ids[-(positions - 1):]
        room = positions - len(ids)
        if max_new_tokens > room:
            warnings.warn(f"the model has {positions} positions and the prompt takes {len(ids)}: the "
                          f"continuation stops after {room} tokens, not {max_new_tokens}", stacklevel=2)
            max_new_tokens = room
    out = model.generate(torch.tensor([ids], device=next(model.parameters()).device), max_new_tokens=max_new_tokens,
                         eos_token_id=tokenizer.sep_token_id, pad_token_id=tokenizer.pad_token_id, **sampling)
    text = tokenizer.decode(out[0].tolist(), skip_special_tokens=True)
    return detokenize(text, "zh" if any("\u4e00" <= ch <= "\u9fff" for ch in text) else "en")


def build_tokenizer(options: LMOptions, train_documents: Sequence[str], work_dir: Path):
    from bertkit.data.vocab import build_vocab
    from bertkit.tokenizer import BertTokenizer

    if options.vocab:
        return BertTokenizer.from_pretrained(options.vocab)
    build_vocab(list(train_documents), work_dir, vocab_size=options.vocab_size, lowercase=True)
    return BertTokenizer.from_pretrained(work_dir)


def build_model(options: LMOptions, tokenizer) -> GPT2LMHeadModel | RNNForCausalLM:
    """A fresh GPT or recurrent LM of the options' model and size, over the tokenizer's vocabulary."""
    ids = dict(pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.cls_token_id,
               eos_token_id=tokenizer.sep_token_id)
    torch.manual_seed(options.seed)
    if options.model == "gpt":
        return GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=options.block_size,
                                          **GPT_PRESETS[options.size], resid_pdrop=options.dropout,
                                          embd_pdrop=options.dropout, attn_pdrop=options.dropout, **ids))
    return RNNForCausalLM(RNNLMConfig(vocab_size=len(tokenizer), rnn_cell=options.model,
                                      gru_variant=options.gru_variant, dropout=options.dropout,
                                      tie_word_embeddings=not options.untie_embeddings,
                                      **RNN_LM_PRESETS[options.size], **ids))


@holds_out("bertkit lm-train")
def train_lm(options: LMOptions) -> dict[str, Any]:
    """Documents -> tokenizer -> GPT or recurrent LM -> Trainer -> held-out perplexity vs unigram; writes
    OUT/report.json. The run holds OUT (`run_directory`: an earlier run or model there is refused unless
    options.overwrite)."""
    from bertkit.training.budget import plan_for_budget, probe_batches, seconds_per_step
    from bertkit.training.trainer import Trainer

    device = options.start(OPTIONS_NAME)  # the device, the threads, OUT with these options in it
    out = Path(options.out)
    documents = load_texts(options.corpus)
    random.Random(options.seed).shuffle(documents)
    held = max(1, int(len(documents) * options.eval_fraction))
    eval_documents, train_documents = documents[:held], documents[held:]
    with tempfile.TemporaryDirectory() as work_dir:
        tokenizer = build_tokenizer(options, train_documents, Path(work_dir))
    train_stream = token_stream(tokenizer, train_documents)
    train_blocks = blocks(train_stream, options.block_size)
    eval_blocks = blocks(token_stream(tokenizer, eval_documents), options.block_size)[: options.max_eval_blocks]
    if not train_blocks or not eval_blocks:
        raise InputError(f"too little text for blocks of {options.block_size} tokens "
                         f"({len(train_blocks)} training, {len(eval_blocks)} held-out blocks)")
    model = build_model(options, tokenizer)
    batch_size = min(options.batch_size, len(train_blocks))
    if options.batch_size > batch_size:
        warnings.warn(f"--batch-size {options.batch_size} is more than the {batch_size} training blocks of "
                      f"{options.block_size} tokens: each step takes all {batch_size}", stacklevel=2)
    # blocks of one length (probe_batches: the first few batches); no evaluation in the plan: the one held-out
    # evaluation comes after the clock's last reading
    probes = [collate_blocks([train_blocks[i] for i in batch])
              for batch in probe_batches(len(train_blocks), batch_size)]
    max_steps = options.max_steps or plan_for_budget(seconds_per_step(model, probes, options.bf16, device=device),
                                                     minutes=options.minutes, device=device)
    args = options.training_arguments(max_steps, batch_size=batch_size, lr_schedule="cosine", weight_decay=0.1,
                                      eval_every=None, save_total_limit=1)  # held-out perplexity once, at the end
    eval_fn = lambda m: {"perplexity": model_perplexity(m, eval_blocks[:64])}
    state = Trainer(model, args, train_blocks, collate_blocks, eval_fn=eval_fn, tokenizer=tokenizer).train()

    lang = "zh" if sum("\u4e00" <= ch <= "\u9fff" for ch in documents[0]) > len(documents[0]) / 4 else "en"
    generator = torch.Generator().manual_seed(options.seed)
    report = {
        "perplexity": model_perplexity(model, eval_blocks),
        "unigram_perplexity": unigram_perplexity(train_stream, eval_blocks, len(tokenizer)),
        "train_seconds": state.seconds, "steps": state.step, "stop_reason": state.stop_reason,
        "parameters": model.num_parameters(), "model": options.model, "size": options.size,
        "vocab_size": len(tokenizer),
        "train_tokens": len(train_stream), "tokens_seen": state.step * batch_size * options.block_size,
        "eval_tokens": len(eval_blocks) * (options.block_size - 1), "held_out_documents": len(eval_documents),
        "samples": {prompt: generate_text(model, tokenizer, prompt, 40, do_sample=True, top_k=20,
                                          generator=generator)
                    for prompt in SAMPLE_PROMPTS[lang]},
    }
    atomic_write_text(out / REPORT_NAME, jsonfiles.dumps(report, indent=2, ensure_ascii=False) + "\n")
    return report
