"""`bertkit serve` over HTTP on tiny saved models: every route answers what the library computes (vectors of `encode`,
labels of `predict`, spans, tokens), 200 concurrent requests all get their own vectors, bad requests get TEI's status
codes as JSON, a model that is loading gets 503, and a family the server cannot serve is refused in one line."""

from __future__ import annotations

import base64
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from bertkit.cli import main
from bertkit.cli.serve import DEFAULTS, max_batch_tokens
from bertkit.inference import encode, predict
from bertkit.inference.loading import load_text_model
from bertkit.inference.serving import ServedModel, ServerSettings, create_app
from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.heads import BertForSequenceClassification, BertForTokenClassification
from bertkit.models.bert.modeling import BertModel
from bertkit.models.gpt.configuration import GPT2Config
from bertkit.models.gpt.modeling import GPT2LMHeadModel
from bertkit.tokenizer import BertTokenizer
from bertkit.utils.constants import GPU_BATCH_TOKENS
from serve_helpers import CALL_TIMEOUT, ServerProcess, assert_same_entities, request

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.xdist_group("serve")]

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "张", "三", "在", "北", "京", "工", "作", "好", "很", "差",
         "。", "the", "cat", "sat", "on", "mat", "a", "dog", "good", "bad", "##s"]
TINY = dict(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
            max_position_embeddings=16, initializer_range=0.3)
TEXTS = ["the cat sat on the mat", "很好", "a bad dog", "张三在北京工作。", "the cats", "good"]


def save(model, path):
    model.save_pretrained(path)
    BertTokenizer({token: i for i, token in enumerate(VOCAB)}).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    torch.manual_seed(0)
    return save(BertModel(BertConfig(**TINY)), tmp_path_factory.mktemp("encoder"))


@pytest.fixture(scope="module")
def classifier_dir(tmp_path_factory):
    torch.manual_seed(0)
    config = BertConfig(**TINY, id2label={0: "negative", 1: "neutral", 2: "positive"})
    return save(BertForSequenceClassification(config), tmp_path_factory.mktemp("classifier"))


