"""The HTTP routes, shaped like text-embeddings-inference's so its clients carry over, on Starlette.

    POST /embed            {"inputs": text | [text], "normalize": true, "truncate": false, "truncation_direction":
                           "Right", "prompt_name": null, "dimensions": null} -> [[float]]
    POST /embed_all        {"inputs": text | [text], "truncate", "truncation_direction", "prompt_name"}
                           -> [[[float]]]: every token's vector ([CLS] and [SEP] too), per text
    POST /similarity       {"inputs": {"source_sentence": text, "sentences": [text]}, "parameters": {"truncate",
                           "truncation_direction", "prompt_name"}} -> [float]: each sentence's cosine to the source
    POST /predict          {"inputs": text | [text, pair] | [[text], ...], "raw_scores": false, ...} -> a classifier's
                           [{"score", "label"}] (every label, best first), a tagger's [{"entity", "start", "end",
                           "text", "score"}]; a reader: {"inputs": {"question", "context"} | [...]} -> {"answer",
                           "score", "start", "end"}
    POST /rerank           {"query": text, "texts": [text], "raw_scores", "return_text", "truncate",
                           "truncation_direction"} -> [{"index", "score", "text"?}], best first (a cross-encoder)
    POST /tokenize         {"inputs": text | [text], "add_special_tokens": true, "prompt_name": null}
                           -> [[{"id", "text", "special", "start", "stop"}]]
    POST /decode           {"ids": [id] | [[id]], "skip_special_tokens": true} -> [text]
    POST /v1/embeddings    OpenAI's embeddings request and answer (float or base64 vectors, unit length,
                           `dimensions`)
    GET  /health           200 when the model is ready, 503 while it loads
    GET  /info             the model, its task, number format, longest input, and the server's limits
    GET  /metrics          Prometheus text (metrics.py)

A single text gets the same answer shape as a list of one, as TEI's does. Offsets (`start`, `stop`, `end`) count
characters of the text sent. Errors are JSON: {"error": message, "error_type": TEI's type} (on /v1/embeddings,
OpenAI's {"error": {"message", "type", "code"}}), with the status codes of payloads.py.

With an API key (ServerSettings.api_key), every route but /health needs the header `Authorization: Bearer KEY`
(401 otherwise); the key is compared in constant time and never written anywhere. With `long_inputs="chunk"`, a
text longer than the model's positions sent without "truncate": true is read in overlapping windows whose vectors
are pooled into one (bertkit.inference.long_inputs), on /embed, /similarity and /v1/embeddings; the header
`x-bertkit-windows` then says how many windows each input took ("1,3,1").

The model loads in a thread after the server starts listening, so /health answers 503 until it is ready; the
requests' inputs go through one queue to one worker thread (batcher.py).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import logging
import re
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bertkit.data.qa import MAX_QUERY_LENGTH, QAExample, qa_windows
from bertkit.data.qa import SPECIAL_TOKENS as QA_SPECIAL_TOKENS
from bertkit.errors import InputError
from bertkit.inference.batching import InputTooLongError, NonFiniteOutputError
from bertkit.inference.long_inputs import check_overlap, check_pooling, pool_rows, split_rows
from bertkit.inference.predict import classification, entity_spans
from bertkit.inference.qa import check_questions, decode_examples, window_rows
from bertkit.inference.serving.batcher import Batcher, Job
from bertkit.inference.serving.metrics import ServerMetrics
from bertkit.inference.serving.model import ServedModel, normalized, wanting
from bertkit.inference.serving.payloads import (
    ServeError,
    asks_questions,
    check_input_form,
    decode_request,
    embed_request,
    invalid,
    openai_request,
    predict_request,
    questions_request,
    read_json,
    rerank_request,
    similarity_request,
    take_dimensions,
    take_prompt_name,
    take_raw_scores,
    take_truncation_direction,
    tokenize_request,
)
from bertkit.utils.ranges import out_of_range

logger = logging.getLogger(__name__)

ROUTE_TASKS = {"/embed": ("embedding",), "/embed_all": ("embedding",), "/similarity": ("embedding",),
               "/v1/embeddings": ("embedding",), "/predict": ("classifier", "ner", "qa"), "/rerank": ("classifier",)}
LONG_INPUTS = ("refuse", "chunk")
WINDOWS_HEADER = "x-bertkit-windows"


@dataclass(frozen=True)
class ServerSettings:
    """The server's limits (text-embeddings-inference's names and meanings), its API key and CORS origins, and what
    it does with a text longer than the model's positions."""

    max_batch_tokens: int = 2048          # padded tokens per forward (rows x longest row)
    max_client_batch_size: int = 32       # inputs per request
    max_concurrent_requests: int = 512    # requests accepted and not yet answered; more get 429
    payload_limit: int = 2_000_000        # bytes per request body
    api_key: str | None = field(default=None, repr=False)  # every route but /health needs it; never shown
    cors_allow_origins: tuple[str, ...] = ()  # origins a browser may call from ("*": any); none: no CORS headers
    long_inputs: str = "refuse"           # a text too long without "truncate": true: "refuse" (422) or "chunk"
    chunk_stride: int | None = None       # tokens consecutive windows share (None: a quarter of a window)
    chunk_pooling: str = "mean"           # the windows' vectors: "mean" (weighted by tokens) or "first"
    max_request_windows: int = 16         # windows one request may cost (chunk, a reader's contexts); more: 413

    LIMITS = ("max_batch_tokens", "max_client_batch_size", "max_concurrent_requests", "payload_limit",
              "max_request_windows")

    def __post_init__(self) -> None:
        for name in self.LIMITS:
            value = getattr(self, name)
            stated = out_of_range(value, minimum=1)
            if stated is not None:
                raise InputError(f"{name} must be {stated}, got {value}")
        if self.api_key is not None:
            # sent in a header: printable ASCII without spaces (the key itself never goes into a message)
            if not self.api_key or not all(33 <= ord(char) <= 126 for char in self.api_key):
                raise InputError("the API key must be printable ASCII without spaces, and not empty")
        if self.long_inputs not in LONG_INPUTS:
            raise InputError(f"long_inputs must be one of {LONG_INPUTS}, not {self.long_inputs!r}")
        if self.chunk_stride is not None and (isinstance(self.chunk_stride, bool) or
                                              not isinstance(self.chunk_stride, int) or self.chunk_stride < 0):
            raise InputError(f"chunk_stride must be a whole number of tokens, at least 0, got {self.chunk_stride!r}")
        check_pooling(self.chunk_pooling)


