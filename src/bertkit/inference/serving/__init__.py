"""`bertkit serve`: an HTTP server for sentence vectors, similarities, predictions, NER, reranking (a cross-encoder) and
a reader's answers, with text-embeddings-inference's routes and error shapes, on Starlette and uvicorn (the `serve`
extra).

    app = create_app(lambda: ServedModel.load("m3e-small"), ServerSettings(max_batch_tokens=2048))
    uvicorn.run(app, port=3000)

- model.py      the served model: loaded through the registry, one task, one forward per batch through the same
                functions as `encode` and `predict` (so the server's vectors and labels are theirs)
- batcher.py    dynamic batching: one queue, one worker thread, a token budget per forward
- payloads.py   request bodies read and checked; errors with TEI's status codes and types
- routes.py     the routes: a function each, and one table of them (ENDPOINTS: path, method, the tasks it serves)
- server.py     what the routes share: the settings, the API key, the model loaded in a thread (503 meanwhile),
                the requests in flight, inference through the queue, long texts in windows
- app.py        the Starlette app built from the table: the key, errors as JSON, metrics, CORS, the lifespan
- metrics.py    Prometheus metrics
"""

from bertkit.inference.serving.app import create_app
from bertkit.inference.serving.model import ServedModel
from bertkit.inference.serving.payloads import ServeError
from bertkit.inference.serving.server import ServerSettings

__all__ = ["ServeError", "ServedModel", "ServerSettings", "create_app"]
