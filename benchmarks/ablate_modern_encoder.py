"""What each of ModernBERT's changes buys at bertkit's scale: the tiny BERT against the tiny modern encoder, and the
modern encoder with each change turned back to BERT's alone.

Every run pretrains by masked LM alone, with the main job's recipe (`--recipe crammed`: fresh masks each pass at
30%, lr 1e-3, dropout off, bf16 where native) on the main job's corpus (THUCNews' unlabelled training headlines),
for the same wall clock, measured so that a busy machine cannot tilt it: each run's training step is timed first on
the whole machine (`pipelines.pretrain.plan_steps`, as `bertkit pretrain --minutes` plans), which gives the steps
it can take in M minutes; it then trains exactly those steps (two runs side by side on one thread each with
`--jobs 2`: the steps, and so the result, do not depend on the speed). A change that makes a step dearer gets
fewer steps. Each run is scored by the same code as bench_time_to_quality.py: held-out masked-LM accuracy (the
pretraining run's held-out headlines, 15% masked: only 80 headlines, 224 masked characters, so its standard error
is about 0.03), and fine-tuned on 200 labelled THUCNews headlines with three seeds. Beside it, the masked-LM
accuracy on the 1,000 THUCNews test headlines (never in the pretraining text; 15% of their characters masked with
one fixed seed, each replaced by [MASK]: 2,806 predictions, a standard error near 0.009), computed from the saved
model, also for rows an earlier run logged without it.

The rows (the modern encoder is `pretrain --config modern-tiny`: 3 layers x 128, a GeGLU of 256, pre-norm without
biases, rotary positions, one global layer and two local over 64 tokens):
  bert-tiny             the main job's tiny BERT (2 layers x 128, ffn 512, post-LN, learned positions)
  modern-tiny           the modern encoder
  learned-positions     its rotary positions turned into BERT's learned table
  plain-ffn             its GeGLU turned into BERT's GELU feed-forward, 384 wide (the same weights: 3 x 128 x 256)
  post-ln               its pre-norm turned into BERT's post-LN
  all-global            every layer global (no local window)
  swiglu, rms-norm      NeoBERT's choices swapped in: SiLU for the gate's GELU, RMSNorm for LayerNorm

    python benchmarks/ablate_modern_encoder.py --minutes 5 --jobs 2 --out runs/modern-ablation
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ablate_pretraining import run_group, start_ablation  # noqa: E402
from bench_time_to_quality import EVAL_FRACTION, PROBE_SIZE, SEED, SEQ, bert_data, probe_finetune, score  # noqa: E402
from bertkit.models.modernbert.configuration import FULL  # noqa: E402
from bertkit.pipelines.demo import pretraining_corpus  # noqa: E402
from bertkit.pipelines.options import recipe_options  # noqa: E402
from bertkit.pipelines.presets import model_config  # noqa: E402
from bertkit.pipelines.pretrain import plan_steps, prepare, pretrain  # noqa: E402
from bertkit.tokenizer import BertTokenizer  # noqa: E402
from bertkit.utils.constants import MLM  # noqa: E402

# (name, what it is, the preset it starts from, the changes to it)
ROWS: list[tuple[str, str, str, dict]] = [
    ("bert-tiny", "the main job's tiny BERT", "tiny", {}),
    ("modern-tiny", "the tiny modern encoder", "modern-tiny", {}),
    ("learned-positions", "- rotary positions (a learned table)", "modern-tiny",
     dict(position_embedding_type="absolute")),
    ("plain-ffn", "- gated feed-forward (GELU, 384 wide)", "modern-tiny", dict(gated_mlp=False, intermediate_size=384)),
    ("post-ln", "- pre-norm (post-LN)", "modern-tiny", dict(normalize_before=False)),
    ("all-global", "- local attention (every layer global)", "modern-tiny", dict(layer_types=[FULL] * 3)),
    ("swiglu", "+ SwiGLU for GeGLU", "modern-tiny", dict(hidden_activation="silu")),
    ("rms-norm", "+ RMSNorm for LayerNorm", "modern-tiny", dict(norm_type="rms_norm")),
]


def config_file(preset: str, changes: dict, vocab: Path, path: Path) -> Path:
    """The row's config.json: the preset sized to the vocabulary, with its changes."""
    tokenizer = BertTokenizer.from_pretrained(vocab)
    config = model_config(preset, len(tokenizer), False, SEQ, tokenizer.pad_token_id).replace(**changes)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(config.to_json_string(), encoding="utf-8")
    return path


def options_for(config: Path, out: Path, vocab: Path, minutes: float):
    return recipe_options("crammed", config=str(config), objective=MLM, corpus=pretraining_corpus(),
                          vocab=str(vocab), out=str(out), max_seq_length=SEQ, eval_fraction=EVAL_FRACTION,
                          seed=SEED, max_eval_instances=PROBE_SIZE, progress=False, minutes=minutes)


WIDE_PROBE = 1000  # THUCNews test headlines the second masked-LM accuracy reads (the test split holds 1,000)


