"""The HTML attention viewer: one self-contained file, and in headless Chromium it loads without errors,
hovering a token draws that token's attention lines, switching layer/head changes what is drawn."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import time
import urllib.parse
import urllib.request

import numpy as np
import pytest
import torch

from bertkit.models.bert.configuration import BertConfig
from bertkit.models.bert.modeling import BertModel
from bertkit.pictures.attention_view import (
    AttentionMap,
    SentenceAttention,
    attention_html,
    sentence_attentions,
    write_attention_html,
)
from bertkit.tokenizer import BertTokenizer
from test_figures import assert_real_picture

pytestmark = pytest.mark.xdist_group("attention-viewer")  # module fixtures (a browser, the topics' runs) once

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "北", "京", "是", "首", "都", "天", "气", "好", "the", "cat",
         "sat", "on", "mat", "。", "，"]


@pytest.fixture(scope="module")
def tiny():
    """A 3-layer, 4-head random BERT (peaked attention) and a WordPiece tokenizer over VOCAB."""
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64, initializer_range=0.3)
    return BertModel(config).eval(), BertTokenizer({t: i for i, t in enumerate(VOCAB)})


@pytest.fixture(scope="module")
def sentence(tiny) -> SentenceAttention:
    model, tokenizer = tiny
    return sentence_attentions(model, tokenizer, "北京是首都，天气好。", text_pair="the cat sat on the mat")


def page_data(page: str) -> dict:
    match = re.search(r'<script id="bertkit-data" type="application/json">(.*?)</script>', page, re.S)
    assert match, "the page has no inline data"
    return json.loads(match.group(1))


# ---- the file ------------------------------------------------------------------------------------

def test_sentence_attentions_of_a_pair(sentence, tiny):
    assert sentence.tokens == ["[CLS]", "北", "京", "是", "首", "都", "，", "天", "气", "好", "。", "[SEP]",
                               "the", "cat", "sat", "on", "the", "mat", "[SEP]"]
    assert sentence.token_type_ids == [0] * 12 + [1] * 7
    L, H, T, _ = sentence.attentions.shape
    assert (L, H, T, sentence.num_layers, sentence.num_heads) == (3, 4, 19, 3, 4)
    assert np.allclose(sentence.attentions.sum(-1), 1.0, atol=1e-5)
    model, tokenizer = tiny
    enc = tokenizer("北京是首都，天气好。", text_pair="the cat sat on the mat", return_tensors="pt")
    with torch.no_grad():
        expected = model(enc["input_ids"], token_type_ids=enc["token_type_ids"], output_attentions=True).attentions
    assert np.allclose(sentence.attentions[2], expected[2][0].numpy(), atol=1e-6)


def test_page_is_self_contained_and_carries_the_data(sentence):
    page = attention_html(sentence, title="tiny <model> & co")
    data = page_data(page)
    [kind] = data["kinds"]
    assert kind["name"] == "self" and kind["query_tokens"] == kind["key_tokens"] == sentence.tokens
    assert kind["query_types"] == kind["key_types"] == sentence.token_type_ids
    assert np.allclose(kind["attentions"], sentence.attentions, atol=1e-4)
    assert data["text"] == "北京是首都，天气好。" and data["text_pair"] == "the cat sat on the mat"
    assert "<title>tiny &lt;model&gt; &amp; co</title>" in page
    # nothing is fetched: no external scripts, styles, images or fonts, and the policy forbids it anyway
    assert not re.search(r"<(script|img|link|iframe)[^>]+(src|href)=", page)
    assert "@import" not in page and "url(" not in page
    assert "default-src 'none'" in page


def test_tokens_cannot_break_out_of_the_script(sentence):
    hostile = SentenceAttention(tokens=["</script><script>alert(1)</script>", "&amp;", "\u2028"],
                                token_type_ids=[0, 0, 0], attentions=np.full((1, 1, 3, 3), 1 / 3), text="x")
    page = attention_html(hostile)
    assert page.count("</script>") == 2                         # the data block's and the code's own
    assert page_data(page)["kinds"][0]["query_tokens"] == hostile.tokens


def test_bad_shapes_are_refused(sentence):
    bad = SentenceAttention(tokens=["a", "b"], token_type_ids=[0, 0], attentions=np.ones((1, 1, 3, 3)), text="ab")
    with pytest.raises(ValueError, match="T = 2 query and S = 2 key tokens, got shape \\(1, 1, 3, 3\\)"):
        attention_html(bad)
    with pytest.raises(ValueError, match="text is empty"):
        sentence_attentions(None, None, "  ")


# ---- in a browser --------------------------------------------------------------------------------

def find_chromium() -> str | None:
    return os.environ.get("BERTKIT_CHROMIUM") or next(
        (path for name in ("chromium", "chromium-browser", "google-chrome", "chrome")
         if (path := shutil.which(name))), None)


class DevTools:
    """Just enough of the Chrome DevTools protocol over a websocket (RFC 6455, stdlib only) to drive one page."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        parts = urllib.parse.urlparse(url)
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {parts.path} HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\n"
                           "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        self.buffer = b""
        while b"\r\n\r\n" not in self.buffer:
            self.buffer += self._read()
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        assert b" 101 " in head.split(b"\r\n")[0], head
        self.last_id, self.events = 0, []

    def _read(self) -> bytes:
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("DevTools closed the connection")
        return chunk

    def _exactly(self, n: int) -> bytes:
        while len(self.buffer) < n:
            self.buffer += self._read()
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def _message(self) -> dict:
        parts = []
        while True:
            first, second = self._exactly(2)
            size = second & 0x7F
            if size == 126:
                size = struct.unpack(">H", self._exactly(2))[0]
            elif size == 127:
                size = struct.unpack(">Q", self._exactly(8))[0]
            payload, opcode = self._exactly(size), first & 0x0F
            if opcode == 8:
                raise ConnectionError("DevTools closed the websocket")
            if opcode in (0, 1, 2):
                parts.append(payload)
                if first & 0x80:
                    return json.loads(b"".join(parts))

    def call(self, method: str, **params) -> dict:
        self.last_id += 1
        data = json.dumps({"id": self.last_id, "method": method, "params": params}).encode()
        mask = os.urandom(4)
        size = len(data)
        header = bytes([0x81]) + (bytes([0x80 | size]) if size < 126 else
                                  bytes([0x80 | 126]) + struct.pack(">H", size) if size < 65536 else
                                  bytes([0x80 | 127]) + struct.pack(">Q", size))
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))
        while True:
            message = self._message()
            if message.get("id") == self.last_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def wait_for(self, method: str, timeout: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.events:
                if event.get("method") == method:
                    self.events.remove(event)
                    return event
            self.events.append(self._message())
        raise TimeoutError(f"no {method} within {timeout} s")

    def js(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def errors(self) -> list[str]:
        """Uncaught exceptions, console.error calls and error log entries seen so far."""
        self.call("Runtime.evaluate", expression="0")                # flush pending events into self.events
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(params["exceptionDetails"].get("exception", {}).get("description", "exception"))
            elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
                found.append(" ".join(str(a.get("value", a.get("description"))) for a in params.get("args", [])))
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                found.append(params["entry"]["text"])
        return found


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """A headless Chromium with one page under DevTools control; skips where there is no Chromium (not in CI)."""
    binary = find_chromium()
    if binary is None:
        reason = "no chromium binary found (apt-get install chromium, or set BERTKIT_CHROMIUM)"
        if os.environ.get("CI"):
            pytest.fail(f"{reason} [CI is set, so the browser test must run]", pytrace=False)
        pytest.skip(reason)
    profile = tmp_path_factory.mktemp("chromium-profile")
    process = subprocess.Popen(
        [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", f"--user-data-dir={profile}", "--remote-debugging-port=0",
         "--window-size=1400,900", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file, deadline = profile / "DevToolsActivePort", time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            if time.monotonic() > deadline or process.poll() is not None:
                pytest.fail(f"chromium did not start (exit code {process.poll()})")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as response:
            page = next(t for t in json.load(response) if t["type"] == "page")
        tools = DevTools(page["webSocketDebuggerUrl"])
        for domain in ("Page", "Runtime", "Log"):
            tools.call(f"{domain}.enable")
        tools.call("Emulation.setDeviceMetricsOverride", width=1400, height=900, deviceScaleFactor=1, mobile=False)
        yield tools
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def open_page(browser: DevTools, url: str) -> None:
    browser.events.clear()
    browser.call("Page.navigate", url=url)
    browser.wait_for("Page.loadEventFired")


def state(browser: DevTools) -> dict:
    return browser.js("({...document.body.dataset})")


def drawn_lines(browser: DevTools) -> list[tuple[int, int, float]]:
    return [tuple(x) for x in browser.js(
        "[...document.querySelectorAll('#lines line')].map(l => [+l.dataset.from, +l.dataset.to, +l.dataset.weight])")]


def hover(browser: DevTools, selector: str) -> None:
    box = browser.js(f"(() => {{ const r = document.querySelector('{selector}').getBoundingClientRect();"
                     " return [r.x + r.width / 2, r.y + r.height / 2]; })()")
    browser.call("Input.dispatchMouseEvent", type="mouseMoved", x=box[0], y=box[1])


def press(browser: DevTools, key: str) -> None:
    for kind in ("rawKeyDown", "keyUp"):
        browser.call("Input.dispatchKeyEvent", type=kind, key=key, code=key, windowsVirtualKeyCode=
                     {"ArrowDown": 40, "ArrowUp": 38, "ArrowRight": 39, "ArrowLeft": 37, "Escape": 27, "K": 75}[key])


@pytest.mark.browser
def test_viewer_in_headless_chromium(browser, sentence, tmp_path):
    page = write_attention_html(tmp_path / "attention.html", sentence)
    open_page(browser, page.as_uri())
    assert browser.errors() == []
    assert state(browser)["layer"] == "0" and state(browser)["head"] == "0" and state(browser)["errors"] == ""
    assert browser.js("getComputedStyle(document.getElementById('kind-control')).display") == "none"  # one kind
    T = len(sentence.tokens)
    shown = np.round(sentence.attentions.astype(np.float64), 4)          # the page's data: 4 decimals
    labels = browser.js("[...document.querySelectorAll('#left .token text')].map(t => t.textContent)")
    assert labels == sentence.tokens
    assert browser.js("document.querySelectorAll('#matrix rect.cell').length") == T * T

    # no token chosen: every weight above the drawing threshold is a line
    everything = drawn_lines(browser)
    assert len(everything) == int((shown[0, 0] >= 0.005).sum())

    # hover token 3 on the left: only its row is drawn, with the model's weights
    hover(browser, '#left .token[data-index="3"] text')
    assert state(browser)["token"] == "3"
    lines = drawn_lines(browser)
    row = shown[0, 0, 3]
    assert {j for i, j, _ in lines} == {j for j in range(T) if row[j] >= 0.005} and {i for i, _, _ in lines} == {3}
    assert all(abs(w - row[j]) < 1e-3 for _, j, w in lines)
    assert "attends to" in browser.js("document.getElementById('status').textContent")

    # hover a key on the right: the lines are that column
    hover(browser, '#right .token[data-index="0"] text')
    column = shown[0, 0, :, 0]
    assert {i for i, j, _ in drawn_lines(browser)} == {i for i in range(T) if column[i] >= 0.005}

    # leave: everything again
    browser.call("Input.dispatchMouseEvent", type="mouseMoved", x=1390, y=890)
    assert state(browser)["token"] == "" and len(drawn_lines(browser)) == len(everything)

    # change layer with the picker (keyboard on the focused <select>) and head with the page's arrow keys
    before = state(browser)["signature"]
    browser.js("document.getElementById('layer-select').focus()")
    press(browser, "ArrowDown")
    assert state(browser)["layer"] == "1" and state(browser)["signature"] != before
    browser.js("document.activeElement.blur()")
    press(browser, "ArrowRight")
    now = state(browser)
    assert now["head"] == "1" and now["signature"] != before
    expected = shown[1, 1]
    assert len(drawn_lines(browser)) == int((expected >= 0.005).sum())
    cell = browser.js(f"document.querySelectorAll('#matrix rect.cell')[2 * {T} + 5].style.fill")
    colour = re.fullmatch(r"rgba\(31, 119, 180, ([\d.]+)\)", cell)                 # alpha = weight (to 1/255)
    assert colour and abs(float(colour.group(1)) - expected[2, 5]) < 0.005, cell
    assert browser.js("location.hash") == "#layer=1&head=1"

    # the mean over heads, then a URL that opens a chosen view directly
    browser.js("const s = document.getElementById('head-select'); s.value = 'mean';"
               "s.dispatchEvent(new Event('change'))")
    assert state(browser)["head"] == "mean"
    open_page(browser, "about:blank")
    open_page(browser, page.as_uri() + "#layer=2&head=3&token=5")
    assert (state(browser)["layer"], state(browser)["head"], state(browser)["token"]) == ("2", "3", "5")
    assert {i for i, _, _ in drawn_lines(browser)} == {5}
    browser.js("location.hash = '#layer=0&head=2'")                 # and follows the hash when it changes
    deadline = time.monotonic() + 10
    while state(browser)["head"] != "2" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (state(browser)["layer"], state(browser)["head"], state(browser)["token"]) == ("0", "2", "")

    shot = browser.call("Page.captureScreenshot", format="png")
    png = tmp_path / "viewer.png"
    png.write_bytes(base64.b64decode(shot["data"]))
    pixels = assert_real_picture(png, min_side=600)
    assert pixels.shape[:2] == (900, 1400)
    assert browser.errors() == []


@pytest.mark.browser
def test_viewer_picks_the_kind_of_attention_and_draws_cross_attention(browser, tmp_path):
    from bertkit.pictures.translation_attention import TranslationAttention

    rng = np.random.default_rng(0)

    def weights(L, T, S):
        w = rng.random((L, 2, T, S)) ** 4
        return w / w.sum(-1, keepdims=True)

    source, target = ["北", "京", "好", "[SEP]"], ["[CLS]", "Beijing", "is", "good", "."]
    seen = TranslationAttention("北京好", "Beijing is good.", False, [
        AttentionMap("encoder", source, source, weights(2, 4, 4)),
        AttentionMap("decoder", target, target, weights(3, 5, 5)),
        AttentionMap("cross", target, source, weights(3, 5, 4))])
    page = write_attention_html(tmp_path / "translation.html", seen)
    open_page(browser, page.as_uri())
    assert browser.errors() == [] and state(browser)["kind"] == "encoder"
    assert browser.js("getComputedStyle(document.getElementById('kind-control')).display") != "none"
    assert browser.js("[...document.getElementById('kind-select').options].map(o => o.text)") == [
        "encoder self-attention (source × source)", "decoder masked self-attention (target × target)",
        "cross-attention (target × source)"]
    assert browser.js("document.querySelectorAll('#matrix rect.cell').length") == 16

    browser.js("const k = document.getElementById('kind-select'); k.value = '2'; k.dispatchEvent(new Event('change'))")
    assert state(browser)["kind"] == "cross" and browser.js("location.hash") == "#kind=cross&layer=0&head=0"
    assert browser.js("document.querySelectorAll('#matrix rect.cell').length") == 5 * 4
    assert browser.js("document.getElementById('layer-select').options.length") == 3
    assert browser.js("[...document.querySelectorAll('#left .token text')].map(t => t.textContent)") == target
    assert browser.js("[...document.querySelectorAll('#right .token text')].map(t => t.textContent)") == source
    shown = np.round(seen.map("cross").attentions, 4)
    hover(browser, '#left .token[data-index="4"] text')                      # "." looks at the source
    lines = drawn_lines(browser)
    assert {i for i, _, _ in lines} == {4} and {j for _, j, _ in lines} == {j for j in range(4)
                                                                            if shown[0, 0, 4, j] >= 0.005}
    assert all(abs(w - shown[0, 0, 4, j]) < 1e-3 for _, j, w in lines)
    hover(browser, '#right .token[data-index="1"] text')                     # who looks at 京
    assert {i for i, _, _ in drawn_lines(browser)} == {i for i in range(5) if shown[0, 0, i, 1] >= 0.005}
    browser.call("Input.dispatchMouseEvent", type="mouseMoved", x=1390, y=890)

    # a layer only the decoder has, then K: the encoder's two layers keep the last one
    open_page(browser, "about:blank")
    open_page(browser, page.as_uri() + "#kind=decoder&layer=2&head=1&token=4")
    assert (state(browser)["kind"], state(browser)["layer"], state(browser)["head"], state(browser)["token"]) == (
        "decoder", "2", "1", "4")
    assert {j for _, j, _ in drawn_lines(browser)} <= set(range(5))
    assert browser.js("document.querySelectorAll('#matrix rect.cell').length") == 25
    press(browser, "K")
    assert (state(browser)["kind"], state(browser)["layer"], state(browser)["token"]) == ("cross", "2", "4")
    press(browser, "K")
    assert (state(browser)["kind"], state(browser)["layer"]) == ("encoder", "1")
    assert state(browser)["token"] == ""                                      # token 4 is past the source's 4 tokens
    assert browser.errors() == []


@pytest.mark.browser
def test_the_error_check_sees_a_broken_page(browser, tmp_path):
    # the control for `browser.errors() == []` above: a page that throws is caught
    page = tmp_path / "broken.html"
    page.write_text("<!doctype html><title>x</title><script>undefinedFunction()</script>", encoding="utf-8")
    open_page(browser, page.as_uri())
    assert any("undefinedFunction" in e for e in browser.errors())


@pytest.mark.network
@pytest.mark.slow
def test_cli_attention_on_m3e_small(tmp_path, capsys):
    from bertkit.cli import main
    from conftest import model_dir_or_skip

    model = model_dir_or_skip("m3e-small")
    out, picture = tmp_path / "attn.html", tmp_path / "layer.png"
    assert main(["attention", "--model", str(model), "北京是中国的首都。", "--pair", "天气很好。",
                 "--out", str(out), "--picture", str(picture), "--layer", "2"]) == 0
    printed = capsys.readouterr().out
    assert "[CLS] 北 京 是 中 国 的 首 都 。 [SEP] 天 气 很 好 。 [SEP]" in printed
    data = page_data(out.read_text(encoding="utf-8"))
    assert data["kinds"][0]["query_types"] == [0] * 11 + [1] * 6
    assert np.array(data["kinds"][0]["attentions"]).shape == (4, 8, 17, 17)
    assert_real_picture(picture, min_side=300)
    assert main(["attention", "--model", str(model), "北京", "--out", str(out), "--picture", str(picture),
                 "--layer", "9", "--overwrite"]) == 2
    assert "--layer 9: the model has 4 layers" in capsys.readouterr().err
    assert data == page_data(out.read_text(encoding="utf-8"))              # refused before writing anything
