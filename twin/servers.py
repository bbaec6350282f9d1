"""A real Prometheus and a real Alertmanager for the twin, on 127.0.0.1 only, always stopped.

Prometheus gets the exact rule groups the program renders (`observability.rules.rule_groups`),
with every duration in them (`for:` and the `[5m]` rate windows) divided by the twin's clock
scale, and the program's scrape interval divided the same way (`scaled_rules`, stated in the
twin's output). Alertmanager routes everything to a webhook in this process, which records each
notification. Each server runs in its own process group; `Servers.close()` (called on exit, on
error and at interpreter exit) terminates the group and waits for it, and the kernel kills both
servers if the twin dies without closing them (`lifecycle.spawn`). While the twin runs, `check`
fails it (ServerLost) when either server died, stopped, stopped answering or restarted
(`twin.health`).
"""
from __future__ import annotations

import atexit
import json
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import yaml

from inputs.outputs import write_text_atomically

from .exporters import LOOPBACK, Target
from .health import Watch, Watched, alertmanager_start, prometheus_start
from .lifecycle import LoopbackHTTPServer, Started, get_json, spawn, stop, until

# The program's scrape and rule-evaluation interval (components/monitoring.py SCRAPE_INTERVAL;
# a test keeps them equal) and kube-prometheus-stack's Alertmanager grouping defaults.
SCRAPE_INTERVAL_S = 15.0
MIN_INTERVAL_S = 0.25           # wall-clock floor: faster scrapes only load the machine
GROUP_WAIT_S, GROUP_INTERVAL_S = 30.0, 300.0
LOOKBACK_S = 300.0              # Prometheus' default staleness lookback
RESEND_DELAY_S = 60.0           # Prometheus' default --rules.alert.resend-delay
READY_TIMEOUT_S = 60.0

PROMETHEUS_BINARIES = ("prometheus",)
ALERTMANAGER_BINARIES = ("prometheus-alertmanager", "alertmanager")    # Debian's name, upstream's


class TwinError(RuntimeError):
    """The twin cannot run here (a binary missing, a server that does not start)."""


class ServerLost(TwinError):
    """A server the twin started died, stopped, stopped answering or restarted: what it would
    have evaluated or sent is lost, so the run's alerts cannot be judged (exit 1, not 2: the
    twin could run, and the run is what failed)."""


WHILE_STARTING = "while the twin was starting"


def find_binary(names: tuple[str, ...], package: str) -> str:
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    raise TwinError(f"{names[0]} not found: install Debian's '{package}' package (apt-get install -y {package})")


# -- time scaling -------------------------------------------------------------------------------
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_RANGE = re.compile(r"\[(\d+(?:\.\d+)?(?:ms|s|m|h|d))\]")


def seconds(text: str) -> float:
    m = _DURATION.match(text)
    if not m:
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return float(m.group(1)) * _UNITS[m.group(2)]


def wall(sim_s: float, scale: float) -> str:
    """A simulated duration as the wall-clock Prometheus duration the twin runs it at."""
    return f"{max(1, round(1e3 * sim_s / scale))}ms"


def scaled_rules(groups: list[dict], scale: float) -> list[dict]:
    """The groups with every `for:` and range-selector duration divided by `scale`."""
    if scale == 1:
        return groups
    out = []
    for group in groups:
        rules = []
        for rule in group["rules"]:
            rule = dict(rule)
            rule["expr"] = _RANGE.sub(lambda m: f"[{wall(seconds(m.group(1)), scale)}]", rule["expr"])
            if "for" in rule:
                rule["for"] = wall(seconds(rule["for"]), scale)
            rules.append(rule)
        out.append({**group, "rules": rules})
    return out


def scrape_interval_s(scale: float) -> float:
    """Wall-clock seconds between scrapes: the program's interval scaled, never below the floor."""
    return max(MIN_INTERVAL_S, SCRAPE_INTERVAL_S / scale)


