"""Request bodies read and checked, in text-embeddings-inference's shapes; what is wrong with one is a ServeError
carrying TEI's status code and error type, with a message for people.

    401  an API key is required (--api-key) and the request's Authorization header does not carry it
    413  a body larger than the payload limit
    422  a body that is not JSON, not an object, or holds empty, wrongly typed or (without truncate) too long inputs,
         or more inputs than --max-client-batch-size (TEI answers its "validation" errors with 422)
    429  the server already holds --max-concurrent-requests requests
    503  the model is still loading
    424  the model cannot do what the route asks (/predict on an embedding model) or gave no finite output

A route reads the fields TEI gives it (truncation_direction, prompt_name, dimensions, raw_scores) with the take_*
functions below, which take them out of the body before the route's parser reads the rest; `check_unsupported`
refuses with 422 any such field a route does not compute (a prompt name sent to /predict), rather than ignore it,
so no client gets an answer to a question it did not ask.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from bertkit.utils.visible import blank_message


class ServeError(Exception):
    """A request the server cannot answer: an HTTP status, TEI's error type, and a message for people."""

    def __init__(self, status: int, error_type: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message


def invalid(message: str) -> ServeError:
    """422: the request is malformed or its inputs cannot be run."""
    return ServeError(422, "validation", message)


# ---- the body ------------------------------------------------------------------------------------

async def read_json(request: Any, limit: int) -> dict[str, Any]:
    """The request's body as a JSON object, read at most `limit` bytes (413 past it; 422 if not a JSON object)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(int(declared), limit)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise _too_large(len(body), limit)
    if not body:
        raise invalid('the request has no body; send a JSON object such as {"inputs": "some text"}')
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as err:
        raise invalid(f"the body is not valid JSON: {err}") from None
    if not isinstance(value, dict):
        raise invalid(f'the body must be a JSON object such as {{"inputs": "some text"}}, not {_kind(value)}')
    return value


def _too_large(size: int, limit: int) -> ServeError:
    return ServeError(413, "validation", f"the body has {size:,} bytes, more than the server's limit of {limit:,} "
                                         "(--payload-limit); send fewer or shorter inputs per request")


def _kind(value: Any) -> str:
    """How a JSON value is named in messages."""
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list",
             dict: "an object", type(None): "null"}
    return names.get(type(value), type(value).__name__)


# ---- fields --------------------------------------------------------------------------------------

def flag(body: dict[str, Any], name: str, default: bool) -> bool:
    """A true/false field (null or absent: `default`)."""
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise invalid(f"{name} must be true or false, not {_kind(value)} ({value!r:.40})")
    return value


def check_unsupported(body: dict[str, Any]) -> None:
    """422 for TEI's options a route does not compute, when a request asks for them (a route that computes one
    takes it out of the body first: the take_* functions)."""
    direction = body.get("truncation_direction")
    if direction is not None and direction not in ("right", "Right"):
        raise invalid(f"truncation_direction {direction!r} is not supported on this route; leave it out")
    for name in ("prompt_name", "dimensions"):
        if body.get(name) is not None:
            raise invalid(f"{name} is not supported on this route; leave it out")
    if body.get("raw_scores"):
        raise invalid("raw_scores is not supported on this route: it is for /predict and /rerank, a classifier's "
                      "logits")


def check_count(count: int, max_client_batch_size: int, name: str = "inputs") -> None:
    """422 for more inputs in one request than the server takes (TEI's "batch size" validation error)."""
    if count > max_client_batch_size:
        raise invalid(f"{name} holds {count} texts, more than the server's maximum of {max_client_batch_size} per "
                      "request (--max-client-batch-size); send them in smaller requests")


def text_list(value: Any, name: str, max_client_batch_size: int) -> tuple[list[str], bool]:
    """(texts, whether one text was sent as a string) of a field that is a text or a list of texts."""
    if isinstance(value, str):
        texts, single = [value], True
    elif isinstance(value, list):
        texts, single = value, False
    elif value is None:
        raise invalid(f'the body has no {name}; send {{"{name}": "some text"}} or a list of texts')
    else:
        raise invalid(f"{name} must be a text or a list of texts, not {_kind(value)}")
    if not texts:
        raise invalid(f"{name} is an empty list: give at least one text")
    check_count(len(texts), max_client_batch_size, name)
    for index, text in enumerate(texts):
        where = name if single else f"{name}[{index}]"
        if not isinstance(text, str):
            hint = " (this server takes texts, not token ids)" if isinstance(text, (int, list)) else ""
            raise invalid(f"{where} is {_kind(text)}, not a text{hint}")
        if (empty := blank_message(where, text)) is not None:  # no visible character: the one rule for all
            raise invalid(empty)
    return texts, single


# ---- the routes' requests ------------------------------------------------------------------------

@dataclass
class EmbedRequest:
    texts: list[str]
    normalize: bool = True
    truncate: bool = False


@dataclass
class PredictRequest:
    texts: list[str]
    pairs: list[str | None] | None
    single: bool
    truncate: bool = False


@dataclass
class TokenizeRequest:
    texts: list[str]
    add_special_tokens: bool = True


@dataclass
class OpenAIRequest:
    texts: list[str]
    base64: bool = False


def embed_request(body: dict[str, Any], max_client_batch_size: int) -> EmbedRequest:
    """POST /embed: {"inputs": text | [text], "normalize": true, "truncate": false}."""
    check_unsupported(body)
    texts, _ = text_list(body.get("inputs"), "inputs", max_client_batch_size)
    return EmbedRequest(texts, flag(body, "normalize", True), flag(body, "truncate", False))


def predict_request(body: dict[str, Any], max_client_batch_size: int) -> PredictRequest:
    """POST /predict, TEI's grammar: "text", ["text"] or ["text", "pair"] is one input; [["text"], ["text", "pair"],
    ...] a batch."""
    check_unsupported(body)
    value = body.get("inputs")
    truncate = flag(body, "truncate", False)
    if isinstance(value, list) and value and all(isinstance(item, list) for item in value):
        check_count(len(value), max_client_batch_size)
        sequences = [_sequence(item, f"inputs[{index}]") for index, item in enumerate(value)]
        single = False
    elif isinstance(value, list) and value and not any(isinstance(item, list) for item in value):
        if len(value) > 2:
            raise invalid(f"inputs is a list of {len(value)} texts, but one input is a text or a [text, pair]; send "
                          'a batch as a list of lists: [["text"], ["text", "pair"], ...]')
        sequences, single = [_sequence(value, "inputs")], True
    elif isinstance(value, list) and value:
        raise invalid('inputs mixes texts and lists; send one input ("text" or ["text", "pair"]) or a batch of '
                      'lists ([["text"], ["text", "pair"], ...])')
    else:
        texts, single = text_list(value, "inputs", max_client_batch_size)
        sequences = [(texts[0], None)]
    texts = [text for text, _ in sequences]
    pairs = [pair for _, pair in sequences]
    return PredictRequest(texts, pairs if any(pair is not None for pair in pairs) else None, single, truncate)


def check_input_form(query: PredictRequest, text_pairs: bool | None) -> None:
    """422 for inputs of the other form than the served classifier was fine-tuned on (`text_pairs`, from its
    config.json; None: not known, and either form is served). ["a", "b"] is one text pair in TEI's grammar: to a
    classifier of single texts that is most likely two texts meant as a batch, and answering it as a pair would be a
    label for input the model never learnt to read, so the message says how to send either."""
    paired = [False] * len(query.texts) if query.pairs is None else [pair is not None for pair in query.pairs]
    if text_pairs is False and any(paired):
        if query.single:
            raise invalid('inputs is a list of 2 texts, which is one input, a text and its pair (["text", "pair"]), '
                          "but this server's classifier was fine-tuned on single texts, not pairs; to classify 2 "
                          'texts, send them as a batch: [["text"], ["text"]]')
        raise invalid(f"inputs[{paired.index(True)}] is a text pair, but this server's classifier was fine-tuned on "
                      'single texts, not pairs; send each text as an input of its own: [["text"], ["text"]]')
    if text_pairs is True and not all(paired):
        where = "inputs" if query.single else f"inputs[{paired.index(False)}]"
        raise invalid(f"{where} is a single text, but this server's classifier was fine-tuned on text pairs; send "
                      'each input as a text and its pair: ["text", "pair"], or a batch [["text", "pair"], ...]')


def _sequence(item: list, where: str) -> tuple[str, str | None]:
    """One /predict input given as a list: [text] or [text, pair]."""
    if len(item) not in (1, 2):
        raise invalid(f"{where} holds {len(item)} items; an input is [text] or [text, pair]")
    texts, _ = text_list(item, where, 2)
    return texts[0], texts[1] if len(texts) == 2 else None


def tokenize_request(body: dict[str, Any], max_client_batch_size: int) -> TokenizeRequest:
    """POST /tokenize: {"inputs": text | [text], "add_special_tokens": true}."""
    check_unsupported(body)
    texts, _ = text_list(body.get("inputs"), "inputs", max_client_batch_size)
    return TokenizeRequest(texts, flag(body, "add_special_tokens", True))


def openai_request(body: dict[str, Any], max_client_batch_size: int) -> OpenAIRequest:
    """POST /v1/embeddings, OpenAI's request: {"input": text | [text], "model": ..., "encoding_format": "float" |
    "base64"}; the model named is ignored (the server serves one)."""
    if body.get("dimensions") is not None:
        raise invalid("dimensions is not supported by this server; leave it out")
    encoding = body.get("encoding_format")
    if encoding not in (None, "float", "base64"):
        raise invalid(f"encoding_format must be \"float\" or \"base64\", not {encoding!r:.40}")
    texts, _ = text_list(body.get("input"), "input", max_client_batch_size)
    return OpenAIRequest(texts, encoding == "base64")


# ---- the fields a route takes out of the body ----------------------------------------------------

def take_truncation_direction(body: dict[str, Any]) -> bool:
    """Whether long texts are cut at their start: TEI's "truncation_direction", "Left" or "Right" (its casing;
    lowercase too), default "Right"."""
    value = body.pop("truncation_direction", None)
    if value is None or value in ("Right", "right"):
        return False
    if value in ("Left", "left"):
        return True
    raise invalid(f'truncation_direction must be "Left" or "Right", not {_kind(value)} ({value!r:.40})')


def take_prompt_name(body: dict[str, Any]) -> str | None:
    """The name of the prompt a request asks for (app.py looks it up among the server's), or None."""
    value = body.pop("prompt_name", None)
    if value is None or (isinstance(value, str) and value):
        return value
    raise invalid(f"prompt_name must be the name of one of the server's prompts, not {_kind(value)} ({value!r:.40})")


def take_dimensions(body: dict[str, Any]) -> int | None:
    """How many leading dimensions of each vector to answer with (Matryoshka), or None for all."""
    value = body.pop("dimensions", None)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        value = int(value)  # 256.0 is 256 (JSON has one kind of number)
    if isinstance(value, float):  # 2.5, or 1e30: a float beyond 2**53 holds no exact whole number
        raise invalid(f"dimensions must be a positive whole number such as 256, not {value!r:.40}"
                      + (" (a number far beyond any model's dimensions)" if abs(value) >= 2**53 else ""))
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(f"dimensions must be a positive whole number, not {_kind(value)} ({value!r:.40})")
    if value < 1:
        raise invalid(f"dimensions must be a positive whole number, at least 1, not {value}")
    return value


def take_raw_scores(body: dict[str, Any]) -> bool:
    """Whether a classifier answers its raw scores (logits) instead of probabilities."""
    value = flag(body, "raw_scores", False)
    body.pop("raw_scores", None)
    return value


def one_text(value: Any, name: str) -> str:
    """A field that is one text, checked as every text is (`text_list`)."""
    if value is None:
        raise invalid(f"the body has no {name}; give it a text")
    if not isinstance(value, str):
        raise invalid(f"{name} must be a text, not {_kind(value)}")
    texts, _ = text_list(value, name, 1)
    return texts[0]


# ---- the later routes' requests ------------------------------------------------------------------

@dataclass
class RerankRequest:
    query: str
    texts: list[str]
    raw_scores: bool = False
    return_text: bool = False
    truncate: bool = False
    left: bool = False


@dataclass
class SimilarityRequest:
    source: str
    sentences: list[str]
    truncate: bool = False
    left: bool = False
    prompt_name: str | None = None


@dataclass
class DecodeRequest:
    ids: list[list[int]]
    single: bool
    skip_special_tokens: bool = True


@dataclass
class QuestionsRequest:
    questions: list[str]
    contexts: list[str]
    single: bool
    truncate: bool = False   # a question longer than a reader reads is cut to it (else 422)


def rerank_request(body: dict[str, Any], max_client_batch_size: int) -> RerankRequest:
    """POST /rerank: {"query": text, "texts": [text, ...], "raw_scores": false, "return_text": false, "truncate":
    false, "truncation_direction": "Right"}."""
    left = take_truncation_direction(body)
    query = one_text(body.get("query"), "query")
    texts, _ = text_list(body.get("texts"), "texts", max_client_batch_size)
    return RerankRequest(query, texts, flag(body, "raw_scores", False), flag(body, "return_text", False),
                         flag(body, "truncate", False), left)


def similarity_request(body: dict[str, Any], max_client_batch_size: int) -> SimilarityRequest:
    """POST /similarity: {"inputs": {"source_sentence": text, "sentences": [text, ...]}, "parameters": {"truncate",
    "truncation_direction", "prompt_name"}}; the source sentence counts towards --max-client-batch-size, as TEI
    counts it."""
    inputs = body.get("inputs")
    if not isinstance(inputs, dict):
        got = "none" if inputs is None else _kind(inputs)
        raise invalid('inputs must be an object {"source_sentence": text, "sentences": [text, ...]}, not ' + got)
    source = one_text(inputs.get("source_sentence"), "inputs.source_sentence")
    sentences, _ = text_list(inputs.get("sentences"), "inputs.sentences", max_client_batch_size)
    if len(sentences) + 1 > max_client_batch_size:
        raise invalid(f"inputs.sentences holds {len(sentences)} texts, {len(sentences) + 1} with the source sentence, "
                      f"more than the server's maximum of {max_client_batch_size} per request "
                      "(--max-client-batch-size); send them in smaller requests")
    parameters = body.get("parameters")
    if parameters is None:
        parameters = {}
    if not isinstance(parameters, dict):
        raise invalid(f"parameters must be an object, not {_kind(parameters)}")
    parameters = dict(parameters)
    left, prompt_name = take_truncation_direction(parameters), take_prompt_name(parameters)
    check_unsupported(parameters)  # dimensions, raw_scores: /similarity answers one score a sentence
    if body.get("dimensions") is not None:
        raise invalid("dimensions is not supported on this route; leave it out")
    return SimilarityRequest(source, sentences, flag(parameters, "truncate", False), left, prompt_name)


def decode_request(body: dict[str, Any], max_client_batch_size: int, vocab_size: int) -> DecodeRequest:
    """POST /decode: {"ids": [id, ...] | [[id, ...], ...], "skip_special_tokens": true}."""
    value = body.get("ids")
    if value is None:
        raise invalid('the body has no ids; send {"ids": [2, 17, 3]} or a list of such lists')
    if not isinstance(value, list):
        raise invalid(f"ids must be a list of token ids or a list of such lists, not {_kind(value)}")
    if not value:
        raise invalid("ids is an empty list: give token ids, or lists of them")
    single = not isinstance(value[0], list)
    sequences = [value] if single else value
    check_count(len(sequences), max_client_batch_size, "ids")
    for index, sequence in enumerate(sequences):
        where = "ids" if single else f"ids[{index}]"
        if not isinstance(sequence, list):
            raise invalid(f"{where} is {_kind(sequence)}, not a list of token ids")
        for k, token in enumerate(sequence):
            if isinstance(token, bool) or not isinstance(token, int):
                raise invalid(f"{where}[{k}] is {_kind(token)}, not a token id")
            if not 0 <= token < vocab_size:
                raise invalid(f"{where}[{k}] is {token}, not a token id of this model's vocabulary (0 to "
                              f"{vocab_size - 1})")
    return DecodeRequest(sequences, single, flag(body, "skip_special_tokens", True))


def asks_questions(body: dict[str, Any]) -> bool:
    """Whether a /predict body is shaped as a reader's ({"question", "context"} objects), not a classifier's."""
    value = body.get("inputs")
    return ("question" in body or "context" in body or isinstance(value, dict)
            or (isinstance(value, list) and bool(value) and all(isinstance(item, dict) for item in value)))


def questions_request(body: dict[str, Any], max_client_batch_size: int) -> QuestionsRequest:
    """POST /predict to a reader: {"inputs": {"question": text, "context": text}}, a list of such objects, or the
    object itself as the body."""
    value = body.get("inputs")
    if value is None and ("question" in body or "context" in body):
        value = body
    if isinstance(value, dict):
        items, single = [value], True
    elif isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        items, single = value, False
    else:
        got = "no inputs" if value is None else f"inputs as {_kind(value)}"
        raise invalid('this server serves a question-answering reader: send {"inputs": {"question": text, '
                      f'"context": text}}}} or a list of such objects, not {got}')
    check_count(len(items), max_client_batch_size)
    questions, contexts = [], []
    for index, item in enumerate(items):
        where = "inputs" if single else f"inputs[{index}]"
        questions.append(one_text(item.get("question"), f"{where}.question"))
        contexts.append(one_text(item.get("context"), f"{where}.context"))
    if body.get("raw_scores"):
        raise invalid("raw_scores is not supported by a question-answering reader: it answers spans of the context, "
                      "with their probabilities; leave it out")
    check_unsupported(body)
    return QuestionsRequest(questions, contexts, single, flag(body, "truncate", False))
