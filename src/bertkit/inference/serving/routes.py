"""The HTTP routes, shaped like text-embeddings-inference's so its clients carry over: each a function here, and
one row of ENDPOINTS (its path, method, the model tasks it serves) that app.py builds the Starlette app from.

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

import base64
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from bertkit.data.task_kinds import TASKS
from bertkit.inference.serving.model import ServedModel, normalized, wanting
from bertkit.inference.serving.payloads import (
    PredictRequest,
    ServeError,
    asks_questions,
    decode_request,
    embed_request,
    invalid,
    openai_request,
    predict_request,
    read_json,
    rerank_request,
    similarity_request,
    take_dimensions,
    take_prompt_name,
    take_truncation_direction,
    tokenize_request,
)
from bertkit.inference.serving.server import (
    Server,
    article,
    check_dimensions,
    json_response,
    prompt_prefix,
    shaped,
    text_rows,
    windows_header,
)

EMBEDDING_NEEDS = "an embedding model"
PREDICT_NEEDS = "a fine-tuned classifier, tagger or question-answering reader"
RERANK_NEEDS = "a cross-encoder: a classifier fine-tuned on text pairs (bertkit finetune --task pairs)"


async def embed(server: Server, served: ServedModel, request: Request) -> Response:
    with server.admitted():
        body = await read_json(request, server.settings.payload_limit)
        left, prompt, dimensions = take_truncation_direction(body), take_prompt_name(body), take_dimensions(body)
        query = embed_request(body, server.settings.max_client_batch_size)
        check_dimensions(served, dimensions)
        vectors, windows, _ = await server.vectors(served, query.texts, query.truncate, left,
                                                   prompt_prefix(served, prompt))
    return json_response(shaped(vectors, dimensions, query.normalize), headers=windows_header(windows))


async def embed_all(server: Server, served: ServedModel, request: Request) -> Response:
    with server.admitted():
        body = await read_json(request, server.settings.payload_limit)
        left, prompt = take_truncation_direction(body), take_prompt_name(body)
        if body.get("normalize") is not None:  # every token's hidden state: no route normalizes those
            raise invalid("normalize is not supported on /embed_all: it answers each token's hidden state as the "
                          "model gives it; leave it out")
        query = embed_request(body, server.settings.max_client_batch_size)
        rows = text_rows(served, query.texts, None, query.truncate, left=left, prompt=prompt_prefix(served, prompt))
        states = await server.infer(wanting(rows, "tokens"))
    return json_response(states)


async def similarity(server: Server, served: ServedModel, request: Request) -> Response:
    with server.admitted():
        limits = server.settings
        query = similarity_request(await read_json(request, limits.payload_limit), limits.max_client_batch_size)
        vectors, windows, _ = await server.vectors(served, [query.source, *query.sentences], query.truncate,
                                                   query.left, prompt_prefix(served, query.prompt_name))
    unit = normalized(vectors)
    return json_response(unit[1:] @ unit[0], headers=windows_header(windows))


async def openai_embeddings(server: Server, served: ServedModel, request: Request) -> Response:
    with server.admitted():
        body = await read_json(request, server.settings.payload_limit)
        dimensions = take_dimensions(body)
        query = openai_request(body, server.settings.max_client_batch_size)
        check_dimensions(served, dimensions)
        vectors, windows, tokens = await server.vectors(served, query.texts, False, False, served.default_prompt)
        vectors = shaped(vectors, dimensions, True)
    data = [{"object": "embedding", "index": index,
             "embedding": base64.b64encode(vector.astype("<f4").tobytes()).decode() if query.base64 else vector}
            for index, vector in enumerate(vectors)]
    return json_response({"object": "list", "data": data, "model": served.name,
                          "usage": {"prompt_tokens": tokens, "total_tokens": tokens}},
                         headers=windows_header(windows))


async def predict(server: Server, served: ServedModel, request: Request) -> Response:
    with server.admitted():
        body = await read_json(request, server.settings.payload_limit)
        # the served task's record (bertkit.tasks) reads the body and answers: labels, entity spans, answers
        return json_response(await served.kind.serve_predict(server, served, body))


def text_request(server: Server, served: ServedModel, body: dict[str, Any]) -> tuple[PredictRequest, bool]:
    """(the texts of a /predict body, whether to cut long ones at their start), for a task that reads texts."""
    if asks_questions(body):
        raise invalid(f"this server serves {served.name}, {article(served.task)} model: questions and contexts "
                      "need a question-answering reader (bertkit finetune --task qa)")
    left = take_truncation_direction(body)
    return predict_request(body, server.settings.max_client_batch_size), left


async def rerank(server: Server, served: ServedModel, request: Request) -> Response:
    if not served.pairs:
        raise ServeError(424, "backend", f"this server serves {served.name}, a classifier of single texts: "
                                         f"/rerank needs {RERANK_NEEDS}; use /predict")
    label = served.rerank_label
    if label is None:
        raise ServeError(424, "backend", f"this server serves {served.name}, a classifier of text pairs with "
                                         f"{len(served.labels)} labels ({', '.join(served.labels)}): /rerank "
                                         "ranks by one score, the positive label's, so it needs a model of one "
                                         "or two labels; use /predict")
    with server.admitted():
        limits = server.settings
        query = rerank_request(await read_json(request, limits.payload_limit), limits.max_client_batch_size)
        rows = text_rows(served, [query.query] * len(query.texts), query.texts, query.truncate, "texts",
                         left=query.left)
        outputs = await server.infer(wanting(rows, "logits" if query.raw_scores else ""))
    ranks = [{"index": index, "score": float(output[label]), **({"text": text} if query.return_text else {})}
             for index, (text, output) in enumerate(zip(query.texts, outputs))]
    ranks.sort(key=lambda rank: -rank["score"])  # stable: equal scores keep the order sent
    return json_response(ranks)


async def tokenize(server: Server, served: ServedModel, request: Request) -> Response:
    body = await read_json(request, server.settings.payload_limit)
    prompt = prompt_prefix(served, take_prompt_name(body))
    query = tokenize_request(body, server.settings.max_client_batch_size)
    # with a prompt, the tokens of what the model reads: the prompt and the text, offsets into both together
    texts = [prompt + text for text in query.texts] if prompt else query.texts
    return json_response([_tokens(served.tokenizer, text, query.add_special_tokens) for text in texts])


async def decode(server: Server, served: ServedModel, request: Request) -> Response:
    limits = server.settings
    query = decode_request(await read_json(request, limits.payload_limit), limits.max_client_batch_size,
                           len(served.tokenizer))
    return json_response([served.tokenizer.decode(ids, skip_special_tokens=query.skip_special_tokens)
                          for ids in query.ids])


async def health(server: Server, served: ServedModel, request: Request) -> Response:
    return Response(b"", 200)


async def info(server: Server, served: ServedModel, request: Request) -> Response:
    from bertkit import __version__

    limits = server.settings
    return json_response({**served.info(), "max_concurrent_requests": limits.max_concurrent_requests,
                          "max_batch_tokens": limits.max_batch_tokens, "max_batch_requests": None,
                          "max_client_batch_size": limits.max_client_batch_size, "auto_truncate": False,
                          "payload_limit": limits.payload_limit, "long_inputs": limits.long_inputs,
                          "max_request_windows": limits.max_request_windows, "version": __version__})


async def metrics(server: Server, served: ServedModel | None, request: Request) -> Response:
    return Response(server.metrics.text(), 200, media_type=server.metrics.content_type)


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


@dataclass(frozen=True)
class Endpoint:
    """One route: its path and method, the function that answers it, and what it needs of the server."""

    path: str
    handler: Callable[[Server, ServedModel | None, Request], Awaitable[Response]]
    method: str = "POST"
    tasks: tuple[str, ...] | None = None  # the served model's tasks it answers (424 for others); None: any task
    needs: str = ""                       # ... said in the 424: what model the route needs
    model: bool = True                    # it needs the model loaded (503 until it is)
    keyed: bool = True                    # behind the API key, when the server has one
    counted: bool = True                  # counted in the metrics


# what the server calls the models of the fine-tuning tasks (bertkit.tasks): /predict answers each of them
FINE_TUNED = tuple(dict.fromkeys(kind.served for kind in TASKS.values() if kind.served))
ENDPOINTS = (
    Endpoint("/embed", embed, tasks=("embedding",), needs=EMBEDDING_NEEDS),
    Endpoint("/embed_all", embed_all, tasks=("embedding",), needs=EMBEDDING_NEEDS),
    Endpoint("/similarity", similarity, tasks=("embedding",), needs=EMBEDDING_NEEDS),
    Endpoint("/predict", predict, tasks=FINE_TUNED, needs=PREDICT_NEEDS),
    Endpoint("/rerank", rerank, tasks=("classifier",), needs=RERANK_NEEDS),
    Endpoint("/tokenize", tokenize),
    Endpoint("/decode", decode),
    Endpoint("/v1/embeddings", openai_embeddings, tasks=("embedding",), needs=EMBEDDING_NEEDS),
    Endpoint("/health", health, method="GET", keyed=False),
    Endpoint("/info", info, method="GET"),
    Endpoint("/metrics", metrics, method="GET", model=False, counted=False),
)