def json_response(content: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """`content` as JSON; NumPy arrays as lists, float32 in its shortest exact form."""
    return Response(orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY), status, headers,
                    media_type="application/json")


def error_response(err: ServeError, openai: bool = False) -> Response:
    # RFC 6750: a 401 names the scheme the server wants
    headers = {"www-authenticate": "Bearer"} if err.status == 401 else None
    if openai:
        return json_response({"error": {"message": err.message, "type": err.error_type, "code": err.status}},
                             err.status, headers)
    return json_response({"error": err.message, "error_type": err.error_type}, err.status, headers)


class Server:
    """The state behind the routes: the model once loaded, the batcher, the requests in flight, the metrics."""

    def __init__(self, load: Callable[[], ServedModel], settings: ServerSettings,
                 on_ready: Callable[[ServedModel], None] | None = None,
                 on_load_error: Callable[[BaseException], None] | None = None) -> None:
        self._load = load
        self.settings = settings
        self.on_ready = on_ready
        self.on_load_error = on_load_error
        self.metrics = ServerMetrics()
        self.served: ServedModel | None = None
        self.batcher: Batcher | None = None
        self.overlap = 0  # tokens consecutive windows share, with long_inputs "chunk"
        self.load_error: BaseException | None = None
        self.in_flight = 0
        self.metrics.watch_queue(lambda: self.batcher.queued if self.batcher else 0)
        self.metrics.in_flight.set_function(lambda: self.in_flight)

    # ---- life ------------------------------------------------------------------------------------

    def load(self) -> None:
        """Load the model and start the batcher (in a thread: the server answers 503 meanwhile)."""
        try:
            served = self._load()
            if served.max_length > self.settings.max_batch_tokens:
                raise InputError(f"max_batch_tokens {self.settings.max_batch_tokens} is less than the model's "
                                 f"{served.max_length} positions: its longest input would fit no batch; give "
                                 f"--max-batch-tokens {served.max_length} or more")
            if self.settings.long_inputs == "chunk":
                if served.task != "embedding":
                    raise InputError(f"--long-inputs chunk pools the vectors of an embedding model's windows; "
                                     f"{served.name} is {_a(served.task)} model")
                self.overlap = check_overlap(self.settings.chunk_stride, served.max_length, "--chunk-stride")
            batcher = Batcher(served.run, self.settings.max_batch_tokens, self.metrics.observe_batch)
            batcher.start()
            self.batcher, self.served = batcher, served  # served last: it says the server is ready
        except BaseException as err:  # noqa: BLE001 - reported to whoever started the server
            self.load_error = err
            if self.on_load_error is None:
                logger.error("the model could not be loaded: %s", err)
            else:
                self.on_load_error(err)
            return
        if self.on_ready is not None:
            self.on_ready(served)

    def close(self) -> None:
        """Answer what is queued, then stop the worker."""
        if self.batcher is not None:
            self.batcher.stop()

    def ready(self) -> ServedModel:
        """The model, or 503 while it loads (or after it failed to)."""
        if self.served is not None and self.batcher is not None and self.batcher.alive:
            return self.served
        if self.load_error is not None:
            raise ServeError(503, "unhealthy", f"the model could not be loaded: {self.load_error}")
        if self.served is not None:
            raise ServeError(503, "unhealthy", "the inference worker has stopped")
        raise ServeError(503, "unhealthy", "the model is still loading; try again shortly (GET /health says when "
                                           "it is ready)")

    def serving(self, route: str) -> ServedModel:
        """The model, when it serves `route`'s task; else 424, as TEI answers."""
        served = self.ready()
        if served.task not in ROUTE_TASKS[route]:
            other = {"embedding": "/embed", "classifier": "/rerank or /predict" if served.pairs else "/predict"}
            raise ServeError(424, "backend", f"this server serves {served.name}, {_a(served.task)} model: "
                                             f"{route} needs {_route_needs(route)}; use "
                                             f"{other.get(served.task, '/predict')}")
        return served

    def authorize(self, request: Request) -> None:
        """401 unless the request carries the server's API key as `Authorization: Bearer KEY` (when it has one).
        Compared in constant time, so the answer's timing tells nothing of the key; neither key goes into the
        message."""
        key = self.settings.api_key
        if key is None:
            return
        header = request.headers.get("authorization")
        if header is None:
            raise ServeError(401, "unauthorized", 'this server needs an API key: send the header "Authorization: '
                                                  'Bearer <key>"')
        scheme, _, token = header.partition(" ")
        # headers arrive decoded as latin-1: encoded back, they are the bytes the client sent
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode("latin-1"),
                                                                  key.encode("ascii")):
            raise ServeError(401, "unauthorized", "the Authorization header does not carry this server's API key "
                                                  '(send "Authorization: Bearer <key>")')

    # ---- inference -------------------------------------------------------------------------------

    @contextlib.contextmanager
    def admitted(self):
        """A place among the requests in flight, or 429 when all --max-concurrent-requests are taken."""
        if self.in_flight >= self.settings.max_concurrent_requests:
            raise ServeError(429, "overloaded", f"the server is overloaded: {self.in_flight} requests are waiting "
                                                f"(--max-concurrent-requests {self.settings.max_concurrent_requests})"
                                                "; retry later")
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1

    async def infer(self, rows: list, owners: list[int] | None = None) -> list[Any]:
        """The model's outputs for `rows`, through the queue; 424 for an output that is not finite, naming the input
        its row belongs to (`owners[k]`: the input of row k, where an input takes several rows)."""
        job = Job(rows, asyncio.get_running_loop())
        try:
            self.batcher.submit(job)
        except RuntimeError:
            raise ServeError(503, "unhealthy", "the server is shutting down") from None
        outputs = await job.future
        for index, output in enumerate(outputs):
            if isinstance(output, NonFiniteOutputError):  # run alone, it was "text 0"
                where = owners[index] if owners is not None else index
                raise ServeError(424, "backend", str(output).replace("text 0", f"inputs[{where}]"))
            if isinstance(output, BaseException):
                raise ServeError(500, "backend", f"inference failed: {output}")
        return outputs

    def check_windows(self, count: int, length: int, instead: str) -> None:
        """413 for a request whose texts take more windows than `max_request_windows`, before any is run: the model
        is shared, and one request of a thousand windows would hold every other client up for a minute."""
        if count > self.settings.max_request_windows:
            raise ServeError(413, "validation", f"the inputs take {count:,} windows of {length} tokens, more than "
                             f"the {self.settings.max_request_windows:,} one request may cost (--max-request-windows); "
                             f"send the long texts over several requests, {instead}")

    async def vectors(self, served: ServedModel, texts: list[str], truncate: bool, left: bool,
                      prompt: str | None) -> tuple[np.ndarray, list[int] | None, int]:
        """(raw sentence vectors (N, C), the windows each text took or None when chunking is off, the tokens read):
        with long_inputs "chunk" and no "truncate": true, a text too long is read in windows, pooled."""
        if self.settings.long_inputs != "chunk" or truncate:
            rows = _rows(served, texts, None, truncate, left=left, prompt=prompt)
            return np.stack(await self.infer(rows)), None, sum(len(row.input_ids) for row in rows)
        rows = _rows(served, texts, None, False, left=left, prompt=prompt, whole=True)
        windows, counts = split_rows(rows, served.max_length, self.overlap)
        self.check_windows(len(windows), served.max_length, 'or "truncate": true')
        owners = [text for text, count in enumerate(counts) for _ in range(count)]
        outputs = await self.infer(windows, owners)
        vectors = np.stack(pool_rows(outputs, windows, counts, self.settings.chunk_pooling))
        return vectors, counts, sum(len(window.input_ids) for window in windows)


