#!/usr/bin/env bash
# bertkit's checks on a CUDA machine, in one go: the GPU tests, a clock-budgeted BERT-base pretraining, torchrun with
# more processes than GPUs, the GPU benchmark, and the whole suite with the GPU visible. Each writes its log under
# $OUT (default ./gpu-check); the last lines printed are a summary. The suite runs beside the GPU tests.
#
#   bash benchmarks/gpu_check.sh                 # everything (about 8 minutes on one H100)
#   STEPS="gpu bench" bash benchmarks/gpu_check.sh
#   SUITE_TESTS="tests/test_trainer.py" STEPS="suite" bash benchmarks/gpu_check.sh   # some of the suite
#
# A machine without the network may lack packages bertkit uses (jieba, nltk, orjson, starlette, uvicorn, a CJK font):
# put their wheels in .whl/ (pip download on a machine with the network) and this script installs them first.
set -u
OUT=${OUT:-gpu-check}
mkdir -p "$OUT"
STEPS=${STEPS:-"gpu minutes torchrun bench suite"}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
PY=${PYTHON:-python3}
summary=()

if ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/bertkit-site .whl/*.whl \
    && export PYTHONPATH=/tmp/bertkit-site${PYTHONPATH:+:$PYTHONPATH}
fi
# bertkit itself, its `bertkit` command included, without touching the machine's packages (unless this checkout is
# what the Python already imports: a development machine's environment is left as it is)
if ! $PY -c "import bertkit, os, sys; sys.exit(os.path.realpath(bertkit.__file__) != os.path.realpath('src/bertkit/__init__.py'))" \
    2>/dev/null && ! $PY -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1; then
  export PYTHONPATH=$PWD/src:${PYTHONPATH:-}
fi
if ! command -v bertkit >/dev/null || [ "$(command -v bertkit)" != "$(dirname "$(command -v $PY)")/bertkit" ]; then
  mkdir -p /tmp/bertkit-bin && printf '#!/bin/sh\nexec %s -m bertkit "$@"\n' "$(command -v $PY)" >/tmp/bertkit-bin/bertkit
  chmod +x /tmp/bertkit-bin/bertkit && export PATH=/tmp/bertkit-bin:$PATH
fi
{ nvidia-smi; $PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"; } \
  >"$OUT/machine.txt" 2>&1

has() { case " $STEPS " in *" $1 "*) return 0;; esac; return 1; }

# The whole suite with the GPU visible (the real-data tests skip: no cache, no network) runs beside the GPU tests:
# it is mostly CPU work, and a GPU machine has the cores. Both end before anything below is timed.
suite_pid=
if has suite; then
  marks=(); if has gpu; then marks=(-m "not gpu"); fi  # the GPU tests run on their own
  timeout ${SUITE_SECONDS:-420} $PY -m pytest -q -n ${SUITE_WORKERS:-12} --dist loadgroup "${marks[@]}" \
    -p no:cacheprovider ${SUITE_TESTS:-} >"$OUT/suite.log" 2>&1 &
  suite_pid=$!
fi

if has gpu; then  # every training command's tiny run on CUDA, parity and bf16 there
  timeout ${GPU_SECONDS:-300} $PY -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu.py >"$OUT/gpu-tests.log" 2>&1
  summary+=("pytest -m gpu: $(tail -n 1 "$OUT/gpu-tests.log")")
fi
if [ -n "$suite_pid" ]; then
  wait $suite_pid
  summary+=("suite with CUDA visible: $(tail -n 1 "$OUT/suite.log")")
fi

if has minutes || has torchrun; then  # a synthetic Chinese corpus and its character vocabulary
  $PY - <<'EOF'
import random
from pathlib import Path
rng = random.Random(0)
chars = [chr(0x4E00 + i) for i in range(3000)]
root = Path("/tmp/gpu-corpus"); (root / "vocab").mkdir(parents=True, exist_ok=True)
docs = ["\n".join("".join(rng.choice(chars) for _ in range(rng.randint(10, 40))) + "。" for _ in range(rng.randint(4, 12)))
        for _ in range(4000)]
(root / "corpus.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
(root / "vocab" / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "。", *chars]) + "\n",
                                          encoding="utf-8")
EOF
fi

if has minutes; then  # --minutes 1 on BERT-base: 55-65 s of training, steps planned within 15% of steps done
  start=$(date +%s)
  timeout ${MINUTES_SECONDS:-240} bertkit pretrain --corpus /tmp/gpu-corpus/corpus.txt --vocab /tmp/gpu-corpus/vocab --config base \
    --minutes 1 --bf16 --batch-size 256 --out /tmp/gpu-base --overwrite --no-progress ${MINUTES_ARGS:-} \
    >"$OUT/minutes.log" 2>&1
  code=$?
  wall=$(( $(date +%s) - start ))
  summary+=("pretrain --config base --minutes 1: exit $code, wall ${wall}s; $($PY -c "
import json, statistics; r = json.load(open('/tmp/gpu-base/train_results.json'))
shares = [json.loads(line).get('data_share') for line in open('/tmp/gpu-base/metrics.jsonl')]
shares = [s for s in shares if s is not None]
print(f\"trained {r['seconds']:.1f} s, {r['step']} of {r['total_steps']} planned steps \"
      f\"({r['step'] / r['total_steps']:.0%}), {r['stop_reason']}; {r['seconds'] / max(1, r['step']) * 1e3:.1f} ms a step\"
      + (f\", {statistics.median(shares):.0%} of it getting the batches\" if shares else ''))" \
      2>&1 | tail -n 1); $(grep -m 1 -o 'a step timed at .*' "$OUT/minutes.log")")
fi

if has torchrun; then  # two processes, one GPU: one clear error naming both counts
  timeout 120 torchrun --standalone --nproc-per-node 2 -m bertkit pretrain --corpus /tmp/gpu-corpus/corpus.txt \
    --vocab /tmp/gpu-corpus/vocab --config tiny --max-steps 5 --out /tmp/gpu-ddp --overwrite --no-progress \
    >"$OUT/torchrun.log" 2>&1
  summary+=("torchrun 2 on 1 GPU: exit $?; $(grep -m 1 'error:' "$OUT/torchrun.log")")
fi

if has bench; then
  texts=()  # real texts, written where bertkit's cache holds them (bench_gpu.py --save-texts .gpu-data)
  if [ -f .gpu-data/headlines.txt ]; then texts=(--texts .gpu-data/headlines.txt .gpu-data/bodies.txt); fi
  timeout ${BENCH_SECONDS:-420} $PY benchmarks/bench_gpu.py --json "$OUT/bench.json" "${texts[@]}" --tiny-workers ${TINY_WORKERS:-default,0,8} ${BENCH_ARGS:-} \
    >"$OUT/bench.log" 2>&1
  summary+=("bench_gpu: exit $?")
fi

echo "---- summary"
printf '%s\n' "${summary[@]}"
if has bench; then tail -n 25 "$OUT/bench.log"; fi
