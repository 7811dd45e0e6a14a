"""End-to-end recipes built from the library parts: pretrain, finetune, predict/evaluate, translation, the
language model. A pipeline never imports a sibling pipeline; what two of them share lives below them
(`bertkit.data.task_kinds`, `bertkit.inference`, `bertkit.training`, `bertkit.data`), and a recipe over
pipelines (the demo) lives above them (`bertkit.pipelines.demo`)."""