# -- configuration files ------------------------------------------------------------------------
def prometheus_config(targets: list[Target], alertmanager_port: int, scale: float) -> dict:
    interval = f"{round(1e3 * scrape_interval_s(scale))}ms"
    jobs: dict[str, dict] = {}
    for t in targets:
        job = jobs.setdefault(t.job, {"job_name": t.job, "metrics_path": t.path, "static_configs": []})
        if t.job == "kube-state-metrics":
            job["honor_labels"] = True       # its pod/namespace labels name the pods it describes
        job["static_configs"].append({"targets": [f"{LOOPBACK}:{t.port}"], "labels": dict(t.labels)})
    return {
        "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
        "rule_files": ["rules.yaml"],
        "alerting": {"alertmanagers": [{"api_version": "v2",
                                        "static_configs": [{"targets": [f"{LOOPBACK}:{alertmanager_port}"]}]}]},
        "scrape_configs": list(jobs.values()),
    }


def alertmanager_config(webhook_url: str, scale: float) -> dict:
    return {
        "route": {"receiver": "twin", "group_by": ["alertname", "zone", "pod"],
                  "group_wait": wall(GROUP_WAIT_S, scale), "group_interval": wall(GROUP_INTERVAL_S, scale),
                  "repeat_interval": "1h"},
        "receivers": [{"name": "twin", "webhook_configs": [{"url": webhook_url, "send_resolved": True}]}],
    }


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


# -- the webhook --------------------------------------------------------------------------------
class Webhook:
    """Records every Alertmanager notification (webhook payload version 4)."""

    def __init__(self):
        self.notifications: list[dict] = []
        self._lock = threading.Lock()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    payload = json.loads(body)
                except ValueError:
                    payload = None
                if isinstance(payload, dict):
                    with hook._lock:
                        hook.notifications.append({"received_unix_s": time.time(), **payload})
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self._server = LoopbackHTTPServer((LOOPBACK, 0), Handler)
        self.url = f"http://{LOOPBACK}:{self._server.server_address[1]}/alerts"
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()

    def alerts(self) -> list[dict]:
        with self._lock:
            return [a for n in self.notifications for a in n.get("alerts", [])]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# -- processes ----------------------------------------------------------------------------------