@pytest.fixture(scope="module")
def tagger_dir(tmp_path_factory):
    torch.manual_seed(0)
    config = BertConfig(**TINY, id2label={0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"})
    model = BertForTokenClassification(config)
    with torch.no_grad():  # rig the head so that some tokens come out as entities
        model.classifier.bias.copy_(torch.tensor([0.0, 0.5, 0.3, 0.4, 0.2]))
    return save(model, tmp_path_factory.mktemp("tagger"))


@pytest.fixture(scope="module")
def embedder(encoder_dir):
    with ServerProcess(encoder_dir, "--max-client-batch-size", "8", "--payload-limit", "4000",
                       "--max-batch-tokens", "64") as server:
        yield server


# ---- the routes ----------------------------------------------------------------------------------

def test_embed_equals_encode(embedder, encoder_dir):
    model, tokenizer = load_text_model(encoder_dir, "encode")
    status, vectors = embedder.post("/embed", {"inputs": TEXTS})
    assert status == 200 and np.asarray(vectors).shape == (len(TEXTS), 32)
    np.testing.assert_allclose(vectors, encode(model, tokenizer, TEXTS, normalize=True), atol=1e-5, rtol=0)
    assert np.linalg.norm(vectors, axis=1) == pytest.approx(1.0, abs=1e-5)
    status, raw = embedder.post("/embed", {"inputs": TEXTS, "normalize": False})
    assert status == 200
    np.testing.assert_allclose(raw, encode(model, tokenizer, TEXTS), atol=1e-5, rtol=0)
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0)  # the raw vectors, not normalized ones
    status, single = embedder.post("/embed", {"inputs": "很好"})  # one text: a list of one vector, as TEI
    assert status == 200 and np.asarray(single).shape == (1, 32)
    np.testing.assert_allclose(single[0], vectors[1], atol=1e-5, rtol=0)
    long = " ".join(["the cat"] * 20)  # 40 tokens, 16 positions
    status, cut = embedder.post("/embed", {"inputs": [long], "truncate": True})
    assert status == 200
    with pytest.warns(UserWarning, match="truncated"):
        np.testing.assert_allclose(cut, encode(model, tokenizer, [long], normalize=True), atol=1e-5, rtol=0)
    assert "warning" not in embedder.text()  # truncation asked for is no news: no line per request in the log


def test_embed_from_sixteen_threads(embedder, encoder_dir):
    """200 requests from 16 threads at once, each of 1-3 texts: every one answered with its own texts' vectors."""
    model, tokenizer = load_text_model(encoder_dir, "encode")
    pool = [" ".join(VOCAB[5 + (i * 7 + k) % (len(VOCAB) - 6)] for k in range(1 + i % 9)) for i in range(50)]
    expected = dict(zip(pool, encode(model, tokenizer, pool, normalize=True)))
    requests = [[pool[(i * 3 + k) % len(pool)] for k in range(1 + i % 3)] for i in range(200)]

    def send(texts):
        return texts, *request(embedder.port, "POST", "/embed", {"inputs": texts})

    with ThreadPoolExecutor(16) as threads:
        answers = list(threads.map(send, requests, timeout=CALL_TIMEOUT * 2))
    assert len(answers) == 200
    for texts, status, vectors in answers:
        assert status == 200
        np.testing.assert_allclose(vectors, [expected[text] for text in texts], atol=1e-5, rtol=0)
    assert embedder.metric("bertkit_batch_size_count") >= 1
    assert embedder.metric("bertkit_requests_in_flight") == 0


def test_predict_classifier_equals_predict(classifier_dir):
    model, tokenizer = load_text_model(classifier_dir, "predict")
    expected = predict(model, tokenizer, TEXTS)
    with ServerProcess(classifier_dir) as server:
        status, batch = server.post("/predict", {"inputs": [[text] for text in TEXTS]})
        assert status == 200 and len(batch) == len(TEXTS)
        for answer, want in zip(batch, expected):
            assert [a["label"] for a in answer][0] == want["label"]
            assert {a["label"]: a["score"] for a in answer} == pytest.approx(want["probabilities"], abs=1e-5)
            assert [a["score"] for a in answer] == sorted((a["score"] for a in answer), reverse=True)
        status, single = server.post("/predict", {"inputs": "很好"})
        assert status == 200 and single[0]["label"] == expected[1]["label"] and len(single) == 3
        pair = predict(model, tokenizer, ["the cat"], ["a dog"])[0]
        status, answer = server.post("/predict", {"inputs": ["the cat", "a dog"]})  # TEI: two texts are a pair
        assert status == 200 and answer[0]["score"] == pytest.approx(pair["score"], abs=1e-5)
        status, info = server.get("/info")
        assert status == 200 and info["task"] == "classifier"
        assert info["model_type"]["classifier"]["id2label"] == {"0": "negative", "1": "neutral", "2": "positive"}
        status, error = server.post("/embed", {"inputs": "很好"})
        assert status == 424 and "/predict" in error["error"]
        assert server.stop() == 0


def test_predict_ner_spans_equal_predict(tagger_dir):
    model, tokenizer = load_text_model(tagger_dir, "predict")
    texts = ["张三在北京工作。", "the cat sat on the mat"]
    expected = predict(model, tokenizer, texts)
    assert any(expected), "the rigged tagger finds entities"
    with ServerProcess(tagger_dir) as server:
        status, spans = server.post("/predict", {"inputs": [[text] for text in texts]})
        assert status == 200
        assert_same_entities(spans, expected)
        for span in spans[0]:
            assert texts[0][span["start"]:span["end"]] == span["text"]
        status, single = server.post("/predict", {"inputs": texts[0]})  # alone: padded differently, same spans
        assert status == 200 and [s["text"] for s in single] == [s["text"] for s in spans[0]]
        assert [s["score"] for s in single] == pytest.approx([s["score"] for s in spans[0]], abs=1e-5)
        status, error = server.post("/predict", {"inputs": ["张三", "北京"]})
        assert status == 422 and "pairs" in error["error"]


def test_tokenize_openai_info_health_metrics(embedder, encoder_dir):
    tokenizer = BertTokenizer.from_pretrained(encoder_dir)
    status, tokens = embedder.post("/tokenize", {"inputs": ["the cats 很好"]})
    assert status == 200
    ids = tokenizer("the cats 很好")["input_ids"]
    assert [t["id"] for t in tokens[0]] == ids
    assert [(t["text"], t["special"], t["start"], t["stop"]) for t in tokens[0]] == [
        ("[CLS]", True, None, None), ("the", False, 0, 3), ("cat", False, 4, 7), ("s", False, 7, 8),
        ("很", False, 9, 10), ("好", False, 10, 11), ("[SEP]", True, None, None)]
    status, plain = embedder.post("/tokenize", {"inputs": "很好", "add_special_tokens": False})
    assert status == 200 and [t["id"] for t in plain[0]] == ids[-3:-1]

    model, tokenizer = load_text_model(encoder_dir, "encode")
    want = encode(model, tokenizer, TEXTS[:3], normalize=True)
    status, answer = embedder.post("/v1/embeddings", {"input": TEXTS[:3], "model": "anything"})
    assert status == 200 and answer["object"] == "list" and [d["index"] for d in answer["data"]] == [0, 1, 2]
    np.testing.assert_allclose([d["embedding"] for d in answer["data"]], want, atol=1e-5, rtol=0)
    assert answer["usage"]["prompt_tokens"] == sum(len(tokenizer(t)["input_ids"]) for t in TEXTS[:3])
    status, packed = embedder.post("/v1/embeddings", {"input": "很好", "encoding_format": "base64"})
    assert status == 200
    vector = np.frombuffer(base64.b64decode(packed["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_allclose(vector, want[1], atol=1e-5, rtol=0)

    status, body = embedder.get("/health")
    assert status == 200 and body == b""
    status, info = embedder.get("/info")
    assert status == 200
    assert info["model_type"] == {"embedding": {"pooling": "cls"}} and info["model_dtype"] == "float32"
    assert (info["max_input_length"], info["max_client_batch_size"], info["max_batch_tokens"],
            info["payload_limit"]) == (16, 8, 64, 4000)

    embedder.post("/embed", {"inputs": "good"})  # one of each, whichever tests ran on this server before
    embedder.post("/embed", {"inputs": []})
    status, text = embedder.get("/metrics")
    text = text.decode()
    assert status == 200
    for line in ('bertkit_requests_total{route="/embed",status="200"}',
                 'bertkit_requests_total{route="/embed",status="422"}',
                 'bertkit_requests_total{route="/tokenize",status="200"}',
                 'bertkit_request_duration_seconds_bucket{le="0.001",route="/embed"}',
                 "bertkit_batch_size_bucket", "bertkit_batch_tokens_count", "bertkit_queue_depth 0.0",
                 "bertkit_requests_in_flight"):
        assert line in text, line


def test_openai_client(embedder, encoder_dir):
    openai = pytest.importorskip("openai")
    model, tokenizer = load_text_model(encoder_dir, "encode")
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{embedder.port}/v1", api_key="unused", timeout=CALL_TIMEOUT,
                           max_retries=0)
    want = encode(model, tokenizer, TEXTS, normalize=True)
    answer = client.embeddings.create(input=TEXTS, model="tiny")  # the client asks for base64 and decodes it
    np.testing.assert_allclose([d.embedding for d in answer.data], want, atol=1e-5, rtol=0)
    answer = client.embeddings.create(input="很好", model="tiny", encoding_format="float")
    np.testing.assert_allclose(answer.data[0].embedding, want[1], atol=1e-5, rtol=0)
    assert answer.usage.prompt_tokens == 4
    with pytest.raises(openai.UnprocessableEntityError, match="empty"):
        client.embeddings.create(input="", model="tiny")


# ---- bad requests --------------------------------------------------------------------------------

BAD = [  # (route, body or raw bytes, status, words of the message)
    ("/embed", b"{not json", 422, "not valid JSON"),
    ("/embed", b"", 422, "no body"),
    ("/embed", b'["a list"]', 422, "JSON object"),
    ("/embed", {"text": "no inputs"}, 422, "no inputs"),
    ("/embed", {"inputs": []}, 422, "empty list"),
    ("/embed", {"inputs": ""}, 422, "empty"),
    ("/embed", {"inputs": ["good", "   "]}, 422, "inputs[1] is only white space"),
    ("/embed", {"inputs": ["good", 3]}, 422, "inputs[1] is a number"),
    ("/embed", {"inputs": [[1, 2, 3]]}, 422, "not token ids"),
    ("/embed", {"inputs": {"a": 1}}, 422, "not an object"),
    ("/embed", {"inputs": "good", "normalize": "yes"}, 422, "normalize must be true or false"),
    ("/embed", {"inputs": "good", "truncate": 1}, 422, "truncate must be true or false"),
    ("/embed", {"inputs": " ".join(["the cat"] * 20)}, 422, 'inputs[0] has 42 tokens, more than the model\'s 16'),
    ("/embed", {"inputs": "good", "truncation_direction": "up"}, 422, 'truncation_direction must be "Left" or'),
    ("/embed", {"inputs": "good", "dimensions": 64}, 422, "dimensions 64 is more than the model's 32"),
    ("/embed", {"inputs": "good", "dimensions": 0}, 422, "dimensions must be a positive whole number"),
    ("/embed", {"inputs": "good", "prompt_name": "query"}, 422, "this server has no prompts"),
    ("/embed", {"inputs": "good", "raw_scores": True}, 422, "raw_scores is not supported"),
    ("/embed", {"inputs": "good\ud800"}, 422, "not valid"),
    ("/embed", {"inputs": ["good"] * 9}, 422, "9 texts, more than the server's maximum of 8"),
    ("/embed", {"inputs": ["good " * 1000]}, 413, "more than the server's limit of 4,000"),
    ("/tokenize", {"inputs": ["good"] * 9}, 422, "maximum of 8"),
    ("/tokenize", {"inputs": 5}, 422, "a text or a list of texts"),
    ("/v1/embeddings", {"input": [1, 2]}, 422, "not token ids"),
    ("/v1/embeddings", {"input": "good", "encoding_format": "int8"}, 422, "encoding_format"),
    ("/predict", {"inputs": "good"}, 424, "an embedding model"),
    ("/nowhere", {"inputs": "good"}, 404, "no route /nowhere"),
]


def test_bad_requests_get_their_codes_as_json(embedder):
    for route, body, status, words in BAD:
        raw = body if isinstance(body, bytes) else None
        got, answer = embedder.post(route, None if raw is not None else body, raw=raw)
        assert got == status, (route, body, got, answer)
        message = answer["error"]["message"] if route.startswith("/v1/") else answer["error"]
        assert words in message, (route, body, message)
        if not route.startswith("/v1/"):
            assert answer["error_type"] in ("validation", "backend")
    status, answer = embedder.get("/embed")
    assert status == 405 and answer["error"] == "/embed does not take GET"
    status, _ = embedder.post("/embed", raw=b"x" * 10, headers={"Content-Length": "999999"}, timeout=10)
    assert status == 413  # refused by its declared length, before the body is read
    status, text = embedder.get("/metrics")
    assert 'status="500"' not in text.decode()
    assert embedder.get("/health")[0] == 200  # still up, and still right
    assert embedder.post("/embed", {"inputs": "good"})[0] == 200


def test_payload_parsing_without_a_server():
    from bertkit.inference.serving.payloads import ServeError, predict_request

    assert predict_request({"inputs": "a"}, 4).single
    request_ = predict_request({"inputs": [["a"], ["b", "c"]]}, 4)
    assert (request_.texts, request_.pairs, request_.single) == (["a", "b"], [None, "c"], False)
    for inputs, words in ((["a", "b", "c"], "list of lists"), ([["a"], "b"], "mixes"), ([["a", "b", "c"]], "3 items"),
                          ([[]], "0 items"), ([["a"]] * 5, "maximum of 4")):
        with pytest.raises(ServeError, match=words):
            predict_request({"inputs": inputs}, 4)
    with pytest.raises(ServeError, match="raw_scores"):
        predict_request({"inputs": "a", "raw_scores": True}, 4)


# ---- loading, refusing ---------------------------------------------------------------------------

def test_503_while_the_model_loads(encoder_dir):
    """A real uvicorn on a free port, with a model that loads only when the test lets it."""
    import uvicorn

    release = threading.Event()

    def load():
        assert release.wait(CALL_TIMEOUT)
        return ServedModel.load(encoder_dir)

    app = create_app(load, ServerSettings(max_batch_tokens=64))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + CALL_TIMEOUT
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        for method, route, body in (("GET", "/health", None), ("POST", "/embed", {"inputs": "good"}),
                                    ("GET", "/info", None), ("POST", "/tokenize", {"inputs": "good"})):
            status, answer = request(port, method, route, body)
            assert status == 503 and answer["error_type"] == "unhealthy" and "loading" in answer["error"], route
        assert request(port, "GET", "/metrics")[0] == 200
        release.set()
        while request(port, "GET", "/health")[0] != 200:
            assert time.monotonic() < deadline, "the model did not become ready"
            time.sleep(0.02)
        assert request(port, "POST", "/embed", {"inputs": "good"})[0] == 200
    finally:
        release.set()
        server.should_exit = True
        thread.join(CALL_TIMEOUT)
    assert not thread.is_alive()


def test_load_failure_exits_with_one_line(encoder_dir, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    for path in encoder_dir.iterdir():
        (broken / path.name).write_bytes(path.read_bytes())
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    server = ServerProcess(broken, wait_ready=False)
    with server:
        assert server.wait() == 2
    lines = [line for line in server.text().splitlines() if "error" in line]
    assert len(lines) == 1 and lines[0].startswith("bertkit serve: error: ") and "model.safetensors" in lines[0]
    assert "Traceback" not in server.text()


def test_unservable_models_and_bad_flags_are_refused(tmp_path, encoder_dir, capsys):
    gpt = tmp_path / "gpt"
    GPT2LMHeadModel(GPT2Config(vocab_size=40, n_positions=16, n_embd=16, n_layer=1, n_head=2, bos_token_id=0,
                               eos_token_id=0)).save_pretrained(gpt)
    assert main(["serve", str(gpt)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("bertkit serve: error: ") and "GPT-2" in err and "serve takes BERT" in err
    assert "\n" not in err

    assert main(["serve", str(encoder_dir), "--max-batch-tokens", "8"]) == 2
    assert "--max-batch-tokens 8 is less than the model's 16 positions" in capsys.readouterr().err

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert main(["serve", str(encoder_dir), "--port", str(taken.getsockname()[1])]) == 2
    assert "cannot listen on 127.0.0.1" in capsys.readouterr().err

    with pytest.raises(SystemExit):
        main(["serve", str(encoder_dir), "--max-client-batch-size", "0"])
    assert "--max-client-batch-size: must be at least 1" in capsys.readouterr().err


def test_command_line_defaults_are_the_servers():
    defaults = ServerSettings()
    assert vars(DEFAULTS) == {name: getattr(defaults, name) for name in vars(DEFAULTS)}
    # --max-batch-tokens not given: the server's default on the CPU, larger batches on a GPU
    assert max_batch_tokens(None, torch.device("cpu")) == defaults.max_batch_tokens == 2048
    assert max_batch_tokens(None, torch.device("cuda", 0)) == GPU_BATCH_TOKENS == 16_384
    assert max_batch_tokens(100, torch.device("cuda")) == 100
    with pytest.raises(ValueError, match="max_batch_tokens must be at least 1"):
        ServerSettings(max_batch_tokens=0)


def test_the_served_pooling_is_the_one_rule_of_encode(tmp_path):
    """Given, else what the directory declares (1_Pooling, m3e's uniem strategy), else [CLS]: `declared_settings`,
    the rule `bertkit encode` and `bertkit serve` share."""
    from bertkit.inference.encode import declared_settings

    assert declared_settings(tmp_path).pooling == "cls"
    (tmp_path / "config.json").write_text('{"uniem_embedding_strategy": "last_mean"}')
    assert declared_settings(tmp_path).pooling == "mean"
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text('{"pooling_mode_cls_token": true}')
    assert declared_settings(tmp_path).pooling == "cls" and declared_settings(tmp_path, "mean").pooling == "mean"
    (tmp_path / "1_Pooling" / "config.json").write_text('{"pooling_mode_max_tokens": true}')
    assert declared_settings(tmp_path).pooling == "cls"  # a pooling bertkit does not compute: [CLS], said elsewhere


def test_dtype_auto_serves_the_fastest_format_within_cosine_0999_and_says_why(encoder_dir):
    """serve's default: bf16 where native, else int8 if its vectors pass choose_dtype's probe, else fp32; /info and
    the ready line name the choice and why."""
    from bertkit.inference.machine import native_bfloat16

    with ServerProcess(encoder_dir, "--dtype", "auto") as server:
        status, info = server.get("/info")
    assert status == 200 and info["model_dtype"] in ("bfloat16", "int8", "float32")
    assert (info["model_dtype"] == "bfloat16") == native_bfloat16()
    reason = info["model_dtype_reason"]
    assert ("natively" in reason) if native_bfloat16() else ("cosine" in reason)
    assert any(reason in line for line in server.output if "ready" in line)
