"""The HTTP routes, shaped like text-embeddings-inference's so its clients carry over, on Starlette.

    POST /embed            {"inputs": text | [text], "normalize": true, "truncate": false} -> [[float]]
    POST /predict          {"inputs": text | [text, pair] | [[text], ...]} -> a classifier's [{"score", "label"}]
                           (every label, best first), a tagger's [{"entity", "start", "end", "text", "score"}]
    POST /tokenize         {"inputs": text | [text]} -> [[{"id", "text", "special", "start", "stop"}]]
    POST /v1/embeddings    OpenAI's embeddings request and answer (float or base64 vectors, unit length)
    GET  /health           200 when the model is ready, 503 while it loads
    GET  /info             the model, its task, number format, longest input, and the server's limits
    GET  /metrics          Prometheus text (metrics.py)

A single text gets the same answer shape as a list of one, as TEI's does. Offsets (`start`, `stop`, `end`) count
characters of the text sent. Errors are JSON: {"error": message, "error_type": TEI's type} (on /v1/embeddings,
OpenAI's {"error": {"message", "type", "code"}}), with the status codes of payloads.py.

The model loads in a thread after the server starts listening, so /health answers 503 until it is ready; the
requests' inputs go through one queue to one worker thread (batcher.py).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import re
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bertkit.errors import InputError
from bertkit.inference.batching import InputTooLongError, NonFiniteOutputError
from bertkit.inference.predict import classification, entity_spans
from bertkit.inference.serving.batcher import Batcher, Job
from bertkit.inference.serving.metrics import ServerMetrics
from bertkit.inference.serving.model import ServedModel, normalized
from bertkit.inference.serving.payloads import (
    ServeError,
    check_input_form,
    embed_request,
    invalid,
    openai_request,
    predict_request,
    read_json,
    tokenize_request,
)
from bertkit.utils.ranges import out_of_range

logger = logging.getLogger(__name__)

ROUTE_TASKS = {"/embed": ("embedding",), "/v1/embeddings": ("embedding",), "/predict": ("classifier", "ner")}


@dataclass(frozen=True)
class ServerSettings:
    """The server's limits (text-embeddings-inference's names and meanings)."""

    max_batch_tokens: int = 2048          # padded tokens per forward (rows x longest row)
    max_client_batch_size: int = 32       # inputs per request
    max_concurrent_requests: int = 512    # requests accepted and not yet answered; more get 429
    payload_limit: int = 2_000_000        # bytes per request body

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            stated = out_of_range(value, minimum=1)
            if stated is not None:
                raise InputError(f"{name} must be {stated}, got {value}")


def json_response(content: Any, status: int = 200) -> Response:
    """`content` as JSON; NumPy arrays as lists, float32 in its shortest exact form."""
    return Response(orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY), status,
                    media_type="application/json")


def error_response(err: ServeError, openai: bool = False) -> Response:
    if openai:
        return json_response({"error": {"message": err.message, "type": err.error_type, "code": err.status}},
                             err.status)
    return json_response({"error": err.message, "error_type": err.error_type}, err.status)


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
            other = "/embed" if served.task == "embedding" else "/predict"
            article = "an" if served.task[0] in "aeiou" else "a"
            raise ServeError(424, "backend", f"this server serves {served.name}, {article} {served.task} model: "
                                             f"{route} needs {_route_needs(route)}; use {other}")
        return served

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

    async def infer(self, rows: list) -> list[Any]:
        """The model's outputs for `rows`, through the queue; 424 for an output that is not finite."""
        job = Job(rows, asyncio.get_running_loop())
        try:
            self.batcher.submit(job)
        except RuntimeError:
            raise ServeError(503, "unhealthy", "the server is shutting down") from None
        outputs = await job.future
        for index, output in enumerate(outputs):
            if isinstance(output, NonFiniteOutputError):  # run alone, it was "text 0"
                raise ServeError(424, "backend", str(output).replace("text 0", f"inputs[{index}]"))
            if isinstance(output, BaseException):
                raise ServeError(500, "backend", f"inference failed: {output}")
        return outputs


def _route_needs(route: str) -> str:
    return "a fine-tuned classifier or tagger" if route == "/predict" else "an embedding model"