class Servers(Started):
    """Prometheus + Alertmanager in `workdir`; a context manager that always stops both."""

    def __init__(self, workdir: Path, rule_groups: list[dict], targets: list[Target], scale: float):
        self.workdir, self.groups, self.targets, self.scale = workdir, rule_groups, targets, scale
        self._procs: list[subprocess.Popen] = []
        self.webhook: Webhook | None = None
        self.watch = Watch([])
        self.prometheus_url = self.alertmanager_url = ""

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    def start(self) -> None:
        atexit.register(self.close)
        prometheus = find_binary(PROMETHEUS_BINARIES, "prometheus")
        alertmanager = find_binary(ALERTMANAGER_BINARIES, "prometheus-alertmanager")
        self.webhook = Webhook()
        am_port, prom_port = free_port(), free_port()
        write_text_atomically(self.workdir / "alertmanager.yml",
                              yaml.safe_dump(alertmanager_config(self.webhook.url, self.scale), sort_keys=False))
        # No rules until every target is scraped (`load_rules`): with no series yet, the absent()
        # alerts would go pending at start-up and fire before the twin's clock starts.
        write_text_atomically(self.workdir / "rules.yaml", "groups: []\n")
        write_text_atomically(self.workdir / "prometheus.yml",
                              yaml.safe_dump(prometheus_config(self.targets, am_port, self.scale), sort_keys=False))
        self.alertmanager_url = f"http://{LOOPBACK}:{am_port}"
        self.prometheus_url = f"http://{LOOPBACK}:{prom_port}"
        am = self._spawn("alertmanager", [
            alertmanager, f"--config.file={self.workdir / 'alertmanager.yml'}",
            f"--storage.path={self.workdir / 'alertmanager-data'}", f"--web.listen-address={LOOPBACK}:{am_port}",
            "--cluster.listen-address=", "--log.level=warn"])       # no gossip port: loopback only
        self._prometheus = self._spawn("prometheus", [
            prometheus, f"--config.file={self.workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.workdir / 'prometheus-data'}", f"--web.listen-address={LOOPBACK}:{prom_port}",
            f"--query.lookback-delta={wall(LOOKBACK_S, self.scale)}",
            f"--rules.alert.resend-delay={wall(RESEND_DELAY_S, self.scale)}", "--log.level=warn"])
        for name, url in (("alertmanager", self.alertmanager_url), ("prometheus", self.prometheus_url)):
            self._wait_ready(name, url)
        self.watch = Watch([
            Watched("Prometheus", self._prometheus, f"{self.prometheus_url}/api/v1/status/runtimeinfo",
                    prometheus_start, "its rule evaluations and alert states are"),
            Watched("Alertmanager", am, f"{self.alertmanager_url}/api/v2/status", alertmanager_start,
                    "its notifications are")])
        self._raise_lost(self.watch.record(), WHILE_STARTING)

    def check(self, when: str, probe: bool = True) -> None:
        """ServerLost naming the server and what happened to it `when`, if either is not fine."""
        self._raise_lost(self.watch.problem(probe), when)

    def gone(self) -> bool:
        """Either server's process exited or is stopped (cheap: no request)."""
        return self.watch.process_problem() is not None

    @staticmethod
    def _raise_lost(found, when: str) -> None:
        if found is not None:
            server, what = found
            raise ServerLost(f"{server.name} (pid {server.proc.pid}) {what} {when}: {server.loses} lost, "
                             "so whether the alerts behaved as the plan expects cannot be judged")

    def wait_alertmanager_discovered(self) -> None:
        """Until Prometheus' notifier has found Alertmanager (its discovery, like the scrapers',
        hands over targets a few seconds after start; alerts sent before are dropped)."""
        if not until(lambda: bool(get_json(f"{self.prometheus_url}/api/v1/alertmanagers")["data"]
                                  ["activeAlertmanagers"]), READY_TIMEOUT_S, give_up=self.gone):
            self.check(WHILE_STARTING)
            raise TwinError(f"Prometheus did not find Alertmanager within {READY_TIMEOUT_S:g} s")

    def load_rules(self) -> None:
        """Write the scaled rule groups and have Prometheus reload (SIGHUP); wait until they are loaded."""
        # Whole or not at all: Prometheus reads it on the SIGHUP below (a torn file fails the reload).
        write_text_atomically(self.workdir / "rules.yaml",
                              yaml.safe_dump({"groups": scaled_rules(self.groups, self.scale)}, sort_keys=False, width=120))
        self._prometheus.send_signal(signal.SIGHUP)
        wanted = sum(len(g["rules"]) for g in self.groups)

        def loaded() -> bool:
            return sum(len(g["rules"]) for g in get_json(f"{self.prometheus_url}/api/v1/rules")["data"]["groups"]) \
                == wanted
        if not until(loaded, READY_TIMEOUT_S, give_up=self.gone):
            self.check(WHILE_STARTING)
            raise TwinError(f"Prometheus did not load the {wanted} rules within {READY_TIMEOUT_S:g} s")

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        proc = spawn(argv, self.workdir / f"{name}.log", self.workdir)
        self._procs.append(proc)
        return proc

    def _wait_ready(self, name: str, url: str) -> None:
        def ready() -> bool:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as resp:
                return resp.status == 200
        if until(ready, READY_TIMEOUT_S, give_up=lambda: any(p.poll() is not None for p in self._procs),
                 interval_s=0.1):
            return
        log = (self.workdir / f"{name}.log").read_text(errors="replace").strip().splitlines()[-3:]
        raise TwinError(f"{name} did not become ready within {READY_TIMEOUT_S:g} s: {' | '.join(log)}")

    def close(self) -> None:
        """Terminate each server's process group and wait; idempotent."""
        while self._procs:
            stop(self._procs.pop())
        if self.webhook is not None:
            self.webhook.close()
            self.webhook = None
        atexit.unregister(self.close)


def versions() -> tuple[str, str]:
    """The first line of `--version` of each server binary, for the report."""
    out = []
    for names, package in ((PROMETHEUS_BINARIES, "prometheus"), (ALERTMANAGER_BINARIES, "prometheus-alertmanager")):
        try:
            done = subprocess.run([find_binary(names, package), "--version"], capture_output=True, text=True,
                                  timeout=10)
            text = (done.stdout or done.stderr).strip().splitlines()
            out.append(text[0] if text else "")
        except (TwinError, OSError, subprocess.TimeoutExpired):
            out.append("")
    return out[0], out[1]