def _a(task: str) -> str:
    """"an embedding", "a classifier": a task named with its article."""
    return f"{'an' if task[0] in 'aeiou' else 'a'} {task}"


def _route_needs(route: str) -> str:
    return {"/predict": "a fine-tuned classifier, tagger or question-answering reader",
            "/rerank": "a cross-encoder: a classifier fine-tuned on text pairs (bertkit finetune --task pairs)"
            }.get(route, "an embedding model")


def _rows(served: ServedModel, texts: list[str], pairs: list[str | None] | None, truncate: bool, name: str = "inputs",
          left: bool = False, prompt: str | None = None, whole: bool = False) -> list:
    """Tokenized inputs, or 422 naming a text too long (without truncate) or not valid text (as `name`[i])."""
    try:
        return served.rows(texts, pairs, truncate, left=left, prompt=prompt, whole=whole)
    except InputTooLongError as err:  # "text 3 has 600 tokens, ...; shorten it, or turn truncation on"
        message = re.sub(r"^text (\d+)", rf"{name}[\1]", str(err)).replace("turn truncation on",
                                                                            'send "truncate": true')
        raise invalid(message) from None
    except ValueError as err:  # "texts[0] is not valid text: ..."
        raise invalid(re.sub(r"^texts\[", f"{name}[", str(err))) from None


