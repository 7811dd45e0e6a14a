"""Time to quality: how good a pretrained BERT is when the clock stops, bertkit's recipe against transformers'.

One machine, one corpus (the built-in Chinese corpora plus the THUCNews training headlines, as `bertkit
demo` pretrains on), one character vocabulary, one held-out probe (documents never trained on):

- transformers: `BertForPreTraining` with BERT's standard recipe, trained for FACTOR x M minutes: the `mini`
  size (4 layers, hidden 256), masked LM (15%, 80/10/10, static masks) + next-sentence prediction, sequences
  of 128, batch 32, AdamW lr 1e-4 (weight decay 0.01, none on biases and LayerNorm), linear warmup (6%) and
  decay over the steps that fit (timed first, like bertkit's --minutes), dropout 0.1, fp32, clipping at 1.0;
- bertkit: `bertkit pretrain --recipe RECIPE` for M minutes, the clock run by its own budget.

Both are scored by the same code on the same probe: masked-LM accuracy on held-out single segments of 128
tokens masked as BERT masks (15%, the same positions for both), NSP accuracy on held-out segment pairs where
the model has an NSP head, and a downstream probe: each model fine-tuned on 200 labelled THUCNews headlines
(stratified, three seeds, the same steps and learning rate for both) and scored on the 1,000 test headlines.
The clocks count training only: transformers' evaluations pause its clock; bertkit's clock includes its own
periodic evaluations (they cost it a few seconds).

    python benchmarks/bench_time_to_quality.py --minutes 10 --json runs/ttq/result.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
import warnings
from pathlib import Path

import torch

from bertkit.data.pretraining.instances import PretrainingCollator
from bertkit.pipelines.demo import build_demo_vocab, pretraining_corpus
from bertkit.pipelines.demo_plan import finetune_steps
from bertkit.pipelines.finetune import finetune
from bertkit.pipelines.options import FinetuneOptions, PretrainOptions, recipe_options
from bertkit.pipelines.presets import PRETRAIN_RECIPES
from bertkit.pipelines.pretrain import PretrainingRun, prepare, pretrain

SEQ = 128
PROBE_SIZE = 512
SEED = 42
EVAL_FRACTION = 0.01  # bertkit pretrain's default: both sides hold out the same documents


# ---- the data and the probe ---------------------------------------------------------------------

def bert_data(vocab: Path, out: Path) -> PretrainingRun:
    """The corpus as BERT's recipe trains on it (15% static masks, at most 20 per sequence, one copy, NSP, sequences
    of 128), and the held-out probe: what `bertkit pretrain` builds with these options and the same documents held
    out, read from the same token store."""
    return prepare(PretrainOptions(corpus=pretraining_corpus(), vocab=str(vocab), out=str(out), max_steps=1,
                                   config="mini", masking="static", dupe_factor=1, max_predictions_per_seq=20,
                                   max_seq_length=SEQ, eval_fraction=EVAL_FRACTION, seed=SEED,
                                   max_eval_instances=PROBE_SIZE, progress=False))


# ---- the probe -----------------------------------------------------------------------------------

@torch.no_grad()
def score(model, singles, pairs, pad_token_id: int, batch_size: int = 64) -> dict[str, float]:
    """Masked-LM accuracy on `singles`, NSP accuracy on `pairs`: the same code for either library's model."""
    collate = PretrainingCollator(pad_token_id, masking=None)
    model.eval()
    correct = total = nsp_correct = nsp_total = 0
    for start in range(0, len(singles), batch_size):
        batch = collate(singles[start:start + batch_size])
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    token_type_ids=batch["token_type_ids"])
        logits = out.prediction_logits if hasattr(out, "prediction_logits") else out.logits   # (B, T, V)
        chosen = batch["labels"] != -100
        correct += int((logits[chosen].argmax(-1) == batch["labels"][chosen]).sum())
        total += int(chosen.sum())
    for start in range(0, len(pairs), batch_size):
        batch = collate(pairs[start:start + batch_size])
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    token_type_ids=batch["token_type_ids"])
        nsp = getattr(out, "seq_relationship_logits", None)
        if nsp is None:
            break
        nsp_correct += int((nsp.argmax(-1) == batch["next_sentence_label"]).sum())
        nsp_total += len(batch["next_sentence_label"])
    model.train()
    result = {"mlm_accuracy": correct / total}
    if nsp_total:
        result["nsp_accuracy"] = nsp_correct / nsp_total
    return result