@torch.no_grad()
def test_mlm_accuracy(model_dir: Path, headlines: int = WIDE_PROBE, seed: int = SEED) -> float:
    """Masked-LM accuracy of the model in `model_dir` on the first `headlines` THUCNews test headlines, 15% of their
    characters (never [CLS] or [SEP]) replaced by [MASK], chosen with `seed`: the same positions for every model."""
    from bertkit.data.tasks import load_classification
    from bertkit.models.registry import family_of
    from bertkit.tokenizer import load_tokenizer

    texts = [example.text for example in load_classification("thucnews")["test"][:headlines]]
    tokenizer, model = load_tokenizer(model_dir), family_of(model_dir).load(model_dir).eval()
    generator = torch.Generator().manual_seed(seed)
    correct = total = 0
    for start in range(0, len(texts), 128):
        batch = tokenizer(texts[start:start + 128], padding=True, truncation=True, max_length=SEQ, return_tensors="pt")
        ids, mask = batch["input_ids"], batch["attention_mask"]
        chosen = (torch.rand(ids.shape, generator=generator) < 0.15) & (mask == 1) & \
            ~torch.isin(ids, torch.tensor(tokenizer.all_special_ids))
        out = model(input_ids=ids.masked_fill(chosen, tokenizer.mask_token_id), attention_mask=mask,
                    token_type_ids=torch.zeros_like(ids))
        logits = out.prediction_logits if hasattr(out, "prediction_logits") else out.logits          # (B, T, V)
        correct += int((logits[chosen].argmax(-1) == ids[chosen]).sum())
        total += int(chosen.sum())
    return correct / total


def train_one(spec: dict) -> dict:
    """Train one row for its planned steps and score it (run in a subprocess by `main`)."""
    import dataclasses

    from bertkit.models.registry import family_of

    out, vocab = Path(spec["out"]), Path(spec["vocab"])
    options = dataclasses.replace(options_for(Path(spec["config"]), out, vocab, spec["minutes"]),
                                  max_steps=spec["steps"], minutes=None)
    started = time.perf_counter()
    state = pretrain(options)
    train_seconds = time.perf_counter() - started
    probe = bert_data(vocab, out.parent / ".probe")  # the stores and the plan are cached: nothing is tokenized again
    model = family_of(out).load(out)
    parameters = sum(p.numel() for p in model.parameters())
    result = {"name": spec["name"], "steps": state.step, "train_seconds": train_seconds, "parameters": parameters,
              **score(model, probe.data.eval_singles, probe.data.eval_pairs, probe.tokenizer.pad_token_id)}
    result["test_mlm_accuracy"] = test_mlm_accuracy(out)
    result.update(probe_finetune(out, out.parent / f"{out.name}-probe", 200, 3))
    return result


def main() -> None:
    started = start_ablation(__doc__.splitlines()[0], 5.0, "runs/modern-ablation", train_one)
    if started is None:
        return
    args, out, vocab, log, done = started
    specs = []
    for name, _, preset, changes in ROWS:  # every step timed first, on the whole machine, before any run starts
        if name in done:
            continue
        config = config_file(preset, changes, vocab, out / "configs" / f"{name}.json")
        options = options_for(config, out / name, vocab, args.minutes)
        steps = plan_steps(prepare(options), options)
        print(f"  planned {name}: {steps} steps in {args.minutes:g} minutes", flush=True)
        specs.append({"name": name, "config": str(config), "steps": steps, "out": str(out / name),
                      "vocab": str(vocab), "minutes": args.minutes})

    def record(result: dict) -> None:
        done[result["name"]] = result
        with open(log, "a", encoding="utf-8") as f:
            f.write(json.dumps(result) + "\n")
        print(f"  {result['name']}: MLM {result['mlm_accuracy']:.4f}, probe {result['probe_accuracy']:.3f}",
              flush=True)

    run_group(specs, args.jobs, record, script=__file__)
    if any("test_mlm_accuracy" not in r for r in done.values()):  # rows an earlier run logged without it
        for name, r in done.items():
            r.setdefault("test_mlm_accuracy", test_mlm_accuracy(out / name))
        log.write_text("".join(json.dumps(r) + "\n" for r in done.values()), encoding="utf-8")
    modern = done["modern-tiny"]
    lines = [f"| row | parameters | steps in {args.minutes:g} min | MLM accuracy, held out (80 headlines) | MLM "
             f"accuracy, {WIDE_PROBE:,} test headlines | 200 labels, test accuracy (3 seeds) | against modern-tiny "
             "(test MLM, 200 labels) |", "|---|---|---|---|---|---|---|"]
    for name, label, _, _ in ROWS:
        r = done[name]
        mlm = r["test_mlm_accuracy"] - modern["test_mlm_accuracy"]
        probe = r["probe_accuracy"] - modern["probe_accuracy"]
        against = "" if name == "modern-tiny" else f"{mlm:+.4f}, {probe:+.3f}"
        lines.append(f"| {name}: {label} | {r['parameters']:,} | {r['steps']:,} | {r['mlm_accuracy']:.4f} | "
                     f"{r['test_mlm_accuracy']:.4f} | {r['probe_accuracy']:.3f} ± {r['probe_accuracy_std']:.3f} | "
                     f"{against} |")
    (out / "ablation.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
