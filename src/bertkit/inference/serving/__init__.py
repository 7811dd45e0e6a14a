"""`bertkit serve`: an HTTP server for sentence vectors, similarities, predictions, NER, reranking (a cross-encoder) and
a reader's answers, with text-embeddings-inference's routes and error shapes, on Starlette and uvicorn (the `serve`
extra).

    app = create_app(lambda: ServedModel.load("m3e-small"), ServerSettings(max_batch_tokens=2048))
    uvicorn.run(app, port=3000)

- model.py      the served model: loaded through the registry, one task, one forward per batch through the same
                functions as `encode` and `predict` (so the server's vectors and labels are theirs)
- batcher.py    dynamic batching: one queue, one worker thread, a token budget per forward
- payloads.py   request bodies read and checked; errors with TEI's status codes and types
- app.py        the routes, the API key and CORS, long texts in windows, the model loaded in a thread (503
                meanwhile), the lifespan
- metrics.py    Prometheus metrics
"""

from bertkit.inference.serving.app import ServerSettings, create_app
from bertkit.inference.serving.model import ServedModel
from bertkit.inference.serving.payloads import ServeError

__all__ = ["ServeError", "ServedModel", "ServerSettings", "create_app"]
