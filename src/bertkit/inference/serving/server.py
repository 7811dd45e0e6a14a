"""The server behind the routes (routes.py): its settings (text-embeddings-inference's limits, the API key, CORS,
long inputs), the model loaded in a thread (503 meanwhile), the requests in flight (429 past the limit), inference
through the batcher's one queue, long texts read in windows, and the checks every route shares."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
from starlette.requests import Request
from starlette.responses import Response

from bertkit.errors import InputError
from bertkit.inference.batching import InputTooLongError, NonFiniteOutputError
from bertkit.inference.long_inputs import check_overlap, check_pooling, pool_rows, split_rows
from bertkit.inference.serving.batcher import Batcher, Job
from bertkit.inference.serving.metrics import ServerMetrics
from bertkit.inference.serving.model import ServedModel, normalized
from bertkit.inference.serving.payloads import ServeError, invalid
from bertkit.models.sentence_files import MEAN
from bertkit.utils.ranges import out_of_range

logger = logging.getLogger(__name__)

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
    chunk_pooling: str = MEAN             # the windows' vectors: "mean" (weighted by tokens) or "first"
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
                                     f"{served.name} is {article(served.task)} model")
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

    def serving(self, route: str, tasks: tuple[str, ...], needs: str) -> ServedModel:
        """The model, when its task is one of `tasks`, the ones `route` serves; else 424, as TEI answers, saying what
        the route `needs`."""
        served = self.ready()
        if served.task not in tasks:
            other = {"embedding": "/embed", "classifier": "/rerank or /predict" if served.pairs else "/predict"}
            raise ServeError(424, "backend", f"this server serves {served.name}, {article(served.task)} model: "
                                             f"{route} needs {needs}; use {other.get(served.task, '/predict')}")
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
            rows = text_rows(served, texts, None, truncate, left=left, prompt=prompt)
            return np.stack(await self.infer(rows)), None, sum(len(row.input_ids) for row in rows)
        rows = text_rows(served, texts, None, False, left=left, prompt=prompt, whole=True)
        windows, counts = split_rows(rows, served.max_length, self.overlap)
        self.check_windows(len(windows), served.max_length, 'or "truncate": true')
        owners = [text for text, count in enumerate(counts) for _ in range(count)]
        outputs = await self.infer(windows, owners)
        vectors = np.stack(pool_rows(outputs, windows, counts, self.settings.chunk_pooling))
        return vectors, counts, sum(len(window.input_ids) for window in windows)


def article(task: str) -> str:
    """"an embedding", "a classifier": a task named with its article."""
    return f"{'an' if task[0] in 'aeiou' else 'a'} {task}"


def text_rows(served: ServedModel, texts: list[str], pairs: list[str | None] | None, truncate: bool,
              name: str = "inputs", left: bool = False, prompt: str | None = None, whole: bool = False) -> list:
    """Tokenized inputs, or 422 naming a text too long (without truncate) or not valid text (as `name`[i])."""
    try:
        return served.rows(texts, pairs, truncate, left=left, prompt=prompt, whole=whole)
    except InputTooLongError as err:  # "text 3 has 600 tokens, ...; shorten it, or turn truncation on"
        message = re.sub(r"^text (\d+)", rf"{name}[\1]", str(err)).replace("turn truncation on",
                                                                            'send "truncate": true')
        raise invalid(message) from None
    except ValueError as err:  # "texts[0] is not valid text: ..."
        raise invalid(re.sub(r"^texts\[", f"{name}[", str(err))) from None


def prompt_prefix(served: ServedModel, name: str | None) -> str | None:
    """The prefix a request's prompt_name names (the server's default prompt for none), or 422."""
    if name is None:
        return served.default_prompt
    if name in served.prompts:
        return served.prompts[name]
    if not served.prompts:
        raise invalid(f"prompt_name {name!r}: this server has no prompts (bertkit serve --prompts NAME=PREFIX names "
                      "them)")
    raise invalid(f"prompt_name {name!r} is not one of this server's prompts: {', '.join(sorted(served.prompts))}")


def check_dimensions(served: ServedModel, dimensions: int | None) -> None:
    """422 for more dimensions than the model's vectors have."""
    hidden = served.model.config.hidden_size
    if dimensions is not None and dimensions > hidden:
        raise invalid(f"dimensions {dimensions} is more than the model's {hidden}: a vector can be cut to fewer of its "
                      "leading dimensions, not made longer")


def shaped(vectors: np.ndarray, dimensions: int | None, normalize: bool) -> np.ndarray:
    """The vectors cut to their first `dimensions` (Matryoshka), then scaled to unit length if `normalize`."""
    if dimensions is not None:
        vectors = np.ascontiguousarray(vectors[:, :dimensions])
    return normalized(vectors) if normalize else vectors


def windows_header(counts: list[int] | None) -> dict[str, str] | None:
    return None if counts is None else {WINDOWS_HEADER: ",".join(map(str, counts))}

