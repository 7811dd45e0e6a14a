"""The server's Prometheus metrics (GET /metrics): requests by route and status, request latency, batch sizes, the
queue. Each server has its own registry, so two servers in one process never share counts.

    bertkit_requests_total{route="/embed",status="200"}     answered requests
    bertkit_request_duration_seconds{route="/embed"}        latency histogram, from the request to its answer
    bertkit_batch_size / bertkit_batch_tokens               inputs and padded tokens per forward
    bertkit_batch_duration_seconds                          time per forward
    bertkit_queue_depth, bertkit_requests_in_flight          inputs waiting; requests accepted and not yet answered
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
TOKEN_BUCKETS = (16, 64, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)


class ServerMetrics:
    """The metrics of one server, on a registry of its own."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("bertkit_requests", "Requests answered, by route and HTTP status",
                                ["route", "status"], registry=self.registry)
        self.latency = Histogram("bertkit_request_duration_seconds", "Time from a request to its answer",
                                 ["route"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.batch_size = Histogram("bertkit_batch_size", "Inputs per forward", buckets=SIZE_BUCKETS,
                                    registry=self.registry)
        self.batch_tokens = Histogram("bertkit_batch_tokens", "Padded tokens per forward (rows x longest row)",
                                      buckets=TOKEN_BUCKETS, registry=self.registry)
        self.batch_duration = Histogram("bertkit_batch_duration_seconds", "Time per forward",
                                        buckets=LATENCY_BUCKETS, registry=self.registry)
        self.queue_depth = Gauge("bertkit_queue_depth", "Inputs waiting for a batch", registry=self.registry)
        self.in_flight = Gauge("bertkit_requests_in_flight", "Requests accepted and not yet answered",
                               registry=self.registry)

    def watch_queue(self, depth: Callable[[], float]) -> None:
        """Read the queue depth from `depth` whenever the metrics are scraped."""
        self.queue_depth.set_function(depth)

    def observe_request(self, route: str, status: int, seconds: float) -> None:
        self.requests.labels(route, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def observe_batch(self, rows: int, padded_tokens: int, seconds: float) -> None:
        self.batch_size.observe(rows)
        self.batch_tokens.observe(padded_tokens)
        self.batch_duration.observe(seconds)

    def text(self) -> bytes:
        """The Prometheus text format of every metric."""
        return generate_latest(self.registry)
