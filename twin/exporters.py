"""The scrape targets of the twin, on 127.0.0.1: one emulated vLLM replica per planned replica,
kube-state-metrics (pod readiness and labels, which the replica-count rules read) and the Envoy
gateway (the offered load, which the capacity rules read). All are driven by one `Timeline` on
one accelerated clock; a replica in a lost zone answers 503, as a pod that is gone fails its
scrape, and kube-state-metrics reports it not ready.

Counts are served divided by the clock scale (see `timeline.values_at`): an accelerated twin's
rates read per simulated second.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler

from conventions import GATEWAY_CONTROLLER_NAMESPACE, ROLE_SERVING_WORKER as WORKER_ROLE

from . import vllm_metrics as vm
from .lifecycle import LoopbackHTTPServer, Started, until
from .timeline import Timeline, values_at

LOOPBACK = "127.0.0.1"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
ENVOY_CLIENT_LISTENER = "https-443"     # the HTTP connection manager of the client listener


class Clock:
    """Simulated seconds since `start()`, running `scale` times faster than the wall clock."""

    def __init__(self, scale: float):
        self.scale = scale
        self._t0: float | None = None
        self.wall_start: float | None = None

    def start(self) -> None:
        self._t0 = time.monotonic()
        self.wall_start = time.time()

    def now(self) -> float:
        return 0.0 if self._t0 is None else (time.monotonic() - self._t0) * self.scale

    def sim_time(self, unix_s: float) -> float:
        """A wall-clock instant (e.g. an alert's startsAt) in simulated seconds."""
        return (unix_s - (self.wall_start or unix_s)) * self.scale


@dataclass(frozen=True)
class Target:
    job: str
    port: int
    path: str
    labels: dict        # target labels the scrape config sets (as the PodMonitor relabelings do)


def _handler(render_body):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            status, body = render_body(self.path)
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):       # scrapes every half second: keep stderr quiet
            pass
    return Handler


class Exporters(Started):
    """Starts every target's HTTP server (port 0: the kernel picks a free one); `close()` stops them."""

    def __init__(self, timeline: Timeline, clock: Clock, namespace: str, model_name: str):
        self.timeline, self.clock, self.namespace, self.model_name = timeline, clock, namespace, model_name
        self._servers: list[LoopbackHTTPServer] = []
        self.targets: list[Target] = []
        self.scraped: set[int] = set()      # ports scraped at least once

    def start(self) -> None:
        for rep in self.timeline.replicas:
            port = self._serve(lambda path, rep=rep: self._vllm(rep, path))
            self.targets.append(Target("vllm", port, "/metrics",
                                       {"namespace": self.namespace, "pod": rep.pod, "zone": rep.zone}))
        self.targets.append(Target("kube-state-metrics", self._serve(self._kube_state), "/metrics", {}))
        self.targets.append(Target("envoy", self._serve(self._envoy), "/stats/prometheus",
                                   {"namespace": GATEWAY_CONTROLLER_NAMESPACE, "pod": "envoy-twin-0"}))

    def close(self) -> None:
        while self._servers:
            server = self._servers.pop()
            server.shutdown()
            server.server_close()

    def _serve(self, render_body) -> int:
        def counted(path: str, render=render_body) -> tuple[int, str]:
            self.scraped.add(port)
            return render(path)
        server = LoopbackHTTPServer((LOOPBACK, 0), _handler(counted))
        port = server.server_address[1]
        self._servers.append(server)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        return port

    def wait_scraped(self, timeout_s: float, give_up=lambda: False) -> bool:
        """Until every target has been scraped once (Prometheus takes its targets a few seconds
        after it is ready); bounded by timeout_s, and over as soon as `give_up()` holds."""
        return until(lambda: {t.port for t in self.targets} <= self.scraped, timeout_s, give_up=give_up)

    def _k(self) -> int:
        return self.timeline.index(self.clock.now())

    # -- the three kinds of target --------------------------------------------------------------
    def _vllm(self, rep, path: str) -> tuple[int, str]:
        k = self._k()
        if path != "/metrics":
            return 404, "not found\n"
        if not rep.up[k]:
            return 503, "replica lost with its zone\n"
        return 200, vm.render(self.model_name, values_at(rep, k, self.clock.scale), self.clock.wall_start or 0.0,
                              rep.families)

    def _kube_state(self, path: str) -> tuple[int, str]:
        k = self._k()
        lines = ["# HELP kube_pod_status_ready Describes whether the pod is ready to serve requests.",
                 "# TYPE kube_pod_status_ready gauge"]
        # A multi-node replica is a leader pod (role serving) and its workers (role serving-worker),
        # all ready or none (LeaderWorkerSet's RecreateGroupOnPodRestart): the rules count leaders,
        # so they count ready groups, never ready pods.
        pods = [(rep, pod, role) for rep in self.timeline.replicas
                for pod, role in [(rep.pod, "serving")] + [(f"{rep.pod}-{j}", WORKER_ROLE)
                                                           for j in range(1, rep.workers + 1)]]
        for rep, pod, _ in pods:
            ready = rep.up[k]
            for cond, on in (("true", ready), ("false", not ready), ("unknown", False)):
                lines.append(f'kube_pod_status_ready{{namespace="{self.namespace}",pod="{pod}",'
                             f'uid="twin-{pod}",condition="{cond}"}} {1 if on else 0}')
        lines += ["# HELP kube_pod_labels Kubernetes labels converted to Prometheus labels.",
                  "# TYPE kube_pod_labels gauge"]
        for rep, pod, role in pods:
            lines.append(f'kube_pod_labels{{namespace="{self.namespace}",pod="{pod}",uid="twin-{pod}",'
                         f'label_app_kubernetes_io_name="vllm",label_llm_serving_io_role="{role}",'
                         f'label_llm_serving_io_zone="{rep.zone}"}} 1')
        return 200, "\n".join(lines) + "\n"

    def _envoy(self, path: str) -> tuple[int, str]:
        k = self._k()
        tl, prefix, per = self.timeline, f'envoy_http_conn_manager_prefix="{ENVOY_CLIENT_LISTENER}"', self.clock.scale
        lines = ["# TYPE envoy_http_downstream_rq_total counter",
                 f"envoy_http_downstream_rq_total{{{prefix}}} {tl.offered[k] / per!r}",
                 "# TYPE envoy_http_downstream_rq_xx counter"]
        for cls, series in (("2", tl.answered_2xx), ("5", tl.answered_5xx)):
            lines.append(f'envoy_http_downstream_rq_xx{{envoy_response_code_class="{cls}",{prefix}}} {series[k] / per!r}')
        lines += ["# TYPE envoy_http_local_rate_limiter_http_local_rate_limit_rate_limited counter",
                  "envoy_http_local_rate_limiter_http_local_rate_limit_rate_limited 0"]
        return 200, "\n".join(lines) + "\n"