def _prompt(served: ServedModel, name: str | None) -> str | None:
    """The prefix a request's prompt_name names (the server's default prompt for none), or 422."""
    if name is None:
        return served.default_prompt
    if name in served.prompts:
        return served.prompts[name]
    if not served.prompts:
        raise invalid(f"prompt_name {name!r}: this server has no prompts (bertkit serve --prompts NAME=PREFIX names "
                      "them)")
    raise invalid(f"prompt_name {name!r} is not one of this server's prompts: {', '.join(sorted(served.prompts))}")


def _check_question_lengths(served: ServedModel, questions: list[str], single: bool, truncate: bool = False) -> None:
    """422 for a question longer than a reader reads (MAX_QUERY_LENGTH tokens; with "truncate": true it is cut to
    them, as qa_windows cuts it), or one that leaves its windows no room to move through the context (a window holds
    the question, [CLS] and two [SEP], and must take more new context tokens than consecutive windows share)."""
    length, stride = served.qa["max_length"], served.qa["doc_stride"]
    most = length - QA_SPECIAL_TOKENS - stride - 1
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


def _check_dimensions(served: ServedModel, dimensions: int | None) -> None:
    """422 for more dimensions than the model's vectors have."""
    hidden = served.model.config.hidden_size
    if dimensions is not None and dimensions > hidden:
        raise invalid(f"dimensions {dimensions} is more than the model's {hidden}: a vector can be cut to fewer of its "
                      "leading dimensions, not made longer")