def _rows(served: ServedModel, texts: list[str], pairs: list[str | None] | None, truncate: bool) -> list:
    """Tokenized inputs, or 422 naming a text too long (without truncate) or not valid text."""
    try:
        return served.rows(texts, pairs, truncate)
    except InputTooLongError as err:  # "text 3 has 600 tokens, ...; shorten it, or turn truncation on"
        message = re.sub(r"^text (\d+)", r"inputs[\1]", str(err)).replace("turn truncation on", 'send "truncate": true')
        raise invalid(message) from None
    except ValueError as err:  # "texts[0] is not valid text: ..."
        raise invalid(re.sub(r"^texts\[", "inputs[", str(err))) from None


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
            query = embed_request(await read_json(request, limits.payload_limit), limits.max_client_batch_size)
            vectors = np.stack(await server.infer(_rows(served, query.texts, None, query.truncate)))
        return json_response(normalized(vectors) if query.normalize else vectors)

    async def openai_embeddings(request: Request) -> Response:
        served = server.serving("/v1/embeddings")
        with server.admitted():
            query = openai_request(await read_json(request, limits.payload_limit), limits.max_client_batch_size)
            rows = _rows(served, query.texts, None, False)
            vectors = normalized(np.stack(await server.infer(rows)))
        data = [{"object": "embedding", "index": index,
                 "embedding": base64.b64encode(vector.astype("<f4").tobytes()).decode() if query.base64 else vector}
                for index, vector in enumerate(vectors)]
        tokens = sum(len(row.input_ids) for row in rows)
        return json_response({"object": "list", "data": data, "model": served.name,
                              "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    async def predict(request: Request) -> Response:
        served = server.serving("/predict")
        with server.admitted():
            query = predict_request(await read_json(request, limits.payload_limit), limits.max_client_batch_size)
            if served.task == "ner" and query.pairs is not None:
                raise invalid("this server serves a tagger (NER), which reads single texts; send no text pairs")
            if served.task == "classifier":
                check_input_form(query, served.text_pairs)
            rows = _rows(served, query.texts, query.pairs, query.truncate)
            outputs = await server.infer(rows)
        if served.task == "ner":
            results = [entity_spans(text, served.tokenizer, row, tags, scores, served.labels)
                       for text, row, (tags, scores) in zip(query.texts, rows, outputs)]
        else:
            results = [[{"score": score, "label": label} for label, score in
                        sorted(classification(probs, served.labels)["probabilities"].items(), key=lambda kv: -kv[1])]
                       for probs in outputs]
        return json_response(results[0] if query.single else results)

    async def tokenize(request: Request) -> Response:
        served = server.ready()
        query = tokenize_request(await read_json(request, limits.payload_limit), limits.max_client_batch_size)
        return json_response([_tokens(served.tokenizer, text, query.add_special_tokens) for text in query.texts])

    async def health(request: Request) -> Response:
        server.ready()
        return Response(b"", 200)

    async def info(request: Request) -> Response:
        from bertkit import __version__

        served = server.ready()
        return json_response({**served.info(), "max_concurrent_requests": limits.max_concurrent_requests,
                              "max_batch_tokens": limits.max_batch_tokens, "max_batch_requests": None,
                              "max_client_batch_size": limits.max_client_batch_size, "auto_truncate": False,
                              "payload_limit": limits.payload_limit, "version": __version__})

    async def metrics(request: Request) -> Response:
        return Response(server.metrics.text(), 200, media_type=server.metrics.content_type)

    def measured(path: str, endpoint: Callable[[Request], Awaitable[Response]]) -> Callable:
        """`endpoint` with its errors as JSON and every answer counted in the metrics."""
        openai = path.startswith("/v1/")

        async def run(request: Request) -> Response:
            start = time.perf_counter()
            try:
                response = await endpoint(request)
            except ServeError as err:
                response = error_response(err, openai)
            except Exception as err:  # noqa: BLE001 - a fault of the server, never of the input: logged, 500
                logger.exception("%s failed", path)
                response = error_response(ServeError(500, "backend", f"internal error: {err}"), openai)
            server.metrics.observe_request(path, response.status_code, time.perf_counter() - start)
            return response

        return run

    routes = [Route("/embed", measured("/embed", embed), methods=["POST"]),
              Route("/predict", measured("/predict", predict), methods=["POST"]),
              Route("/tokenize", measured("/tokenize", tokenize), methods=["POST"]),
              Route("/v1/embeddings", measured("/v1/embeddings", openai_embeddings), methods=["POST"]),
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

    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error}, lifespan=lifespan)
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
