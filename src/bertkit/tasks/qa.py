"""`--task qa`: extractive question answering. A question and a context -> the answer's span in the context, read
in windows of question + context that overlap by --doc-stride tokens; the reader scores each token as the answer's
start and end, and the best span over all windows of a question is its answer (or none, where the training data had
unanswerable questions and "no answer" scores best).

Reads SQuAD-format JSON (bertkit.data.qa) or the named sets squad-excerpt, xquad-en and xquad-zh; keeps the
checkpoint of best dev F1; scores exact match and F1 as the official scripts do (SQuAD's for English, CMRC 2018's
for Chinese). Its training run is bertkit.pipelines.qa; `bertkit predict --question --context` and /predict with
{"question", "context"} answer with it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bertkit.data.task_kinds import TaskKind, register
from bertkit.errors import InputError


def check_question_lengths(served: Any, questions: list[str], single: bool, truncate: bool = False) -> None:
    """422 for a question longer than a reader reads (MAX_QUERY_LENGTH tokens; with "truncate": true it is cut to
    them, as qa_windows cuts it), or one that leaves its windows no room to move through the context (a window holds
    the question, [CLS] and two [SEP], and must take more new context tokens than consecutive windows share)."""
    from bertkit.data.qa import MAX_QUERY_LENGTH, SPECIAL_TOKENS
    from bertkit.inference.serving.payloads import invalid

    length, stride = served.qa["max_length"], served.qa["doc_stride"]
    most = length - SPECIAL_TOKENS - stride - 1
    ids = served.tokenizer(questions, add_special_tokens=False, return_token_type_ids=False,
                           return_attention_mask=False, verbose=False)["input_ids"]
    for index, question in enumerate(ids):
        where = "inputs" if single else f"inputs[{index}]"
        if len(question) > MAX_QUERY_LENGTH and not truncate:
            raise invalid(f"{where}.question has {len(question)} tokens, more than the {MAX_QUERY_LENGTH} a reader "
                          'reads of a question; send a shorter question, or "truncate": true to cut it to them')
        tokens = min(len(question), MAX_QUERY_LENGTH)  # qa_windows cuts a question to its first MAX_QUERY_LENGTH
        if tokens > most:
            raise invalid(f"{where}.question has {tokens} tokens, more than the {most} this reader's windows leave "
                          f"a question ({length} tokens, {stride} of them shared by consecutive windows); send a "
                          "shorter question")


class QA(TaskKind):
    """Questions answered by spans of their contexts."""

    # ---- data ------------------------------------------------------------------------------------

    def labels(self, example: Any) -> list[str]:
        return []  # answers are spans, not labels

    def named_splits(self, name: str, scheme: str) -> dict[str, list]:
        from bertkit.data.qa import load_qa

        return load_qa(name)

    def read_file(self, path: str | os.PathLike, purpose: str = "to use", encoding: str = "utf-8") -> list:
        """The questions of a SQuAD-format file (its answers' offsets checked where it is trained on)."""
        from bertkit.data.qa import read_squad

        return read_squad(Path(path), need_offsets=purpose == "to train on", encoding=encoding)

    # ---- training --------------------------------------------------------------------------------

    def check_options(self, options: Any) -> None:
        """A window must hold more than the context tokens two windows share."""
        from bertkit.data.qa import check_window

        check_window(options.max_length, options.doc_stride, flags=True)

    def train(self, options: Any) -> dict[str, Any]:
        from bertkit.pipelines.qa import finetune_qa

        return finetune_qa(options)

    # ---- prediction and evaluation ---------------------------------------------------------------

    def predict(self, run: Any, model: Any, tokenizer: Any, texts: list[str], pairs: list | None,
                **options: Any) -> list:
        raise InputError("a question-answering reader answers questions about a context, not texts: give "
                         "`bertkit predict --question Q --context C`, or call bertkit.inference.answer_questions")

    def evaluate(self, model: Any, tokenizer: Any, data: str, split: str, encoding: str, flags: bool,
                 **options: Any) -> dict[str, Any]:
        """Exact match and F1 (the official scripts': SQuAD's for English, CMRC 2018's for Chinese)."""
        from bertkit.inference.qa import answer_examples
        from bertkit.training.qa_metrics import qa_scores

        examples = self.read(data, split, "to evaluate on", encoding=encoding)
        options.pop("truncation", None)  # a reader reads a long context in windows: nothing is cut
        answers = answer_examples(model, tokenizer, examples, flags=flags, **options)
        scores = qa_scores({e.id: a["answer"] for e, a in zip(examples, answers)},
                           {e.id: [answer.text for answer in e.answers] for e in examples})
        return {"task": self.family, "data": data, "examples": len(examples), "exact_match": scores["exact_match"],
                "f1": scores["f1"], "metric": scores["metric"], "unanswerable": sum(e.is_impossible for e in examples)}

    def evaluation_lines(self, scores: dict[str, Any], where: str) -> list[str]:
        metric = "SQuAD v1.1's" if scores["metric"] == "squad" else "CMRC 2018's"
        return [f"{where}: {scores['examples']:,} questions ({metric} exact match and F1)",
                f"exact match  {scores['exact_match']:.2f}", f"F1           {scores['f1']:.2f}"]

    # ---- serving ---------------------------------------------------------------------------------

    def serving_state(self, model: Any, path: Path) -> dict[str, Any]:
        from bertkit.inference.qa import qa_settings

        return {"qa": qa_settings(model)}

    def serve_forward(self, served: Any, input_ids: Any, attention_mask: Any, token_type_ids: Any,
                      logits: bool) -> Any:
        from bertkit.inference.qa import span_logits

        return span_logits(served.model, input_ids, attention_mask, token_type_ids)

    async def serve_predict(self, server: Any, served: Any, body: dict[str, Any]) -> Any:
        """A reader's answers, as `bertkit predict --question --context` finds them (inference/qa.py): the same
        windows, the same span logits, the same decoding."""
        from bertkit.data.qa import QAExample, qa_windows
        from bertkit.inference.qa import check_questions, decode_examples, window_rows
        from bertkit.inference.serving.payloads import invalid, questions_request

        query = questions_request(body, server.settings.max_client_batch_size)
        try:
            check_questions(query.questions, query.contexts)
            check_question_lengths(served, query.questions, query.single, query.truncate)
            examples = [QAExample(str(i), q, c) for i, (q, c) in enumerate(zip(query.questions, query.contexts))]
            windows = qa_windows(examples, served.tokenizer, served.qa["max_length"], served.qa["doc_stride"],
                                 labels=False)
        except InputError as err:  # a question too long for a window, undecoded bytes
            raise invalid(str(err)) from None
        server.check_windows(len(windows), served.qa["max_length"], "or shorter contexts")
        logits = await server.infer(window_rows(windows), [window.example for window in windows])
        found = decode_examples(examples, windows, logits, max_answer_length=served.qa["max_answer_length"],
                                impossible=served.qa["impossible"])
        results = [{key: value for key, value in answer.items() if key != "window"} for answer in found]
        return results[0] if query.single else results

    def serve_info(self, served: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        return {"question_answering": dict(served.qa)}, {}

    def serve_summary(self, served: Any) -> str:
        return f", windows of {served.qa.get('max_length')} tokens"


READER = register(QA("qa", "qa", "f1", ("squad-excerpt", "xquad-en", "xquad-zh"), files="SQuAD JSON", served="qa",
                     digits=2,  # percentages, as the official SQuAD scripts print them
                     max_length=384))  # a window of question + context