def probe_finetune(model_dir: Path, out: Path, labels: int, seeds: int) -> dict[str, float]:
    """Fine-tune on `labels` THUCNews headlines (each seed another stratified subset) -> mean test accuracy."""
    accuracies = []
    for seed in range(seeds):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore")
            result = finetune(FinetuneOptions(
                task="classify", model=str(model_dir), train="thucnews", out=str(out / f"probe-{seed}"),
                max_train_examples=labels, batch_size=16, max_steps=finetune_steps(labels, 16, 1.0), learning_rate=5e-4,
                warmup_ratio=0.1, max_length=64, select_best=False, seed=seed, progress=False))
        accuracies.append(result["test_accuracy"])
    return {"probe_accuracy": statistics.mean(accuracies), "probe_accuracy_std": statistics.pstdev(accuracies),
            "probe_accuracies": accuracies}


# ---- transformers' standard recipe ---------------------------------------------------------------

def train_transformers(data: PretrainingRun, minutes: float, out: Path) -> dict:
    """BertForPreTraining, BERT's recipe, until the clock stops; held-out scores at ten points on the way."""
    import transformers

    transformers.logging.set_verbosity_error()
    tokenizer, instances = data.tokenizer, data.data.train_dataset
    singles, pairs = data.data.eval_singles, data.data.eval_pairs
    collate = PretrainingCollator(tokenizer.pad_token_id, data.data.masking)
    config = transformers.BertConfig(vocab_size=len(tokenizer), hidden_size=256, num_hidden_layers=4,
                                     num_attention_heads=4, intermediate_size=1024, max_position_embeddings=512,
                                     pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(SEED)
    model = transformers.BertForPreTraining(config).train()
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias") or "LayerNorm" in n]
    decay = [p for n, p in model.named_parameters() if not (n.endswith("bias") or "LayerNorm" in n)]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=1e-4)
    order = torch.randperm(len(instances), generator=torch.Generator().manual_seed(SEED)).tolist()

    def batch_at(step: int) -> dict:
        k = step * 32 % (len(order) - 32)
        return collate([instances[i] for i in order[k:k + 32]])

    def step_once(batch: dict) -> float:
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())

    # plan the steps that fit, as bertkit's --minutes does: time a few steps of a copy, then size the schedule
    probe_model = transformers.BertForPreTraining(config).train()
    probe_optimizer = torch.optim.AdamW(probe_model.parameters(), lr=1e-6)
    times = []
    for k in range(8):
        start = time.perf_counter()
        probe_model(**batch_at(k)).loss.backward()
        probe_optimizer.step()
        probe_optimizer.zero_grad()
        times.append(time.perf_counter() - start)
    del probe_model, probe_optimizer
    planned = int(0.97 * minutes * 60 / statistics.median(times[2:]))
    scheduler = transformers.get_linear_schedule_with_warmup(optimizer, math.ceil(0.06 * planned), planned)

    budget, clock, step, curve, losses = minutes * 60, 0.0, 0, [], []
    marks = [budget * (k + 1) / 10 for k in range(10)]
    while clock < budget and step < planned:
        start = time.perf_counter()
        losses.append(step_once(batch_at(step)))
        scheduler.step()
        clock += time.perf_counter() - start
        step += 1
        if marks and (clock >= marks[0] or step == planned):
            while marks and clock >= marks[0]:
                marks.pop(0)
            curve.append({"minutes": clock / 60, "step": step, **score(model, singles, pairs, tokenizer.pad_token_id)})
            print(f"  transformers {clock / 60:5.1f} min, step {step}/{planned}: {curve[-1]}", flush=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    final = score(model, singles, pairs, tokenizer.pad_token_id)
    return {"minutes": clock / 60, "steps": step, "planned_steps": planned, "curve": curve, **final,
            "final_loss": statistics.mean(losses[-50:])}


# ---- bertkit's recipe ----------------------------------------------------------------------------

def train_bertkit(recipe: str, vocab: Path, singles, pairs, minutes: float, out: Path, tokenizer) -> dict:
    from bertkit.models.bert.configuration import BertConfig
    from bertkit.models.bert.heads import model_class_for

    options = recipe_options(recipe, corpus=pretraining_corpus(), vocab=str(vocab), out=str(out), minutes=minutes,
                             eval_fraction=EVAL_FRACTION, seed=SEED, max_eval_instances=PROBE_SIZE, progress=False)
    if options.max_seq_length != SEQ:
        raise SystemExit(f"recipe {recipe!r} ends at sequence length {options.max_seq_length}; the probe is {SEQ}")
    state = pretrain(options)
    # the curve is the run's own held-out evaluations (the same documents and masks as the probe here); the
    # final scores are taken below by the same code as transformers'
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    curve = [{"minutes": r["seconds"] / 60, "step": r["step"], "mlm_accuracy": r["eval_mlm_accuracy"],
              **({"nsp_accuracy": r["eval_nsp_accuracy"]} if "eval_nsp_accuracy" in r else {})}
             for r in records if "eval_mlm_accuracy" in r]
    config = BertConfig.from_pretrained(out)
    model = model_class_for(config).from_pretrained(out)
    final = score(model, singles, pairs, tokenizer.pad_token_id)
    return {"minutes": state.seconds / 60, "steps": state.step, "recipe": recipe, "curve": curve, **final}


# ---- the report ----------------------------------------------------------------------------------

def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, style in (("bertkit", "o-"), ("transformers", "s--")):
        if name in results:
            curve = results[name]["curve"]
            label = f"{name} ({results[name].get('recipe', 'BERT standard, mini')})"
            ax.plot([p["minutes"] for p in curve], [p["mlm_accuracy"] for p in curve], style, label=label)
    ax.set_xlabel("training wall-clock (minutes)")
    ax.set_ylabel("held-out masked-LM accuracy")
    ax.set_title("Time to quality on this machine")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="bertkit's budget M")
    parser.add_argument("--factor", type=float, default=3.0, help="transformers trains FACTOR x M minutes")
    parser.add_argument("--recipe", default="crammed", choices=sorted(PRETRAIN_RECIPES))
    parser.add_argument("--out", default="runs/ttq")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--probe-labels", type=int, default=200)
    parser.add_argument("--probe-seeds", type=int, default=3)
    parser.add_argument("--skip-transformers", action="store_true", help="bertkit only (recipe work)")
    args = parser.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    vocab = build_demo_vocab(out / "vocab")
    data = bert_data(vocab, out / "transformers")
    tokenizer, singles, pairs = data.tokenizer, data.data.eval_singles, data.data.eval_pairs
    print(f"probe: {len(singles)} held-out segments ({sum(len(i.input_ids) for i in singles):,} tokens), "
          f"{len(pairs)} pairs ({data.data.report.measured['documents']:,} documents to train on)", flush=True)

    results: dict = {}
    print(f"bertkit, recipe {args.recipe}, {args.minutes:g} minutes", flush=True)
    results["bertkit"] = train_bertkit(args.recipe, vocab, singles, pairs, args.minutes, out / "bertkit", tokenizer)
    if not args.skip_transformers:
        print(f"transformers, BERT's standard recipe, {args.factor * args.minutes:g} minutes", flush=True)
        results["transformers"] = train_transformers(data, args.factor * args.minutes, out / "transformers")
    for name in results:
        print(f"probe fine-tuning of {name} on {args.probe_labels} headlines x {args.probe_seeds} seeds", flush=True)
        results[name].update(probe_finetune(out / name, out / f"{name}-probe", args.probe_labels, args.probe_seeds))

    plot(results, out / "time_to_quality.png")
    print(f"\n| | minutes | steps | held-out MLM accuracy | NSP accuracy | probe ({args.probe_labels} labels) |")
    print("|---|---|---|---|---|---|")
    for name, r in results.items():
        nsp = f"{r['nsp_accuracy']:.3f}" if "nsp_accuracy" in r else "-"
        print(f"| {name} | {r['minutes']:.1f} | {r['steps']:,} | {r['mlm_accuracy']:.4f} | {nsp} | "
              f"{r['probe_accuracy']:.4f} ± {r['probe_accuracy_std']:.4f} |")
    if args.json:
        summary = {name: {"minutes": r["minutes"], "mlm_accuracy": r["mlm_accuracy"],
                          "probe_accuracy": r["probe_accuracy"]} for name, r in results.items()}
        Path(args.json).write_text(json.dumps({**summary, "details": results}, indent=2))
    print(f"curve: {out / 'time_to_quality.png'}")


if __name__ == "__main__":
    main()
