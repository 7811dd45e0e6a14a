"""`bertkit serve`'s routes beyond /embed and /predict, over real HTTP on tiny saved models: /similarity, /embed_all,
/decode, /rerank (a classifier fine-tuned by `bertkit finetune --task pairs`), a reader's /predict, `dimensions`,
prompts, `truncation_direction`, the API key, CORS and long texts read in windows, each against what the library or
the command line computes; TEI's status codes for bad requests; and 200 concurrent requests across these routes,
each answered as when sent alone."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from bertkit.cli import main
from bertkit.inference import encode
from bertkit.inference.loading import load_text_model
from bertkit.inference.serving import ServedModel
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.heads import BertForQuestionAnswering, BertForSequenceClassification
from bertkit.models.bert.modeling import BertModel
from bertkit.tokenizer import BertTokenizer
from serve_helpers import CALL_TIMEOUT, ServerProcess, exchange
from test_long_inputs import direct_chunked

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.xdist_group("serve-routes")]

WORDS = [f"w{i}" for i in range(30)]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "a", "dog", "good", "bad",
         "##s", "where", "is", "?", ".", *WORDS]
TINY = dict(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
            max_position_embeddings=16, initializer_range=0.3)
TEXTS = ["the cat sat on the mat", "good", "a bad dog", "the cats"]
LONG = " ".join(["the cat sat on the mat", "a good dog sat", "a bad cat"] * 3)  # 39 tokens, 16 positions
KEY = "s3cret-Key_for-tests.1"
ORIGIN = "https://app.example"
DEFAULT_PROMPT = "a "        # --default-prompt: before every text that names no prompt
NAMED = {"q": "good "}      # --prompts q="good "
READER_QA = {"max_length": 24, "doc_stride": 6, "max_answer_length": 4, "impossible": False}


def save(model, path):
    model.save_pretrained(path)
    BertTokenizer({token: i for i, token in enumerate(VOCAB)}).save_pretrained(path)
    return path


def call(server: ServerProcess, path: str, body=None, key: str | None = KEY, method: str = "POST",
         headers: dict[str, str] | None = None):
    """(status, headers, body) of one request, with the API key unless `key` is None."""
    auth = {"Authorization": f"Bearer {key}"} if key else {}
    return exchange(server.port, method, path, body, headers={**auth, **(headers or {})})


def ok(server: ServerProcess, path: str, body=None, **kwargs):
    status, headers, answer = call(server, path, body, **kwargs)
    assert status == 200, (path, body, status, answer)
    return answer, headers


def close(got, want, atol: float = 1e-5) -> None:
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64), atol=atol,
                               rtol=0)


def unit(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)


# ---- the models and their servers ----------------------------------------------------------------

@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    torch.manual_seed(0)
    return save(BertModel(BertConfig(**TINY)), tmp_path_factory.mktemp("encoder"))


@pytest.fixture(scope="module")
def embedder(encoder_dir, tmp_path_factory):
    """An embedding model behind an API key (from a file), CORS for one origin, a default prompt and a named one,
    and long texts read in windows sharing 4 tokens."""
    key_file = tmp_path_factory.mktemp("key") / "key.txt"
    key_file.write_text(KEY + "\n")
    with ServerProcess(encoder_dir, "--api-key-file", key_file, "--cors-allow-origin", ORIGIN,
                       "--default-prompt", DEFAULT_PROMPT, "--prompts", f"q={NAMED['q']}", "--long-inputs", "chunk",
                       "--chunk-stride", "4", "--max-client-batch-size", "8", "--max-batch-tokens", "64",
                       "--max-request-windows", "8") as server:
        yield server


@pytest.fixture(scope="module")
def encoder(encoder_dir):
    return load_text_model(encoder_dir, "encode")


@pytest.fixture(scope="module")
def pairs_dir(encoder_dir, tmp_path_factory):
    """A cross-encoder as `bertkit finetune --task pairs` makes one (two steps on a toy set: its scores are what
    they are; the server must give `bertkit predict`'s)."""
    root = tmp_path_factory.mktemp("pairs")
    rows = [f"{a}\t{b}\t{int(a.split()[0] == b.split()[0])}" for a in TEXTS for b in TEXTS]
    for split in ("train", "dev"):
        (root / f"{split}.tsv").write_text("text\ttext_pair\tlabel\n" + "\n".join(rows) + "\n")
    assert main([str(a) for a in ("finetune", "--task", "pairs", "--model", encoder_dir, "--train", root / "train.tsv",
                                  "--dev", root / "dev.tsv", "--max-length", 16, "--max-steps", 2, "--batch-size", 8,
                                  "--no-progress", "--out", root / "run")]) == 0
    return root / "run" / "best"


@pytest.fixture(scope="module")
def ranker(pairs_dir):
    with ServerProcess(pairs_dir, "--max-client-batch-size", "8") as server:
        yield server


@pytest.fixture(scope="module")
def reader_dir(tmp_path_factory):
    torch.manual_seed(0)
    config = BertConfig(**{**TINY, "max_position_embeddings": 64}, qa=READER_QA)
    return save(BertForQuestionAnswering(config), tmp_path_factory.mktemp("reader"))


@pytest.fixture(scope="module")
def reader(reader_dir):
    with ServerProcess(reader_dir) as server:
        yield server


QUESTIONS = ["where is w3 ?", "where is w17 ?", "is the cat on the mat ?"]
CONTEXTS = [" ".join(WORDS) + " .", " ".join(reversed(WORDS)) + " .", "the cat sat on the mat ."]


# ---- embedding routes ----------------------------------------------------------------------------

def test_similarity_embed_all_prompts_and_truncation_direction(embedder, encoder):
    model, tokenizer = encoder
    source, sentences = "the cat sat", ["a dog", "the cat sat on the mat", "good"]
    vectors = encode(model, tokenizer, [DEFAULT_PROMPT + t for t in [source, *sentences]], normalize=True)
    scores, headers = ok(embedder, "/similarity", {"inputs": {"source_sentence": source, "sentences": sentences}})
    close(scores, vectors[1:] @ vectors[0])
    assert headers["x-bertkit-windows"] == "1,1,1,1"
    named, _ = ok(embedder, "/similarity", {"inputs": {"source_sentence": source, "sentences": sentences},
                                            "parameters": {"prompt_name": "q", "truncate": False}})
    vectors = encode(model, tokenizer, [NAMED["q"] + t for t in [source, *sentences]], normalize=True)
    close(named, vectors[1:] @ vectors[0])

    states, _ = ok(embedder, "/embed_all", {"inputs": ["the cat sat", "good"]})
    for text, got in zip(["the cat sat", "good"], states):
        ids = tokenizer(DEFAULT_PROMPT + text, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            want = model(ids).last_hidden_state[0]
        assert np.asarray(got).shape == (ids.shape[1], 32)  # every token, [CLS] and [SEP] too
        close(got, want)
    single, _ = ok(embedder, "/embed_all", {"inputs": "good", "prompt_name": "q"})
    with torch.no_grad():
        close(single[0], model(tokenizer("good good", return_tensors="pt")["input_ids"]).last_hidden_state[0])

    # "Left" (TEI's casing; lowercase too) cuts a long text at its start: [CLS] + its last 14 tokens + [SEP]
    ids = tokenizer(DEFAULT_PROMPT + LONG, add_special_tokens=False)["input_ids"]
    cut = torch.tensor([[tokenizer.cls_token_id, *ids[-14:], tokenizer.sep_token_id]])
    with torch.no_grad():
        want = model(cut).last_hidden_state[0]
    for direction in ("Left", "left"):
        tokens, _ = ok(embedder, "/embed_all", {"inputs": LONG, "truncate": True, "truncation_direction": direction})
        close(tokens[0], want)
        vector, headers = ok(embedder, "/embed", {"inputs": LONG, "truncate": True, "normalize": False,
                                                  "truncation_direction": direction})
        close(vector[0], want[0])
        assert "x-bertkit-windows" not in headers  # cut, not read in windows

    tokens, _ = ok(embedder, "/tokenize", {"inputs": "the cat", "prompt_name": "q"})
    assert [(t["text"], t["start"], t["stop"]) for t in tokens[0]] == [
        ("[CLS]", None, None), ("good", 0, 4), ("the", 5, 8), ("cat", 9, 12), ("[SEP]", None, None)]


def test_long_texts_are_read_in_windows_and_pooled(embedder, encoder):
    model, tokenizer = encoder
    vectors, headers = ok(embedder, "/embed", {"inputs": ["good", LONG], "normalize": False})
    # 40 tokens (the prompt's and the text's) in windows of 14 sharing 4: [0, 14), [10, 24), [20, 34), [30, 40)
    assert len(tokenizer(DEFAULT_PROMPT + LONG, add_special_tokens=False)["input_ids"]) == 40
    assert headers["x-bertkit-windows"] == "1,4"
    close(vectors[1], direct_chunked(model, tokenizer, DEFAULT_PROMPT + LONG, 4))
    close(vectors[0], encode(model, tokenizer, [DEFAULT_PROMPT + "good"])[0])
    answer, headers = ok(embedder, "/v1/embeddings", {"input": [LONG], "encoding_format": "float"})
    close(answer["data"][0]["embedding"], unit(np.asarray(vectors[1])))
    assert headers["x-bertkit-windows"] == "4" and answer["usage"]["prompt_tokens"] == 16 * 3 + 12
    scores, headers = ok(embedder, "/similarity", {"inputs": {"source_sentence": "good", "sentences": [LONG]}})
    close(scores, [unit(np.asarray(vectors[1])) @ unit(np.asarray(vectors[0]))])
    assert headers["x-bertkit-windows"] == "1,4"


def test_dimensions_and_the_openai_client(embedder, encoder):
    openai = pytest.importorskip("openai")
    model, tokenizer = encoder
    raw = encode(model, tokenizer, [DEFAULT_PROMPT + t for t in TEXTS])
    cut, _ = ok(embedder, "/embed", {"inputs": TEXTS, "dimensions": 8})
    close(cut, unit(raw[:, :8]))  # the first 8 dimensions, made unit length again
    cut, _ = ok(embedder, "/embed", {"inputs": TEXTS, "dimensions": 8, "normalize": False})
    close(cut, raw[:, :8])

    client = openai.OpenAI(base_url=f"http://127.0.0.1:{embedder.port}/v1", api_key=KEY, timeout=CALL_TIMEOUT,
                           max_retries=0)
    answer = client.embeddings.create(input=TEXTS, model="tiny", dimensions=8)  # base64 on the wire
    assert [len(d.embedding) for d in answer.data] == [8] * len(TEXTS)
    close([d.embedding for d in answer.data], unit(raw[:, :8]))
    answer = client.embeddings.create(input=TEXTS[1], model="tiny", dimensions=32, encoding_format="float")
    close(answer.data[0].embedding, unit(raw[1]))
    with pytest.raises(openai.UnprocessableEntityError, match="dimensions 33 is more than the model's 32"):
        client.embeddings.create(input="good", model="tiny", dimensions=33)
    status, _, error = call(embedder, "/v1/embeddings", {"input": "good", "dimensions": 33})
    assert status == 422 and error["error"]["type"] == "validation" and error["error"]["code"] == 422
    stranger = openai.OpenAI(base_url=f"http://127.0.0.1:{embedder.port}/v1", api_key="not-the-key",
                             timeout=CALL_TIMEOUT, max_retries=0)
    with pytest.raises(openai.AuthenticationError, match="API key"):
        stranger.embeddings.create(input="good", model="tiny")


def test_the_api_key_guards_every_route_but_health(embedder):
    for key, headers in ((None, {}), ("wrong", {}), (KEY[:-1], {}), (None, {"Authorization": KEY}),
                         (None, {"Authorization": f"Basic {KEY}"})):
        status, answer_headers, error = call(embedder, "/embed", {"inputs": "good"}, key=key, headers=headers)
        assert status == 401 and error["error_type"] == "unauthorized" and "API key" in error["error"]
        assert answer_headers["www-authenticate"] == "Bearer" and KEY not in json.dumps(error)
    status, _, error = call(embedder, "/v1/embeddings", {"input": "good"}, key=None)
    assert status == 401 and error["error"]["type"] == "unauthorized" and error["error"]["code"] == 401
    for method, path in (("GET", "/info"), ("GET", "/metrics"), ("POST", "/tokenize"), ("POST", "/decode"),
                         ("POST", "/similarity"), ("POST", "/embed_all"), ("POST", "/rerank"), ("POST", "/predict")):
        assert call(embedder, path, {}, key=None, method=method)[0] == 401, path
    assert call(embedder, "/health", key=None, method="GET")[0] == 200
    # a trailing slash is no route: a 404 naming the routes, not a redirect to the Host header's address
    for method, path, body in (("POST", "/embed/", {"inputs": "good"}), ("GET", "/health/", None)):
        status, answer_headers, error = call(embedder, path, body, key=None, method=method,
                                             headers={"Host": "elsewhere.example"})
        assert status == 404 and "location" not in answer_headers and error["error"].startswith(f"no route {path};")
    assert call(embedder, "/embed", {"inputs": "good"}, key=None, headers={"Authorization": f"bearer {KEY}"})[0] == 200
    info, _ = ok(embedder, "/info", method="GET")
    assert KEY not in json.dumps(info) and info["long_inputs"] == "chunk" and info["prompts"] == ["q"]
    metrics, _ = ok(embedder, "/metrics", method="GET")
    assert 'bertkit_requests_total{route="/embed",status="401"}' in metrics.decode()
    assert KEY not in embedder.text()


def test_a_request_of_more_windows_than_its_bound_is_refused_before_any_is_run(embedder):
    """One request may cost --max-request-windows windows (8 here): three long texts take 12, refused with 413
    naming the limit, and the server answers the next request at once."""
    status, _, error = call(embedder, "/embed", {"inputs": [LONG, LONG, LONG]})
    assert status == 413 and error["error_type"] == "validation"
    assert error["error"] == ("the inputs take 12 windows of 16 tokens, more than the 8 one request may cost "
                              "(--max-request-windows); send the long texts over several requests, or "
                              '"truncate": true')
    assert ok(embedder, "/embed", {"inputs": [LONG, "good"]})[1]["x-bertkit-windows"] == "4,1"
    assert ok(embedder, "/info", method="GET")[0]["max_request_windows"] == 8


def test_a_reader_bounds_its_windows_too(reader):
    context = " ".join(WORDS * 40) + " ."  # a context far longer than 32 of the reader's windows
    status, _, error = call(reader, "/predict", {"inputs": {"question": QUESTIONS[0], "context": context}})
    assert status == 413 and error["error"].startswith("the inputs take ")
    assert error["error"].endswith("more than the 16 one request may cost (--max-request-windows); send the long "
                                   "texts over several requests, or shorter contexts")


def test_cors_answers_the_allowed_origin_only(embedder):
    preflight = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization, content-type"}
    status, headers, _ = call(embedder, "/embed", key=None, method="OPTIONS", headers=preflight)
    assert status == 200 and headers["access-control-allow-origin"] == ORIGIN  # before any key is asked for
    assert "authorization" in headers["access-control-allow-headers"].lower()
    status, headers, _ = call(embedder, "/embed", key=None, method="OPTIONS",
                              headers={**preflight, "Origin": "https://elsewhere.example"})
    assert status == 400 and "access-control-allow-origin" not in headers
    status, headers, _ = call(embedder, "/embed", {"inputs": "good"}, headers={"Origin": ORIGIN})
    assert status == 200 and headers["access-control-allow-origin"] == ORIGIN
    assert "x-bertkit-windows" in headers["access-control-expose-headers"]


def test_decode(embedder, encoder):
    _, tokenizer = encoder
    ids = tokenizer("the cats sat")["input_ids"]
    assert ok(embedder, "/decode", {"ids": ids})[0] == ["the cats sat"]
    texts, _ = ok(embedder, "/decode", {"ids": [ids, tokenizer("good")["input_ids"], []],
                                        "skip_special_tokens": False})
    assert texts == ["[CLS] the cats sat [SEP]", "[CLS] good [SEP]", ""]


EMBEDDER_BAD = [  # (route, body, status, words of the message)
    ("/similarity", {"inputs": {"source_sentence": "good", "sentences": ["a"]}, "parameters": {"dimensions": 4}},
     422, "dimensions is not supported on this route"),
    ("/embed_all", {"inputs": "good", "normalize": True}, 422, "normalize is not supported on /embed_all"),
    ("/similarity", {"inputs": "good"}, 422, 'inputs must be an object {"source_sentence"'),
    ("/similarity", {"inputs": {"sentences": ["good"]}}, 422, "no inputs.source_sentence"),
    ("/similarity", {"inputs": {"source_sentence": "good", "sentences": []}}, 422, "inputs.sentences is an empty"),
    ("/similarity", {"inputs": {"source_sentence": "good", "sentences": ["a"] * 8}}, 422,
     "holds 8 texts, 9 with the source sentence, more than the server's maximum of 8"),
    ("/similarity", {"inputs": {"source_sentence": "good", "sentences": ["a"]}, "parameters": []}, 422,
     "parameters must be an object"),
    ("/embed_all", {"inputs": LONG}, 422, "inputs[0] has 42 tokens, more than the model's 16 positions"),
    ("/embed_all", {"inputs": "good", "dimensions": 4}, 422, "dimensions is not supported on this route"),
    ("/embed_all", {"inputs": "good", "truncation_direction": "middle"}, 422, 'must be "Left" or "Right"'),
    ("/embed", {"inputs": "good", "prompt_name": "passage"}, 422, "'passage' is not one of this server's prompts: q"),
    ("/embed", {"inputs": "good", "prompt_name": 3}, 422, "prompt_name must be the name"),
    ("/embed", {"inputs": "good", "dimensions": 2.5}, 422, "dimensions must be a positive whole number such as 256, "
                                                           "not 2.5"),
    ("/embed", {"inputs": "good", "dimensions": 1e30}, 422, "not 1e+30 (a number far beyond any model's dimensions)"),
    ("/embed", {"inputs": "good", "dimensions": -3}, 422, "dimensions must be a positive whole number, at least 1, "
                                                         "not -3"),
    ("/decode", {"text": "good"}, 422, "the body has no ids"),
    ("/decode", {"ids": []}, 422, "ids is an empty list"),
    ("/decode", {"ids": [2, 999, 3]}, 422, f"ids[1] is 999, not a token id of this model's vocabulary (0 to "
                                           f"{len(VOCAB) - 1})"),
    ("/decode", {"ids": [[2], "x"]}, 422, "ids[1] is a string, not a list of token ids"),
    ("/decode", {"ids": [[2, True]]}, 422, "ids[0][1] is a boolean, not a token id"),
    ("/decode", {"ids": [[2]] * 9}, 422, "ids holds 9 texts, more than the server's maximum of 8"),
    ("/rerank", {"query": "good", "texts": ["good"]}, 424,
     "an embedding model: /rerank needs a cross-encoder: a classifier fine-tuned on text pairs"),
    ("/predict", {"inputs": {"question": "where", "context": "here"}}, 424, "/predict needs a fine-tuned classifier"),
]


def test_bad_requests_to_an_embedding_model(embedder):
    for route, body, status, words in EMBEDDER_BAD:
        got, _, answer = call(embedder, route, body)
        assert got == status, (route, body, got, answer)
        assert words in answer["error"] and answer["error_type"] in ("validation", "backend"), (route, answer)


# ---- a cross-encoder: /rerank --------------------------------------------------------------------

def predicted_pairs(capsys, model_dir, query: str, texts: list[str]) -> list[dict]:
    """`bertkit predict --json` on (query, text) pairs."""
    capsys.readouterr()
    argv = ["predict", "--model", str(model_dir), "--json", *[query] * len(texts)]
    for text in texts:
        argv += ["--pair", text]
    assert main(argv) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_rerank_scores_are_bertkit_predicts(ranker, pairs_dir, capsys):
    config = json.loads((pairs_dir / "config.json").read_text())
    assert config["finetuning_task"] == "pairs" and config["id2label"] == {"0": "0", "1": "1"}
    query, texts = "the cat", ["a dog", "the cat sat on the mat", "good", "the cats", "a bad dog"]
    expected = predicted_pairs(capsys, pairs_dir, query, texts)
    ranks, _ = ok(ranker, "/rerank", {"query": query, "texts": texts, "return_text": True})
    assert sorted(rank["index"] for rank in ranks) == list(range(len(texts)))
    assert [rank["score"] for rank in ranks] == sorted((rank["score"] for rank in ranks), reverse=True)
    for rank in ranks:  # the positive label's probability, as `bertkit predict` gives it
        assert rank["text"] == texts[rank["index"]]
        assert rank["score"] == pytest.approx(expected[rank["index"]]["probabilities"]["1"], abs=1e-5)
    plain, _ = ok(ranker, "/rerank", {"query": query, "texts": texts})
    assert all("text" not in rank for rank in plain)

    model, tokenizer = load_text_model(pairs_dir, "predict")
    batch = tokenizer([query] * len(texts), texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).logits[:, 1]
    raw, _ = ok(ranker, "/rerank", {"query": query, "texts": texts, "raw_scores": True})
    for rank in raw:
        assert rank["score"] == pytest.approx(float(logits[rank["index"]]), abs=1e-5)

    # a pair too long: refused, cut at the right, or at the left (TEI's "Left")
    status, _, error = call(ranker, "/rerank", {"query": query, "texts": ["good", LONG]})
    assert status == 422 and "texts[1] has 44 tokens, more than the model's 16 positions" in error["error"]
    left = BertTokenizer.from_pretrained(pairs_dir, truncation_side="left")
    for direction, cutter in (("Right", tokenizer), ("left", left)):
        pair = cutter(query, LONG, truncation=True, max_length=16, return_tensors="pt")
        with torch.no_grad():
            want = model(pair["input_ids"], pair["attention_mask"], pair["token_type_ids"]).logits.softmax(-1)[0, 1]
        ranks, _ = ok(ranker, "/rerank", {"query": query, "texts": [LONG], "truncate": True,
                                          "truncation_direction": direction})
        assert ranks[0]["score"] == pytest.approx(float(want), abs=1e-5)

    info, _ = ok(ranker, "/info", method="GET")
    assert info["model_type"] == {"reranker": {"id2label": {"0": "0", "1": "1"}, "label2id": {"0": 0, "1": 1}}}
    assert info["task"] == "classifier" and info["rerank_label"] == "1"
    pair = tokenizer(query, "a dog", return_tensors="pt")
    with torch.no_grad():
        pair_logits = model(pair["input_ids"], pair["attention_mask"], pair["token_type_ids"]).logits[0].tolist()
    scores, _ = ok(ranker, "/predict", {"inputs": [query, "a dog"], "raw_scores": True})  # TEI's raw scores
    want = sorted(zip(("0", "1"), pair_logits), key=lambda kv: -kv[1])
    assert [s["label"] for s in scores] == [label for label, _ in want]
    assert [s["score"] for s in scores] == pytest.approx([logit for _, logit in want], abs=1e-5)
    for route, body, status, words in (
            ("/rerank", {"query": "", "texts": ["good"]}, 422, "query is empty"),
            ("/rerank", {"texts": ["good"]}, 422, "the body has no query"),
            ("/rerank", {"query": "good"}, 422, "the body has no texts"),
            ("/rerank", {"query": "good", "texts": []}, 422, "texts is an empty list"),
            ("/rerank", {"query": "good", "texts": ["a"] * 9}, 422, "texts holds 9 texts, more than the server's "
                                                                     "maximum of 8"),
            ("/rerank", {"query": "good", "texts": ["a"], "return_text": "yes"}, 422, "return_text must be true"),
            ("/embed", {"inputs": "good"}, 424, "a classifier model: /embed needs an embedding model; use /rerank "
                                                "or /predict"),
            ("/predict", {"inputs": "good", "prompt_name": "q"}, 422, "prompt_name is not supported on this route")):
        got, _, answer = call(ranker, route, body)
        assert got == status and words in answer["error"], (route, body, got, answer)


def test_rerank_on_a_classifier_of_single_texts_says_why_not(tmp_path):
    torch.manual_seed(0)
    config = BertConfig(**TINY, id2label={0: "negative", 1: "positive"})
    model_dir = save(BertForSequenceClassification(config), tmp_path / "classifier")
    assert not ServedModel.load(model_dir).pairs
    with ServerProcess(model_dir) as server:
        status, _, error = call(server, "/rerank", {"query": "good", "texts": ["a dog"]}, key=None)
        assert status == 424 and error["error_type"] == "backend"
        assert error["error"] == (f"this server serves {model_dir}, a classifier of single texts: /rerank needs a "
                                  "cross-encoder: a classifier fine-tuned on text pairs (bertkit finetune --task "
                                  "pairs); use /predict")
        status, _, error = call(server, "/predict", {"inputs": {"question": "where", "context": "here"}}, key=None)
        assert status == 422 and "need a question-answering reader" in error["error"]
        info = call(server, "/info", key=None, method="GET")[2]
        assert "classifier" in info["model_type"] and "rerank_label" not in info


# ---- a reader: /predict with questions -----------------------------------------------------------

def test_a_reader_answers_as_bertkit_predict(reader, reader_dir, capsys):
    capsys.readouterr()
    argv = ["predict", "--model", str(reader_dir), "--json"]
    for question, context in zip(QUESTIONS, CONTEXTS):
        argv += ["--question", question, "--context", context]
    assert main(argv) == 0
    expected = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    batch = [{"question": q, "context": c} for q, c in zip(QUESTIONS, CONTEXTS)]
    answers, _ = ok(reader, "/predict", {"inputs": batch})
    assert len(answers) == len(QUESTIONS)
    for got, want, context in zip(answers, expected, CONTEXTS):
        assert (got["answer"], got["start"], got["end"]) == (want["answer"], want["start"], want["end"])
        assert got["score"] == pytest.approx(want["score"], abs=1e-5)
        assert context[got["start"]:got["end"]] == got["answer"]  # character offsets into the context
    one, _ = ok(reader, "/predict", {"inputs": {"question": QUESTIONS[1], "context": CONTEXTS[1]}})
    bare, _ = ok(reader, "/predict", {"question": QUESTIONS[1], "context": CONTEXTS[1]})
    assert one["answer"] == bare["answer"] == answers[1]["answer"]
    assert one["score"] == pytest.approx(answers[1]["score"], abs=1e-5)
    info, _ = ok(reader, "/info", method="GET", key=None)
    assert info["task"] == "qa" and info["model_type"] == {"question_answering": READER_QA}
    for body, words in (({"inputs": "a text"}, "serves a question-answering reader: send {\"inputs\": {\"question\""),
                        ({"inputs": {"question": "where"}}, "the body has no inputs.context"),
                        ({"inputs": [{"question": " ", "context": "here"}]}, "inputs[0].question is only white space"),
                        ({"inputs": [{"question": "a", "context": "b"}] * 33}, "maximum of 32"),
                        ({"inputs": {"question": " ".join(["where"] * 30), "context": "here"}},
                         "inputs.question has 30 tokens, more than the 14 this reader's windows leave"),
                        ({"inputs": {"question": " ".join(["where"] * 70), "context": "here"}},
                         'inputs.question has 70 tokens, more than the 64 a reader reads of a question; send a '
                         'shorter question, or "truncate": true to cut it to them'),
                        ({"inputs": {"question": "where", "context": "here"}, "raw_scores": True},
                         "raw_scores is not supported by a question-answering reader"),
                        ({"inputs": {"question": "where", "context": "here"}, "prompt_name": "q"},
                         "prompt_name is not supported on this route")):
        status, _, error = call(reader, "/predict", body, key=None)
        assert status == 422 and words in error["error"], (body, error)
    assert call(reader, "/embed", {"inputs": "good"}, key=None)[0] == 424


# ---- many at once --------------------------------------------------------------------------------

def numbers_equal(got, want) -> None:
    """Equal within float error (different batches pad differently), structure and every other value exactly."""
    if isinstance(want, dict):
        assert got.keys() == want.keys()
        for key in want:
            numbers_equal(got[key], want[key])
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for a, b in zip(got, want):
            numbers_equal(a, b)
    elif isinstance(want, float):
        assert got == pytest.approx(want, abs=1e-5)
    else:
        assert got == want


def test_200_concurrent_requests_across_the_routes(embedder, ranker, reader):
    """Each request is first sent alone (its answer checked against the library in the tests above), then 200 of
    them at once from 16 threads, mixed across three servers' routes: every answer is its own."""
    plans = [
        (embedder, "/similarity", {"inputs": {"source_sentence": "good", "sentences": TEXTS}}),
        (embedder, "/similarity", {"inputs": {"source_sentence": LONG, "sentences": TEXTS[:2]},
                                   "parameters": {"prompt_name": "q"}}),
        (embedder, "/embed_all", {"inputs": TEXTS[:3]}),
        (embedder, "/embed", {"inputs": [LONG, *TEXTS], "dimensions": 12}),
        (embedder, "/v1/embeddings", {"input": TEXTS[2:], "dimensions": 5, "encoding_format": "float"}),
        (embedder, "/decode", {"ids": [[2, 5, 6, 3], [12, 13]]}),
        (embedder, "/tokenize", {"inputs": TEXTS[:2], "prompt_name": "q"}),
        (ranker, "/rerank", {"query": "the cat", "texts": TEXTS, "return_text": True}),
        (ranker, "/rerank", {"query": "good", "texts": TEXTS[1:], "raw_scores": True}),
        (reader, "/predict", {"inputs": [{"question": q, "context": c} for q, c in zip(QUESTIONS, CONTEXTS)]}),
        (reader, "/predict", {"inputs": {"question": QUESTIONS[0], "context": CONTEXTS[0]}}),
    ]
    alone = [call(server, path, body) for server, path, body in plans]
    assert all(status == 200 for status, _, _ in alone), [(s, e) for s, _, e in alone if s != 200]

    def send(k: int):
        server, path, body = plans[k % len(plans)]
        return k, call(server, path, body)

    with ThreadPoolExecutor(16) as threads:
        answers = list(threads.map(send, range(200), timeout=CALL_TIMEOUT * 2))
    assert len(answers) == 200
    for k, (status, headers, answer) in answers:
        want_status, want_headers, want = alone[k % len(plans)]
        assert status == 200, (plans[k % len(plans)][1], answer)
        assert headers.get("x-bertkit-windows") == want_headers.get("x-bertkit-windows")
        numbers_equal(answer, want)
    for server in (embedder, ranker, reader):
        metrics, _ = ok(server, "/metrics", method="GET")
        assert "\nbertkit_requests_in_flight 0.0\n" in metrics.decode()


# ---- the command line ----------------------------------------------------------------------------

def test_serve_refuses_bad_keys_prompts_and_chunk_flags(encoder_dir, tmp_path, capsys, monkeypatch):
    refusals = [
        (["--api-key", KEY, "--api-key-file", str(tmp_path / "k")], "give the API key once"),
        (["--api-key-file", str(tmp_path / "missing")], "--api-key-file " + str(tmp_path / "missing") + ": cannot "
                                                         "read it"),
        (["--api-key", "two words"], "the API key of --api-key must be printable ASCII without spaces"),
        (["--chunk-stride", "3"], "--chunk-stride and --chunk-pooling are for --long-inputs chunk"),
        (["--long-inputs", "chunk", "--chunk-stride", "14"], "--chunk-stride must be a whole number from 0 to 13"),
        (["--prompts", "query"], "--prompts takes NAME=PREFIX items"),
    ]
    from bertkit.cli import build_parser

    both = build_parser().parse_args(["serve", "m", "--prompts", "q=a: ", "p=b: ", "--prompts", "r=c"])
    assert both.prompts == ["q=a: ", "p=b: ", "r=c"]  # several after one flag, and the flag repeated
    (tmp_path / "empty").write_text("\n")
    refusals.append((["--api-key-file", str(tmp_path / "empty")], "holds no key on its first line"))
    for argv, words in refusals:
        assert main(["serve", str(encoder_dir), "--port", "0", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert words in err and "two words" not in err, (argv, err)
    monkeypatch.setenv("BERTKIT_API_KEY", "ключ")
    assert main(["serve", str(encoder_dir), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "the API key of $BERTKIT_API_KEY must be printable ASCII" in err and "ключ" not in err
    for blank in ("", "  "):  # set, but to nothing: refused, not a server with no key
        monkeypatch.setenv("BERTKIT_API_KEY", blank)
        assert main(["serve", str(encoder_dir), "--port", "0"]) == 2
        assert capsys.readouterr().err == (
            "bertkit serve: error: $BERTKIT_API_KEY is set but empty: the server would answer without a key; give it "
            "the key, or unset it (unset BERTKIT_API_KEY) to serve without one\n")


def test_prompts_are_for_embedding_models(encoder_dir, reader_dir, tmp_path):
    (encoder_dir / "config_sentence_transformers.json").write_text(json.dumps({"prompts": {"doc": "a "}}))
    try:
        served = ServedModel.load(encoder_dir, prompts={"q": "good "}, default_prompt="the ")
        assert served.prompts == {"doc": "a ", "q": "good "} and served.default_prompt == "the "
    finally:
        (encoder_dir / "config_sentence_transformers.json").unlink()
    with pytest.raises(ValueError, match="is a qa model: prompts are prefixes of the texts an embedding model"):
        ServedModel.load(reader_dir, default_prompt="the ")
