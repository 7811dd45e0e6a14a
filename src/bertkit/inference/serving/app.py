"""The Starlette app of `bertkit serve`: every row of routes.ENDPOINTS as a route, behind the API key where the row
says, with its errors as JSON and every answer counted in the metrics; CORS; the model loaded in a thread once the
server listens (server.py), and the queue drained when it stops."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bertkit.inference.serving.model import ServedModel
from bertkit.inference.serving.payloads import ServeError
from bertkit.inference.serving.routes import ENDPOINTS, Endpoint
from bertkit.inference.serving.server import (
    WINDOWS_HEADER,
    Server,
    ServerSettings,
    error_response,
    json_response,
)

logger = logging.getLogger(__name__)


def answering(server: Server, endpoint: Endpoint) -> Callable:
    """`endpoint`'s function as a Starlette endpoint: the API key checked (where the row says), the model it needs
    (503 while it loads, 424 for a model of another task), errors as JSON (OpenAI's shape on /v1/), the answer
    counted in the metrics."""
    openai = endpoint.path.startswith("/v1/")

    async def run(request: Request) -> Response:
        start = time.perf_counter()
        try:
            if endpoint.keyed:
                server.authorize(request)
            served = None
            if endpoint.tasks is not None:
                served = server.serving(endpoint.path, endpoint.tasks, endpoint.needs)
            elif endpoint.model:
                served = server.ready()
            response = await endpoint.handler(server, served, request)
        except ServeError as err:
            response = error_response(err, openai)
        except Exception as err:  # noqa: BLE001 - a fault of the server, never of the input: logged, 500
            logger.exception("%s failed", endpoint.path)
            response = error_response(ServeError(500, "backend", f"internal error: {err}"), openai)
        if endpoint.counted:
            server.metrics.observe_request(endpoint.path, response.status_code, time.perf_counter() - start)
        return response

    return run


def create_app(load: Callable[[], ServedModel], settings: ServerSettings | None = None,
               on_ready: Callable[[ServedModel], None] | None = None,
               on_load_error: Callable[[BaseException], None] | None = None) -> Starlette:
    """The ASGI app: `load()` makes the model, in a thread once the server has started; until then the routes
    answer 503. `on_ready(model)` hears when it is served, `on_load_error(err)` of a model that could not be
    loaded (else it is logged)."""
    server = Server(load, settings or ServerSettings(), on_ready, on_load_error)
    routes = [Route(endpoint.path, answering(server, endpoint), methods=[endpoint.method]) for endpoint in ENDPOINTS]

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
    origins = server.settings.cors_allow_origins
    middleware = [Middleware(CORSMiddleware, allow_origins=list(origins), allow_methods=["GET", "POST"],
                             allow_headers=["Content-Type", "Authorization"], expose_headers=[WINDOWS_HEADER])
                  ] if origins else []
    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error}, lifespan=lifespan,
                    middleware=middleware)
    # "/embed/" is no route: no redirect to "/embed" at the address the request's Host header names (sent before
    # any key is asked for), a 404 that lists the routes
    app.router.redirect_slashes = False
    app.state.server = server
    return app