def _shaped(vectors: np.ndarray, dimensions: int | None, normalize: bool) -> np.ndarray:
    """The vectors cut to their first `dimensions` (Matryoshka), then scaled to unit length if `normalize`."""
    if dimensions is not None:
        vectors = np.ascontiguousarray(vectors[:, :dimensions])
    return normalized(vectors) if normalize else vectors


def _windows_header(counts: list[int] | None) -> dict[str, str] | None:
    return None if counts is None else {WINDOWS_HEADER: ",".join(map(str, counts))}


# ---- routes --------------------------------------------------------------------------------------

def create_app(load: Callable[[], ServedModel], settings: ServerSettings | None = None,
               on_ready: Callable[[ServedModel], None] | None = None,
               on_load_error: Callable[[BaseException], None] | None = None) -> Starlette:
    """The ASGI app: `load()` makes the model, in a thread once the server has started; until then the routes
    answer 503. `on_ready(model)` hears when it is served, `on_load_error(err)` of a model that could not be
    loaded (else it is logged)."""
    server = Server(load, settings or ServerSettings(), on_ready, on_load_error)
    limits = server.settings

    async def embed(request: Request) -> Response:
        served = server.serving("/embed")
        with server.admitted():
            body = await read_json(request, limits.payload_limit)
            left, prompt, dimensions = take_truncation_direction(body), take_prompt_name(body), take_dimensions(body)
            query = embed_request(body, limits.max_client_batch_size)
            _check_dimensions(served, dimensions)
            vectors, windows, _ = await server.vectors(served, query.texts, query.truncate, left,
                                                       _prompt(served, prompt))
        return json_response(_shaped(vectors, dimensions, query.normalize), headers=_windows_header(windows))

    async def embed_all(request: Request) -> Response:
        served = server.serving("/embed_all")
        with server.admitted():
            body = await read_json(request, limits.payload_limit)
            left, prompt = take_truncation_direction(body), take_prompt_name(body)
            if body.get("normalize") is not None:  # every token's hidden state: no route normalizes those
                raise invalid("normalize is not supported on /embed_all: it answers each token's hidden state as the "
                              "model gives it; leave it out")
            query = embed_request(body, limits.max_client_batch_size)
            rows = _rows(served, query.texts, None, query.truncate, left=left, prompt=_prompt(served, prompt))
            states = await server.infer(wanting(rows, "tokens"))
        return json_response(states)

    async def similarity(request: Request) -> Response:
        served = server.serving("/similarity")
        with server.admitted():
            query = similarity_request(await read_json(request, limits.payload_limit), limits.max_client_batch_size)
            vectors, windows, _ = await server.vectors(served, [query.source, *query.sentences], query.truncate,
                                                       query.left, _prompt(served, query.prompt_name))
        unit = normalized(vectors)
        return json_response(unit[1:] @ unit[0], headers=_windows_header(windows))

    async def openai_embeddings(request: Request) -> Response:
        served = server.serving("/v1/embeddings")
        with server.admitted():
            body = await read_json(request, limits.payload_limit)
            dimensions = take_dimensions(body)
            query = openai_request(body, limits.max_client_batch_size)
            _check_dimensions(served, dimensions)
            vectors, windows, tokens = await server.vectors(served, query.texts, False, False, served.default_prompt)
            vectors = _shaped(vectors, dimensions, True)
        data = [{"object": "embedding", "index": index,
                 "embedding": base64.b64encode(vector.astype("<f4").tobytes()).decode() if query.base64 else vector}
                for index, vector in enumerate(vectors)]
        return json_response({"object": "list", "data": data, "model": served.name,
                              "usage": {"prompt_tokens": tokens, "total_tokens": tokens}},
                             headers=_windows_header(windows))

    async def predict(request: Request) -> Response:
        served = server.serving("/predict")
        with server.admitted():
            body = await read_json(request, limits.payload_limit)
            if served.task == "qa":
                return json_response(await answers(served, body))
            if asks_questions(body):
                raise invalid(f"this server serves {served.name}, {_a(served.task)} model: questions and contexts "
                              "need a question-answering reader (bertkit finetune --task qa)")
            left, raw = take_truncation_direction(body), take_raw_scores(body)
            if raw and served.task == "ner":
                raise invalid("raw_scores is for classifiers: a tagger (NER) answers entity spans")
            query = predict_request(body, limits.max_client_batch_size)
            if served.task == "ner" and query.pairs is not None:
                raise invalid("this server serves a tagger (NER), which reads single texts; send no text pairs")
            if served.task == "classifier":
                check_input_form(query, served.text_pairs)
            rows = _rows(served, query.texts, query.pairs, query.truncate, left=left)
            outputs = await server.infer(wanting(rows, "logits" if raw else ""))
        if served.task == "ner":
            results = [entity_spans(text, served.tokenizer, row, tags, scores, served.labels)
                       for text, row, (tags, scores) in zip(query.texts, rows, outputs)]
        elif raw:  # TEI's raw scores: every label's logit, best first
            results = [[{"score": float(score), "label": label} for label, score in
                        sorted(zip(served.labels, logits), key=lambda kv: -kv[1])] for logits in outputs]
        else:
            results = [[{"score": score, "label": label} for label, score in
                        sorted(classification(probs, served.labels)["probabilities"].items(), key=lambda kv: -kv[1])]
                       for probs in outputs]
        return json_response(results[0] if query.single else results)

    async def answers(served: ServedModel, body: dict[str, Any]) -> Any:
        """A reader's answers, as `bertkit predict --question --context` finds them (inference/qa.py): the same
        windows, the same span logits, the same decoding."""
        query = questions_request(body, limits.max_client_batch_size)
        try:
            check_questions(query.questions, query.contexts)
            _check_question_lengths(served, query.questions, query.single, query.truncate)
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

    async def rerank(request: Request) -> Response:
        served = server.serving("/rerank")
        if not served.pairs:
            raise ServeError(424, "backend", f"this server serves {served.name}, a classifier of single texts: "
                                             f"/rerank needs {_route_needs('/rerank')}; use /predict")
        label = served.rerank_label
        if label is None:
            raise ServeError(424, "backend", f"this server serves {served.name}, a classifier of text pairs with "
                                             f"{len(served.labels)} labels ({', '.join(served.labels)}): /rerank "
                                             "ranks by one score, the positive label's, so it needs a model of one "
                                             "or two labels; use /predict")
        with server.admitted():
            query = rerank_request(await read_json(request, limits.payload_limit), limits.max_client_batch_size)
            rows = _rows(served, [query.query] * len(query.texts), query.texts, query.truncate, "texts",
                         left=query.left)
            outputs = await server.infer(wanting(rows, "logits" if query.raw_scores else ""))
        ranks = [{"index": index, "score": float(output[label]), **({"text": text} if query.return_text else {})}
                 for index, (text, output) in enumerate(zip(query.texts, outputs))]
        ranks.sort(key=lambda rank: -rank["score"])  # stable: equal scores keep the order sent
        return json_response(ranks)

    async def tokenize(request: Request) -> Response:
        served = server.ready()
        body = await read_json(request, limits.payload_limit)
        prompt = _prompt(served, take_prompt_name(body))
        query = tokenize_request(body, limits.max_client_batch_size)
        # with a prompt, the tokens of what the model reads: the prompt and the text, offsets into both together
        texts = [prompt + text for text in query.texts] if prompt else query.texts
        return json_response([_tokens(served.tokenizer, text, query.add_special_tokens) for text in texts])

    async def decode(request: Request) -> Response:
        served = server.ready()
        query = decode_request(await read_json(request, limits.payload_limit), limits.max_client_batch_size,
                               len(served.tokenizer))
        return json_response([served.tokenizer.decode(ids, skip_special_tokens=query.skip_special_tokens)
                              for ids in query.ids])

    async def health(request: Request) -> Response:
        server.ready()
        return Response(b"", 200)

    async def info(request: Request) -> Response:
        from bertkit import __version__

        served = server.ready()
        return json_response({**served.info(), "max_concurrent_requests": limits.max_concurrent_requests,
                              "max_batch_tokens": limits.max_batch_tokens, "max_batch_requests": None,
                              "max_client_batch_size": limits.max_client_batch_size, "auto_truncate": False,
                              "payload_limit": limits.payload_limit, "long_inputs": limits.long_inputs,
                              "max_request_windows": limits.max_request_windows, "version": __version__})

    async def metrics(request: Request) -> Response:
        try:
            server.authorize(request)
        except ServeError as err:
            return error_response(err)
        return Response(server.metrics.text(), 200, media_type=server.metrics.content_type)

    def measured(path: str, endpoint: Callable[[Request], Awaitable[Response]]) -> Callable:
        """`endpoint` behind the API key (but /health), with its errors as JSON and every answer counted in the
        metrics."""
        openai = path.startswith("/v1/")

        async def run(request: Request) -> Response:
            start = time.perf_counter()
            try:
                if path != "/health":
                    server.authorize(request)
                response = await endpoint(request)
            except ServeError as err:
                response = error_response(err, openai)
            except Exception as err:  # noqa: BLE001 - a fault of the server, never of the input: logged, 500
                logger.exception("%s failed", path)
                response = error_response(ServeError(500, "backend", f"internal error: {err}"), openai)
            server.metrics.observe_request(path, response.status_code, time.perf_counter() - start)
            return response

        return run

    posts = {"/embed": embed, "/embed_all": embed_all, "/similarity": similarity, "/predict": predict,
             "/rerank": rerank, "/tokenize": tokenize, "/decode": decode, "/v1/embeddings": openai_embeddings}
    routes = [*(Route(path, measured(path, endpoint), methods=["POST"]) for path, endpoint in posts.items()),
              Route("/health", measured("/health", health), methods=["GET"]),
              Route("/info", measured("/info", info), methods=["GET"]),
              Route("/metrics", metrics, methods=["GET"])]

    async def http_error(request: Request, err: HTTPException) -> Response:
        message = {404: f"no route {request.url.path}; the routes are " + ", ".join(r.path for r in routes),
                   405: f"{request.url.path} does not take {request.method}"}.get(err.status_code, str(err.detail))
        return json_response({"error": message, "error_type": "validation"}, err.status_code)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        threading.Thread(target=server.load, name="bertkit-load", daemon=True).start()
        yield
        await asyncio.get_running_loop().run_in_executor(None, server.close)

    # CORS outermost: a browser's preflight (OPTIONS, no Authorization header) is answered before the API key
    # is asked for, as the CORS protocol needs; the request that follows carries the key
    middleware = [Middleware(CORSMiddleware, allow_origins=list(limits.cors_allow_origins),
                             allow_methods=["GET", "POST"], allow_headers=["Content-Type", "Authorization"],
                             expose_headers=[WINDOWS_HEADER])] if limits.cors_allow_origins else []
    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error}, lifespan=lifespan,
                    middleware=middleware)
    # "/embed/" is no route: no redirect to "/embed" at the address the request's Host header names (sent before
    # any key is asked for), a 404 that lists the routes
    app.router.redirect_slashes = False
    app.state.server = server
    return app


def _tokens(tokenizer: Any, text: str, add_special_tokens: bool) -> list[dict[str, Any]]:
    """TEI's tokens of one text: id, text (the characters it covers; a special token's own name), whether it is
    special, and its [start, stop) character offsets (null for a special token)."""
    encoding = tokenizer(text, add_special_tokens=add_special_tokens, return_offsets_mapping=True,
                         return_special_tokens_mask=True, verbose=False)
    names = tokenizer.convert_ids_to_tokens(encoding["input_ids"])
    tokens = []
    for token_id, name, special, (start, stop) in zip(encoding["input_ids"], names, encoding["special_tokens_mask"],
                                                     encoding["offset_mapping"]):
        tokens.append({"id": token_id, "text": name if special else text[start:stop], "special": bool(special),
                       "start": None if special else start, "stop": None if special else stop})
    return tokens
