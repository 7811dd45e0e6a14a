"""`bertkit serve`: a model over HTTP, with text-embeddings-inference's routes (bertkit.inference.serving)."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import warnings
from pathlib import Path

from bertkit.cli.common import (
    MODEL_HELP,
    add_command,
    add_device_option,
    add_long_input_options,
    check_long_input_options,
    command_device,
    integer,
)
from bertkit.errors import InputError
from bertkit.models.sentence_files import MEAN, POOLINGS
from bertkit.utils.constants import GPU_BATCH_TOKENS
from bertkit.utils.dtypes import DTYPE_CHOICES

# bertkit.inference.serving.ServerSettings' defaults (tests hold them equal), written out so that `bertkit --help`
# imports neither torch nor the web server
DEFAULTS = argparse.Namespace(max_batch_tokens=2048, max_client_batch_size=32, max_concurrent_requests=512,
                              payload_limit=2_000_000, long_inputs="refuse", chunk_pooling=MEAN,
                              max_request_windows=16)
API_KEY_ENV = "BERTKIT_API_KEY"


def max_batch_tokens(given: int | None, device) -> int:
    """--max-batch-tokens as given, else the torch device's: DEFAULTS' (the server's own) on the CPU,
    GPU_BATCH_TOKENS on a GPU, whose forward over a small batch costs little more than launching its kernels."""
    if given is not None:
        return given
    return GPU_BATCH_TOKENS if device.type == "cuda" else DEFAULTS.max_batch_tokens


def _add_serve(sub: argparse._SubParsersAction) -> None:
    defaults = DEFAULTS
    p = add_command(sub, "serve", _cmd_serve, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", metavar="DIR|NAME", help=MODEL_HELP)
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on; 0.0.0.0 for every interface "
                                                       "(default: 127.0.0.1, this machine only)")
    p.add_argument("--port", type=integer(0, 65535), default=3000, help="the port; 0 picks a free one and prints "
                                                                       "it (default: 3000)")
    p.add_argument("--dtype", default="auto", choices=["auto", *DTYPE_CHOICES],
                   help="number format: bf16 where the CPU or GPU computes it natively (else fp32, with a warning), "
                        "int8 Linear layers (a scale per token; CPU only), fp32; auto: the fastest whose sentence "
                        "vectors stay within cosine 0.999 of fp32's on this machine (bf16 on a GPU that has it), "
                        "which /info and the ready line name (default: auto)")
    add_device_option(p)
    p.add_argument("--pooling", choices=POOLINGS,
                   help="sentence vectors: the [CLS] token's or the mean of the tokens' (default: what the model "
                        "directory declares, as sentence-transformers' 1_Pooling; else cls)")
    p.add_argument("--max-batch-tokens", type=integer(1),
                   help="padded tokens per forward (inputs x the longest): the batch's size limit; at least the "
                        f"model's positions (default: {defaults.max_batch_tokens:,} on the CPU, {GPU_BATCH_TOKENS:,} "
                        "on a GPU, where a small batch leaves it waiting for the host)")
    p.add_argument("--max-client-batch-size", type=integer(1), default=defaults.max_client_batch_size,
                   help=f"inputs per request; more get 422 (default: {defaults.max_client_batch_size})")
    p.add_argument("--max-concurrent-requests", type=integer(1), default=defaults.max_concurrent_requests,
                   help="requests accepted and not yet answered; more get 429 "
                        f"(default: {defaults.max_concurrent_requests})")
    p.add_argument("--payload-limit", type=integer(1), default=defaults.payload_limit,
                   help=f"bytes per request body; more get 413 (default: {defaults.payload_limit:,})")
    p.add_argument("--max-request-windows", type=integer(1), default=defaults.max_request_windows,
                   help="with --long-inputs chunk: windows one request may cost; more get 413 before any is run, so "
                        f"that one request cannot hold every other client up (default: {defaults.max_request_windows})")
    p.add_argument("--threads", type=integer(1), help="torch threads for the model (default: one fewer than the "
                                                      "cores, at least 1: the event loop that reads requests keeps "
                                                      "a core)")
    p.add_argument("--api-key", metavar="KEY",
                   help="every route but /health needs the header 'Authorization: Bearer KEY' (401 without it); "
                        f"--api-key-file or ${API_KEY_ENV} keep it out of the process list (default: "
                        f"${API_KEY_ENV} if set, else none: no key needed)")
    p.add_argument("--api-key-file", metavar="PATH",
                   help="read the API key from this file (its first line) (default: none)")
    p.add_argument("--cors-allow-origin", action="append", metavar="ORIGIN",
                   help="an origin browsers may call the server from, e.g. https://example.com; repeat for more, "
                        "'*' for any (default: none, no CORS headers)")
    p.add_argument("--default-prompt", metavar="TEXT",
                   help="an embedding model: a prefix put before every text a request names no prompt_name for, "
                        "e.g. 'query: ' (default: none)")
    p.add_argument("--prompts", action="extend", nargs="+", metavar="NAME=PREFIX",
                   help="an embedding model: prefixes a request names by prompt_name, one or more after the flag, "
                        "or the flag repeated (default: the prompts of the model's config_sentence_transformers.json, "
                        "if any)")
    add_long_input_options(p, defaults.long_inputs, 'a 422 naming the limit, unless the request sends "truncate": '
                                                    "true", where=" (on /embed, /similarity and /v1/embeddings)")


def _cmd_serve(args: argparse.Namespace) -> int:
    """an HTTP server for sentence vectors, predictions, NER, reranking and answers, with dynamic batching (TEI routes)

    Serve a model over HTTP with text-embeddings-inference's routes, so its clients carry over:
      POST /embed           {"inputs": "text" | ["text", ...], "normalize": true, "truncate": false}
      POST /embed_all       every token's vector
      POST /similarity      cosine similarities to a source sentence
      POST /predict         a classifier's labels and scores, a tagger's entity spans, a reader's answers
      POST /rerank          texts ranked against a query by a classifier fine-tuned on pairs
      POST /tokenize        tokens with their character offsets
      POST /decode          token ids back to text
      POST /v1/embeddings   OpenAI's embeddings API
      GET  /health, /info, /metrics (Prometheus)
    Requests queue and run in batches of up to --max-batch-tokens. SIGTERM or Ctrl+C stops accepting, answers
    every request already accepted, and exits. docs/serving.md has every route and option.
    """
    # torch's OpenMP threads spin between parallel regions by default, taking the CPU from the event loop that shares
    # the cores with them; set before torch loads, as OpenMP reads it then (a value already set is kept)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import uvicorn

        from bertkit.inference.serving import ServedModel, ServerSettings, create_app
    except ImportError as err:
        raise InputError(f"serving needs the serve extra ({err.name} is not installed): "
                        "pip install 'bertkit[serve]'") from None
    import torch

    from bertkit.inference.batching import TruncationWarning
    from bertkit.inference.encode import declared_settings
    from bertkit.inference.loading import model_family
    from bertkit.inference.long_inputs import check_overlap
    from bertkit.inference.serving.model import default_threads
    from bertkit.utils.devices import device_name

    device = command_device(args, args.dtype)
    args.max_batch_tokens = max_batch_tokens(args.max_batch_tokens, device)
    path, family = model_family(args.model, "serve")  # a family the server cannot serve: refused in one line
    positions = getattr(family.load_config(path), "max_position_embeddings", 0)
    if args.max_batch_tokens < positions:
        raise InputError(f"--max-batch-tokens {args.max_batch_tokens} is less than the model's {positions} positions:"
                        f" its longest input would fit no batch; give --max-batch-tokens {positions} or more")
    if check_long_input_options(args) and args.chunk_stride is not None and positions:
        check_overlap(args.chunk_stride, positions, "--chunk-stride")
    prompts = _prompts(args.prompts)
    api_key = _api_key(args)
    settings = ServerSettings(args.max_batch_tokens, args.max_client_batch_size, args.max_concurrent_requests,
                              args.payload_limit, api_key=api_key,
                              cors_allow_origins=tuple(args.cors_allow_origin or ()), long_inputs=args.long_inputs,
                              chunk_stride=args.chunk_stride, chunk_pooling=args.chunk_pooling,
                              max_request_windows=args.max_request_windows)
    listener = _listen(args.host, args.port)
    # a request that sends "truncate": true asks for its long texts to be cut: no warning line per request
    warnings.filterwarnings("ignore", category=TruncationWarning)
    torch.set_num_threads(args.threads or default_threads())  # after every refusal: a refused command changes nothing
    host, port = listener.getsockname()[:2]
    address = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    pooling = declared_settings(path, args.pooling).pooling  # given, else the directory's, else [CLS]
    failures: list[BaseException] = []

    def ready(served: ServedModel) -> None:
        kind = "classifier of text pairs (/rerank)" if served.pairs else served.task
        chosen = f" ({served.dtype_reason})" if served.dtype_reason else ""
        # a task's model: what its record says of it (labels, a reader's windows); sentence vectors: their pooling
        details = served.kind.serve_summary(served) if served.kind else f", {served.pooling} pooling"
        what = f"{kind} model, {served.dtype}{chosen}{details}"
        if device.type == "cpu":
            what += f", {torch.get_num_threads()} torch thread{'s' if torch.get_num_threads() > 1 else ''}"
        else:
            what += f", on {device_name(device)}"
        print(f"bertkit serve: ready: {args.model} ({what}) at {address}", flush=True)

    def failed(err: BaseException) -> None:
        failures.append(err)
        server.should_exit = True

    app = create_app(lambda: ServedModel.load(path, args.dtype, pooling, name=args.model, prompts=prompts,
                                              default_prompt=args.default_prompt, device=device),
                     settings, ready, failed)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
    # uvicorn answers SIGTERM by finishing the requests it accepted, then raises the signal again for the handler
    # that was there before it: this one, so the server exits 0 (and a SIGTERM before uvicorn listens stops it too)
    previous = signal.signal(signal.SIGTERM, lambda *_: setattr(server, "should_exit", True))
    guarded = "; requests need the API key" if api_key else ""
    print(f"bertkit serve: loading {args.model} ({family.name}, {args.dtype}); listening at {address}{guarded}",
          flush=True)
    try:
        server.run(sockets=[listener])
    finally:
        signal.signal(signal.SIGTERM, previous)
    if failures:  # the model did not load: the command line sorts it (said in one line, or kept as a bug)
        raise failures[0]
    print("bertkit serve: stopped", file=sys.stderr, flush=True)
    return 0


def _api_key(args: argparse.Namespace) -> str | None:
    """The API key: --api-key, or the first line of --api-key-file, or $BERTKIT_API_KEY; None for no key. Never
    printed: the errors here name where the key came from, not the key."""
    if args.api_key is not None and args.api_key_file is not None:
        raise InputError("give the API key once: --api-key or --api-key-file, not both")
    if args.api_key_file is not None:
        try:
            lines = Path(args.api_key_file).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as err:
            reason = err.strerror if isinstance(err, OSError) else "it is not UTF-8 text"
            raise InputError(f"--api-key-file {args.api_key_file}: cannot read it ({reason})") from None
        key = lines[0].strip() if lines else ""
        if not key:
            raise InputError(f"--api-key-file {args.api_key_file} holds no key on its first line")
        source = f"--api-key-file {args.api_key_file}"
    elif args.api_key is not None:
        key, source = args.api_key, "--api-key"
    else:
        key, source = os.environ.get(API_KEY_ENV), f"${API_KEY_ENV}"
        if key is not None and not key.strip():  # set, but to nothing: a key meant, and lost on the way
            raise InputError(f"${API_KEY_ENV} is set but empty: the server would answer without a key; give it the "
                            f"key, or unset it (unset {API_KEY_ENV}) to serve without one")
    if key is not None and not all(33 <= ord(char) <= 126 for char in key):
        raise InputError(f"the API key of {source} must be printable ASCII without spaces (it goes in an HTTP header)")
    return key


def _prompts(items: list[str] | None) -> dict[str, str]:
    """--prompts NAME=PREFIX ... as {name: prefix}; the prefix is everything after the first "="."""
    prompts = {}
    for item in items or []:
        name, sep, prefix = item.partition("=")
        if not sep or not name.strip():
            swallowed = item is items[-1] and not sep  # `serve --prompts q=a MODEL`: the model read as an item
            raise InputError(f"--prompts takes NAME=PREFIX items (e.g. query='query: '), got {item!r}"
                            + ("; a model named after --prompts is read as one of its items: name the model first"
                               if swallowed else ""))
        prompts[name.strip()] = prefix
    return prompts


def _listen(host: str, port: int) -> socket.socket:
    """A socket bound to (host, port), before the model loads: an address in use is refused at once."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as err:
        raise InputError(f"--host {host}: cannot resolve it ({err.strerror})") from None
    listener = socket.socket(family, kind, proto)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(address)
    except OSError as err:
        listener.close()
        raise InputError(f"cannot listen on {host}:{port}: {err.strerror[0].lower()}{err.strerror[1:]}") from None
    return listener
