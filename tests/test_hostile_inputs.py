"""Issue 23: inputs from files and servers we do not control. One named case per class, exact
messages: YAML tricks, special and huge files, hostile Prometheus answers (a local http.server),
untrusted report text. The fuzz suite (tests/test_fuzz.py) draws more of each class."""
from __future__ import annotations

import errno
import http.server
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from inputs import InputError, safe_yaml
from inputs.files import read_regular_file
from inputs.untrusted import markup_safe, printable, redact_url
from settings import SettingsError, read_stack_config, settings_from_config
from tests.inprocess_cli import run_cli
from tests.stacks import stack_config, with_overrides

NS = "llm-serving"
LLMSERVE = Path(sys.executable).parent / "llmserve"
BOMB = "a: &a ['x','x','x','x','x','x','x','x','x']\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},"
    f"*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)}]\n" for i in range(8))


# -- YAML: what a reader sees is what the program gets -------------------------------------------------
@pytest.mark.parametrize("text, message", [
    pytest.param(BOMB, "not valid YAML at line 1: anchors and aliases (&name, *name) are not read; write the value out",
                 id="billion laughs"),
    pytest.param("a: 010\n", "not valid YAML at line 1: 010: a leading zero is octal in YAML 1.1 (8) and decimal in "
                             "1.2 (10); write 10 without it", id="octal"),
    pytest.param("a: !!set {x, y}\n", "not valid YAML at line 1: tag !!set is not read; only plain YAML values "
                                      "(no ! tags)", id="a set"),
    pytest.param("a: !!python/object/apply:os.system [echo]\n", "not valid YAML at line 1: tag "
                 "!!python/object/apply:os.system is not read; only plain YAML values (no ! tags)", id="python tag"),
    pytest.param("a: " + "9" * 5000 + "\n", "not valid YAML at line 1: an integer of 5,000 digits; numbers here have "
                                           "at most 32", id="5000 digits"),
    pytest.param("a: 1\na: 2\n", "not valid YAML at line 2: key 'a' appears twice; keep one", id="duplicate key"),
    pytest.param("[" * 100_000, "not valid YAML at line 1: nested more than 64 levels deep", id="deep"),
])
def test_yaml_tricks_are_one_line(text, message):
    with pytest.raises(InputError) as err:
        safe_yaml.load(text, "f.yaml")
    assert str(err.value) == f"f.yaml: {message}"


@pytest.mark.parametrize("text, value", [
    ("1:30", "1:30"), ("yes", "yes"), ("no", "no"), ("on", "on"), ("off", "off"), ("y", "y"), ("1_000", "1_000"),
    ("2001-12-14", "2001-12-14"), ("true", True), ("False", False), ("0x1f", 31), ("0o17", 15), ("10", 10),
    ("1e3", 1000.0), ("-.inf", float("-inf")), ("~", None), ("null", None), ("'010'", "010"),
])
def test_plain_scalars_follow_yaml_1_2(text, value):
    assert safe_yaml.load(f"a: {text}\n", "f.yaml") == {"a": value}


@pytest.mark.parametrize("overrides, message", [
    ({"workload": {"qps": True}}, f"{NS}:workload.qps: Input should be a valid number"),
    ({"workload": {"concurrency": True}}, f"{NS}:workload.concurrency: Input should be a valid integer"),
    ({"workload": {"qps": 10, "ttftSeconds": "1:30"}}, f"{NS}:workload.ttftSeconds: Input should be a valid number"),
    ({"model": {"tensorParallel": True}}, f"{NS}:model.tensorParallel: Input should be a valid integer"),
    ({"gpuPools": [{"zone": "us-east-1a", "nodes": True}]}, f"{NS}:gpuPools[0].nodes: Input should be a valid integer"),
    ({"gpuPools": [{"zone": "us-east-1a", "efa": "yes"}]}, f"{NS}:gpuPools[0].efa: Input should be a valid boolean"),
    ({"workload": {"qps": "10"}}, f"{NS}:workload.qps: Input should be a valid number"),
])
def test_a_bool_or_text_is_not_a_number(overrides, message):
    with pytest.raises(SettingsError) as err:
        settings_from_config("prod", with_overrides(stack_config("prod"), overrides))
    assert message in err.value.problems


def test_an_alias_bomb_in_a_stack_file_is_refused_at_once(tmp_path):
    path = tmp_path / "Pulumi.x.yaml"
    path.write_text("config:\n  llm-serving:tags: &a {k: v}\n  llm-serving:other: *a\n")
    started = time.monotonic()
    with pytest.raises(SettingsError) as err:
        read_stack_config(path)
    assert err.value.problems == [f"{path}: not valid YAML at line 2: anchors and aliases (&name, *name) are not read; "
                                  "write the value out"]
    assert time.monotonic() - started < 1


# -- special and huge files: refused by stat, before any read -------------------------------------------
def _fifo(tmp: Path) -> Path:
    os.mkfifo(tmp / "p.yaml")
    return tmp / "p.yaml"


def _sparse(tmp: Path) -> Path:
    with (tmp / "s.yaml").open("wb") as fh:
        fh.truncate(5 * 2**30)
    return tmp / "s.yaml"


@pytest.mark.parametrize("make, message", [
    (_fifo, "{p}: is a FIFO (named pipe); give a stack file (a regular file)"),
    (lambda tmp: Path("/dev/zero"), "{p}: is a character device; give a stack file (a regular file)"),
    (lambda tmp: Path("/dev/urandom"), "{p}: is a character device; give a stack file (a regular file)"),
    (_sparse, "{p}: 5,368,709,120 bytes; a stack file is at most 1,000,000"),
    (lambda tmp: tmp / ("n" * 300), "{p}: a name in it is 300 bytes; a file name is at most 255 bytes (Linux NAME_MAX); "
                                    "shorten it"),
])
def test_special_and_huge_files_are_one_line_without_reading(tmp_path, make, message):
    path = make(tmp_path)
    started = time.monotonic()
    with pytest.raises(SettingsError) as err:
        read_stack_config(path)
    from inputs.files import shown
    assert err.value.problems == [message.format(p=shown(path))]
    assert time.monotonic() - started < 1


@pytest.mark.parametrize("option", [["--config"], ["--profiles-file"]])
def test_a_fifo_given_as_a_path_option_is_one_line(tmp_path, option):
    fifo = _fifo(tmp_path)
    command = ["render", "--stack", "prod", "--out", str(tmp_path / "o")] if option == ["--config"] else \
        ["calibrate", "--prometheus", "http://127.0.0.1:1"]
    result = run_cli([*command, *option, str(fifo)], limit_s=10)
    assert result.exit_code == 2
    assert result.stderr.endswith(f"{fifo}: is a FIFO (named pipe); give a "
                                  f"{'stack file' if option == ['--config'] else 'profiles YAML file'} "
                                  "(a regular file)\n")


def test_a_file_that_grows_past_the_cap_while_read_is_refused(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    with pytest.raises(InputError) as err:
        read_regular_file(path, 5, "file")
    assert str(err.value) == f"{path}: 10 bytes; a file is at most 5"


@pytest.mark.parametrize("text, message", [
    ("- a\n", "not a profiles file (a YAML map with a `profiles:` map of named profiles)"),
    ("profiles: [1, 2]\n", "not a profiles file (a YAML map with a `profiles:` map of named profiles)"),
    ("profiles: &p {}\n", "not valid YAML at line 1: anchors and aliases (&name, *name) are not read; write the value out"),
])
def test_calibrate_refuses_a_profiles_file_that_is_not_a_map(tmp_path, text, message):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    result = run_cli(["calibrate", "--prometheus", "http://127.0.0.1:1", "--profiles-file", str(path)])
    assert (result.exit_code, result.stderr) == (2, f"error: --profiles-file: {path}: {message}\n")


# -- untrusted text -------------------------------------------------------------------------------------
@pytest.mark.parametrize("url, shown", [
    ("http://admin:hunter2@prom:9090", "http://***@prom:9090"),
    ("http://prom:9090/x?api_key=s3cret&step=1", "http://prom:9090/x?api_key=***&step=1"),
    ("https://p/?token=a&password=b&Authorization=c", "https://p/?token=***&password=***&Authorization=***"),
])
def test_credentials_never_reach_a_message(url, shown):
    assert redact_url(url) == shown


def test_escapes_and_markup_print_as_plain_characters():
    assert printable("ok\x1b[2J\x1b]0;owned\x07\r\x00done") == "okdone"
    assert markup_safe("[/] [bold]x http://u:p@h/") == "\\[/] \\[bold]x http://***@h/"


# -- a Prometheus that answers what it likes ------------------------------------------------------------
# The start time `read_fleet` reads before and after its queries: a steady one, so each mode below
# is what reaches the queries (tests/test_twin_fail_closed.py: a start time that changes).
RUNTIMEINFO = json.dumps({"status": "success", "data": {"startTime": "2026-01-05T10:00:00.000Z"}}).encode()


class _Hostile(http.server.BaseHTTPRequestHandler):
    mode = "inf"

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(RUNTIMEINFO)))
        self.end_headers()
        self.wfile.write(RUNTIMEINFO)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        mode = type(self).mode
        if mode in ("trickle", "drip"):      # drip: no Content-Length, the body ends when the server closes
            self.send_response(200)
            if mode == "trickle":
                self.send_header("Content-Length", "1000")
            self.end_headers()
            try:
                for _ in range(100):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.2)
            except OSError:       # the client gave up: what it should do
                pass
            return
        if mode == "endless":
            self.send_response(200)
            self.end_headers()
            try:
                while True:
                    self.wfile.write(b"[" * 65536)
            except OSError:
                return
        body = ANSWERS[mode]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _vector(value) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"zone": "us-east-1a", "pod": "vllm-0"}, "value": [1.0, value]}]}}).encode()


ANSWERS = {
    "inf": _vector("-Inf"), "+inf": _vector("+Inf"), "nan": _vector("NaN"), "text": _vector("lots"),
    "null": _vector(None), "shape": b'{"status": "success", "data": {"resultType": "matrix", "result": []}}',
    "list": b"[1, 2, 3]", "deep": b"[" * 100_000, "html": b"<html>not prometheus</html>",
    "markup": json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"zone": "[/]\x1b[2J", "pod": "[bold]"}, "value": [1.0, "-Inf"]}]}}).encode(),
}


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):      # a client hanging up is the point of some cases
        pass


@pytest.fixture(scope="module")
def hostile():
    server = _QuietServer(("127.0.0.1", 0), _Hostile)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.parametrize("mode", sorted(ANSWERS))
def test_check_never_calls_an_unreadable_fleet_within_plan(hostile, mode):
    _Hostile.mode = mode
    result = run_cli(["check", "--stack", "prod", "--prometheus", hostile], limit_s=20)
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert "within its plan." not in result.stdout
    assert "Traceback" not in result.stdout + result.stderr and "\x1b" not in result.stdout + result.stderr
    if result.stderr:
        assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("error: "), result.stderr
    else:
        assert "could not read" in result.stdout or "no vLLM series" in result.stdout


@pytest.mark.parametrize("mode, message", [
    ("trickle", "no full answer within 1 s"),
    ("drip", "no full answer within 1 s"),
    ("endless", "an answer over 8,388,608 bytes; at most that is read"),
])
def test_a_slow_or_endless_answer_is_cut_off(hostile, monkeypatch, mode, message):
    from twin import promapi
    monkeypatch.setattr(promapi, "DEADLINE_S", 1.0)
    _Hostile.mode = mode
    started = time.monotonic()
    result = run_cli(["check", "--stack", "prod", "--prometheus", hostile.replace("//", "//u:pw@")], limit_s=20)
    assert result.exit_code == 1 and message in result.stderr, result.stderr
    assert "pw" not in result.stderr and time.monotonic() - started < 10


@pytest.mark.parametrize("url, message", [
    ("http://127.0.0.1:999999999999999999999999999999", "'http://127.0.0.1:999999999999999999999999999999' is not a "
                                                       "URL (Port out of range 0-65535); e.g. http://127.0.0.1:9090"),
    ("http://[::1::2]:9090", "'http://[::1::2]:9090' is not a URL ('::1::2' does not appear to be an IPv4 or IPv6 "
                             "address); e.g. http://127.0.0.1:9090"),
    ("http://u:secret@[zz]:1", "'http://***@[zz]:1' is not a URL ('zz' does not appear to be an IPv4 or IPv6 "
                               "address); e.g. http://127.0.0.1:9090"),
    ("http://h:0", "'http://h:0': port 0 is not a server's port; e.g. http://127.0.0.1:9090"),
    ("http://h:9090/?api_key=abc", "'http://h:9090/?api_key=***' has a query, fragment or space; give the server's "
                                   "base URL, e.g. http://127.0.0.1:9090"),
    ("file:///etc/passwd", "'file:///etc/passwd' is not an http(s) URL of a Prometheus server, e.g. "
                           "http://127.0.0.1:9090"),
])
def test_odd_prometheus_urls_are_one_line_with_credentials_redacted(url, message):
    result = run_cli(["check", "--stack", "prod", "--prometheus", url])
    assert (result.exit_code, result.stderr) == (2, f"error: --prometheus: {message}\n")


def test_yaml_dump_of_a_profile_round_trips_through_the_safe_loader():
    doc = {"profiles": {"x": {"mfu": 0.4, "description": "yes: 1:30", "max_num_seqs": 256}}}
    assert safe_yaml.load(yaml.safe_dump(doc), "p.yaml") == doc


# -- twin and calibrate: the simulator's work limits, before any server starts or any fit ----------------
@pytest.mark.parametrize("args, message", [
    (["--qps", "1e6"], "--qps: 1e+06 QPS for 1200 s is 1.2e+09 requests, above the limit of 1,000,000 (lower --qps or "
                       "--duration)"),
    (["--slowdown", "1e9"], "--slowdown: 1e+09 is above the limit of 10 (steps that many times the plan's)"),
])
def test_twin_refuses_work_the_simulator_would_not_do(args, message):
    result = run_cli(["twin", "--stack", "prod", *args], limit_s=10)
    assert (result.exit_code, result.stderr) == (2, f"error: {message}\n")


@pytest.mark.parametrize("tokens, unreadable, message", [
    (1e12, [], "the fleet's figures are beyond what can be simulated (input tokens: 1e+12 per request is above the "
               "limit of 1,000,000); are the counters this fleet's?"),
    (1000.0, ["us-east-1a/vllm-0 qps = inf"], "could not read us-east-1a/vllm-0 qps = inf from Prometheus: a fit to "
                                              "unknown figures would be made up"),
])
def test_calibrate_refuses_what_it_cannot_fit(tokens, unreadable, message):
    from twin.calibrate import CalibrationError, observe
    from twin.promapi import FleetLive, ReplicaLive
    rep = ReplicaLive("us-east-1a", "vllm-0", qps=1.0, prompt_tokens_per_s=tokens, generation_tokens_per_s=300.0,
                      tpot_mean_s=0.02, prefill_mean_s=0.1)
    with pytest.raises(CalibrationError) as err:
        observe(FleetLive("1h", [rep], None, {"us-east-1a": 1.0}, unreadable=unreadable))
    assert str(err.value) == message


# -- outputs do what their help says ---------------------------------------------------------------------
@pytest.mark.parametrize("out, message", [
    ("", "--out: empty; give the folder to write, e.g. --out rendered"),
    ("/", "--out: / is the file system's root; give a folder of its own, e.g. --out rendered"),
])
def test_render_refuses_an_empty_or_root_out(out, message):
    result = run_cli(["render", "--stack", "prod", "--out", out])
    assert (result.exit_code, result.stderr) == (2, f"error: {message}\n")


def test_render_replaces_only_the_folders_its_help_names(tmp_path):
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "x").write_text("mine")
    result = run_cli(["render", "--stack", "prod", "--out", str(tmp_path)], limit_s=60)
    assert result.exit_code == 0, result.stderr
    from llmserve.render_cmd import render
    import inspect
    help_text = inspect.signature(render).parameters["out_text"].default.help
    written = sorted(p.name for p in tmp_path.iterdir() if p.name != "keep")
    assert all(f"{name}/" in help_text for name in written) and (tmp_path / "keep" / "x").read_text() == "mine"


@pytest.mark.parametrize("command", ["size", "simulate"])
def test_plot_writes_exactly_the_named_path(tmp_path, command):
    target = tmp_path / "latency"           # no extension: matplotlib alone would write latency.png
    args = ["--duration", "60"] if command == "simulate" else []
    result = run_cli([command, "--stack", "prod", "--plot", str(target), *args], limit_s=60)
    assert result.exit_code in (0, 1), result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["latency"]
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and str(target) in result.stdout


def test_plot_refuses_a_name_of_another_format(tmp_path):
    result = run_cli(["size", "--plot", str(tmp_path / "p.svg")])
    assert (result.exit_code, result.stderr) == (2, f"error: --plot: {tmp_path / 'p.svg'} names a .svg file; this "
                                                    f"writes PNG: name it {tmp_path / 'p.png'}\n")


# -- values AWS, Kubernetes or an ACME CA would reject, each by its rule -----------------------------------
GW = {"hostname": "llm.example.com", "hostedZoneId": "Z123", "acmeEmail": "ops@example.com"}


@pytest.mark.parametrize("overrides, message", [
    ({"gateway": {**GW, "hostname": "10.0.0.1"}}, f"{NS}:gateway.hostname: '10.0.0.1' is an IP address; the gateway "
     "needs a DNS name (certificates are issued for names), e.g. llm.example.com"),
    ({"gateway": {**GW, "hostname": "a" * 64 + ".example.com"}}, f"{NS}:gateway.hostname: '{'a' * 64}.example.com': "
     f"label '{'a' * 20}...' is 64 characters; a DNS label is at most 63 (RFC 1123)"),
    ({"gateway": {**GW, "hostname": "*.com"}}, f"{NS}:gateway.hostname: '*.com' is a wildcard over a top-level domain; "
     "use a name under a domain you hold, e.g. llm.example.com"),
    ({"gateway": {**GW, "hostname": "localhost"}}, f"{NS}:gateway.hostname: 'localhost' is a bare top-level domain; use "
     "a name under a domain you hold, e.g. llm.example.com"),
    ({"gateway": {**GW, "acmeServer": "file:///etc/passwd"}}, f"{NS}:gateway.acmeServer: 'file:///etc/passwd' is not "
     "an https URL of an ACME directory (RFC 8555 requires HTTPS); e.g. https://acme-v02.api.letsencrypt.org/directory"),
    ({"gateway": {**GW, "acmeServer": "http://acme.example.com/dir"}}, f"{NS}:gateway.acmeServer: "
     "'http://acme.example.com/dir' is not an https URL of an ACME directory (RFC 8555 requires HTTPS); "
     "e.g. https://acme-v02.api.letsencrypt.org/directory"),
    ({"gateway": {**GW, "apiKeyNames": [".."]}}, f"{NS}:gateway.apiKeyNames[0]: '..' is not a valid Secret key: "
     "Kubernetes refuses '.', '..' and keys starting with '..'; name it with a letter or digit first"),
    ({"gateway": {**GW, "apiKeyNames": ["..x"]}}, f"{NS}:gateway.apiKeyNames[0]: '..x' is not a valid Secret key: "
     "Kubernetes refuses '.', '..' and keys starting with '..'; name it with a letter or digit first"),
    ({"tags": {"team": "a<b>"}}, f"{NS}:tags: tag 'team': its value holds '<'; AWS takes letters, digits, spaces and "
                                 "_ . : / = + - @"),
    ({"tags": {"kubernetes.io/cluster/other": "owned"}}, f"{NS}:tags: tag 'kubernetes.io/cluster/other': "
     "kubernetes.io/cluster/<name> tags hand resources to that cluster's controllers; the program tags what its own "
     "cluster uses, so drop it"),
    ({"tags": {f"k{i}": "v" for i in range(41)}}, f"{NS}:tags: 41 tags; AWS takes at most 50 per resource and the "
     "program and EKS add up to 10, so give at most 40"),
    ({"tags": {"Name": "x"}}, f"{NS}:tags: tag 'Name': the program sets this tag itself; use another key"),
    ({"aws:region": "xx-fake-9"}, "aws:region: 'xx-fake-9' is not an AWS region; use e.g. us-east-1"),
    ({"aws:region": "us-east-9"}, "aws:region: 'us-east-9' is not an AWS region; did you mean us-east-2?"),
])
def test_values_the_cloud_would_reject_are_refused_by_their_rule(overrides, message):
    with pytest.raises(SettingsError) as err:
        settings_from_config("prod", with_overrides(stack_config("prod"), overrides))
    assert message in err.value.problems, err.value.problems


@pytest.mark.parametrize("tags", [{"team": "ml platform"}, {"cost-center": "a_b.c:d/e=f+g-h@i"}, {"équipe": "données"}])
def test_tags_aws_takes_pass(tags):
    settings_from_config("prod", with_overrides(stack_config("prod"), {"tags": tags}))


def test_the_region_list_is_botocores():
    from botocore.loaders import create_loader
    from settings.names import AWS_REGIONS
    data = create_loader().load_data("endpoints")
    regions = {r for p in data["partitions"] if p["partition"] in ("aws", "aws-cn", "aws-us-gov") for r in p["regions"]}
    assert set(AWS_REGIONS) == regions


@pytest.mark.parametrize("overrides, message", [
    ({"sizing": {"gpuHourPrice": 1e300}}, f"{NS}:sizing.gpuHourPrice: must be at most 1000 (got 1e+300)"),
    ({"workload": {"qps": 10, "ttftSeconds": 1e300}}, f"{NS}:workload.ttftSeconds: must be at most 3600 (got 1e+300)"),
    ({"gateway": {**GW, "acmeServer": "https://u:p@acme.example.com/dir"}}, f"{NS}:gateway.acmeServer: the ACME "
     "directory URL holds credentials; ACME authenticates with the account key, so give the URL alone, e.g. "
     "https://acme-v02.api.letsencrypt.org/directory"),
])
def test_absurd_figures_are_refused_not_planned(overrides, message):
    with pytest.raises(SettingsError) as err:
        settings_from_config("prod", with_overrides(stack_config("prod"), overrides))
    assert message in err.value.problems, err.value.problems


# -- outputs survive interruption (inputs.outputs) ----------------------------------------------------
def test_a_failed_write_keeps_the_previous_file_and_leaves_no_temporary(tmp_path):
    from inputs.outputs import atomic_path, write_text_atomically
    target = tmp_path / "profiles.yaml"
    write_text_atomically(target, "old\n")
    with pytest.raises(OSError):
        with atomic_path(target) as tmp:
            tmp.write_text("half of the new")
            raise OSError(28, "No space left on device")       # ENOSPC part-way
    assert target.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["profiles.yaml"]
    write_text_atomically(target, "new\n")
    assert target.read_text() == "new\n" and sorted(p.name for p in tmp_path.iterdir()) == ["profiles.yaml"]


def test_an_interrupted_render_keeps_the_previous_one(tmp_path, monkeypatch, recorded):
    """A failure (a disk that fills, a signal) while the new files are written leaves every folder of
    the previous render as it was, and no staging folder."""
    from offline import manifests
    from offline.render import render
    rec = recorded("prod")
    first = render(rec, tmp_path)
    before = {p: p.read_text() for p in first.manifests}
    calls = {"n": 0}
    real = manifests.write_synced

    def fail_half_way(path, text):
        calls["n"] += 1
        if calls["n"] == 20:
            raise KeyboardInterrupt             # SIGINT part-way
        real(path, text)
    monkeypatch.setattr(manifests, "write_synced", fail_half_way)
    with pytest.raises(KeyboardInterrupt):
        render(rec, tmp_path)
    assert {p: p.read_text() for p in sorted((tmp_path / "manifests").iterdir())} == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("target", ["/dev/full", "fifo"])
def test_a_plot_onto_a_device_is_refused_in_one_line(capsys, tmp_path, target):
    """Never written in place, never replaced by a rename (as root, that would replace the device)."""
    from llmserve.cli import main
    if target == "fifo":
        target = str(tmp_path / "plot.png")
        os.mkfifo(target)
    assert main(["size", "--plot", target]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a regular file" in err


# -- files that are not what they claim (round 3) -------------------------------------------------------
ENVIRON_MARK = "LLM_SERVING_TEST_SECRET"


@pytest.mark.parametrize("argv", [
    ["size", "--lengths", "{p}"], ["size", "--config", "{p}"], ["size", "--model-config", "{p}"],
    ["loadtest-report", "{p}", "--stack", "dev"], ["calibrate", "--prometheus", "http://127.0.0.1:1", "--profiles-file", "{p}"],
    ["simulate", "--traffic", "{p}", "--autoscale"],
])
def test_a_kernel_pseudo_file_is_refused_for_every_path_option(monkeypatch, argv):
    """/proc/self/environ is a regular file by stat: the device it lives on refuses it (inputs.files)."""
    monkeypatch.setenv(ENVIRON_MARK, "sk-live-do-not-print")
    result = run_cli([a.format(p="/proc/self/environ") for a in argv], limit_s=10)
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
    assert "/proc/self/environ: is on /proc, a kernel pseudo-filesystem; give a " in result.stderr
    assert "sk-live" not in result.stderr + result.stdout


@pytest.mark.parametrize("argv", [["size", "--lengths", "{p}"], ["size", "--model-config", "{p}"],
                                  ["simulate", "--traffic", "{p}", "--autoscale"]])
@pytest.mark.parametrize("text", ["API_KEY=sk-live-abcdef0123456789\n", "input_tokens,output_tokens\n1,sk-live-abcdef\n",
                                  '{"input_tokens": "sk-live-abcdef", "output_tokens": 1}\n',
                                  '{"model_type": "llama", "hidden_size": "sk-live-abcdef"}'])
def test_a_file_named_by_mistake_is_never_quoted(tmp_path, argv, text):
    path = tmp_path / "f"
    path.write_text(text)
    result = run_cli([a.format(p=path) for a in argv], limit_s=10)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "sk-live" not in result.stderr + result.stdout


def _stack_with_lengths(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    raw = with_overrides(stack_config("dev"), {"workload": {"qps": 2, "lengthsFile": name}})
    path = folder / "Pulumi.t.yaml"
    path.write_text(yaml.safe_dump({"config": raw}))
    return path


@pytest.mark.parametrize("name, where, message", [
    ("traffic/l.csv", "stacks/traffic/l.csv", None),
    ("traffic/../traffic/l.csv", "stacks/traffic/l.csv", None),
    ("../l.csv", "l.csv", "../l.csv: is outside the stack file's folder ({stacks}); put the file in that folder or "
                          "below it and name it from there"),
    ("link.csv", "l.csv", "link.csv: is outside the stack file's folder ({stacks}); put the file in that folder or "
                          "below it and name it from there"),
])
def test_a_stack_reads_its_lengths_file_from_its_own_folder_and_no_further(tmp_path, name, where, message):
    stacks = tmp_path / "stacks"
    config = _stack_with_lengths(stacks, name)
    (tmp_path / where).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / where).write_text("input_tokens,output_tokens\n900,100\n1100,300\n")
    if name == "link.csv":
        (stacks / "link.csv").symlink_to(tmp_path / "l.csv")
    result = run_cli(["size", "--config", str(config), "--json"], limit_s=20)
    if message is None:
        assert result.exit_code == 0, result.stderr
        assert json.loads(result.stdout)["workload"]["lengths"]["input_tokens"]["max"] == 1100
    else:
        assert (result.exit_code, result.stderr) == (2, f"error: --config {config}: {NS}:workload.lengthsFile: "
                                                        f"{message.format(stacks=stacks)}\n")


def test_a_link_loop_is_one_line(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    result = run_cli(["size", "--lengths", str(tmp_path / "a")], limit_s=10)
    assert (result.exit_code, result.stderr) == (2, f"error: --lengths: {tmp_path / 'a'}: cannot be read (Too many "
                                                    "levels of symbolic links); check the path and its permissions\n")


# -- every new key has its real bounds (round 3) --------------------------------------------------------
@pytest.mark.parametrize("workload, message", [
    ({"qps": 2, "inputTokens": 1000, "outputTokens": 300, "maxModelLen": 1000},
     f"{NS}:workload: maxModelLen: 1,000 is below the longest request planned (1,300 tokens, prompt and output); vLLM "
     "would refuse it. Raise maxModelLen or leave it unset"),
    ({"qps": 2, "inputTokens": {"p50": 800, "p95": 3000, "max": 7000}, "outputTokens": 300, "maxModelLen": 7000},
     f"{NS}:workload: maxModelLen: 7,000 is below the longest request planned (7,300 tokens, prompt and output); vLLM "
     "would refuse it. Raise maxModelLen or leave it unset"),
    ({"qps": 2, "inputTokens": {"p50": 800, "p95": 3000, "max": 7000}, "sharedPrefixTokens": 999_999},
     f"{NS}:workload: sharedPrefixTokens: 999,999 is not below inputTokens.p50 (the median prompt) (800); the shared "
     "prefix is part of each prompt"),
    ({"qps": 2, "inputTokens": 3000, "sharedPrefixTokens": 3000},
     f"{NS}:workload: sharedPrefixTokens: 3,000 is not below inputTokens (3,000); the shared prefix is part of each prompt"),
    ({"qps": 2, "inputTokens": {"p50": "800", "p95": 900, "max": 1000}},
     f"{NS}:workload.inputTokens: p50: Input should be a valid integer"),
    ({"qps": 2, "inputTokens": {"p50": 800, "p95": 900, "max": True}},
     f"{NS}:workload.inputTokens: max: Input should be a valid integer"),
])
def test_lengths_limits_and_prefixes_hold_together(workload, message):
    with pytest.raises(SettingsError) as err:
        settings_from_config("dev", with_overrides(stack_config("dev"), {"workload": workload}))
    assert message in err.value.problems, err.value.problems


def test_a_shared_prefix_is_below_the_shortest_prompt_of_a_lengths_file(tmp_path):
    (tmp_path / "l.csv").write_text("input_tokens,output_tokens\n3000,10\n600,10\n")
    result = run_cli(["size", "--lengths", str(tmp_path / "l.csv"), "--shared-prefix-tokens", "700"])
    assert (result.exit_code, result.stderr) == (2, "error: --lengths and --shared-prefix-tokens: sharedPrefixTokens: "
                                                    "700 is not below the shortest prompt in lengthsFile (600); the "
                                                    "shared prefix is part of each prompt\n")


# -- error lines and standard output (round 3) ----------------------------------------------------------
def test_a_quoted_value_cannot_break_the_error_line_or_reach_the_terminal():
    result = run_cli(["size", "--model", "\x1b[31mred\x1b]0;title\x07\nforged line\u202e"])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "\x1b" not in result.stderr and "\u202e" not in result.stderr
    assert "'\\x1b[31mred\\x1b]0;title\\x07\\nforged line\\u202e'" in result.stderr


class _FailingStream(io.StringIO):
    def __init__(self, err: int):
        super().__init__()
        self.err = err

    def write(self, text):
        raise OSError(self.err, os.strerror(self.err))


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EIO, errno.EPERM, errno.EPIPE])
def test_a_failed_write_to_standard_output_is_one_line(capsys, monkeypatch, err):
    from llmserve.cli import main
    monkeypatch.setattr(sys, "stdout", _FailingStream(err))
    assert main(["size", "--json"]) == 1
    assert capsys.readouterr().err == f"error: cannot write standard output: {os.strerror(err)}\n"


@pytest.mark.parametrize("argv", [["size", "--json"], ["preview", "--stack", "dev"], ["--help"]])
def test_standard_output_on_a_full_device_is_one_line(argv):
    """The real console script onto /dev/full: a write, or the flush at exit, fails with ENOSPC."""
    with open("/dev/full", "w") as full:
        done = subprocess.run([str(LLMSERVE), *argv], stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (1, "error: cannot write standard output: No space left on device\n")


def test_a_terminated_command_keeps_the_previous_output(tmp_path):
    """SIGTERM (a cancelled CI job) mid-run: one line, exit 143, the previous plot as it was, no temporary."""
    plot = tmp_path / "p.png"
    plot.write_bytes(b"previous")
    proc = subprocess.Popen([str(LLMSERVE), "simulate", "--stack", "prod", "--duration", "90000", "--plot", str(plot)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait_for_handler(proc.pid, signal.SIGTERM)
    time.sleep(0.5)                  # into the run (900,000 requests take seconds)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert (proc.returncode, err) == (143, "error: interrupted (SIGTERM); outputs not yet written keep their previous "
                                           "version\n")
    assert plot.read_bytes() == b"previous" and [p.name for p in tmp_path.iterdir()] == ["p.png"]


def _wait_for_handler(pid: int, signum: int, limit_s: float = 30) -> None:
    """Until the process catches `signum` (its SigCgt mask in /proc): sent earlier, it would die of it."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        status = Path(f"/proc/{pid}/status").read_text()
        caught = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
        if caught & (1 << (signum - 1)):
            return
        time.sleep(0.05)
    pytest.fail(f"process {pid} never installed a handler for signal {signum}")


@pytest.mark.parametrize("argv", [["preview", "--stack", "dev"], ["size", "--stack", "dev"]])
def test_an_ascii_locale_prints_what_it_can(monkeypatch, argv):
    """LC_ALL=C with PYTHONUTF8=0 (or PYTHONIOENCODING=ascii): a tree's guide lines come out as `?`, no traceback."""
    from llmserve.cli import main
    raw = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(raw, encoding="ascii"))
    assert main(argv) == 0
    sys.stdout.flush()
    assert raw.getvalue() and raw.getvalue().isascii()


# -- numbers and text the parsers choke on (round 2's leftovers) -----------------------------------------
def _report_with(tmp_path, upstream_file, old: str, new: str) -> Path:
    text = upstream_file("samples/guidellm-report-0.8.0.dev18.json").read_text()
    assert old in text
    path = tmp_path / "report.json"
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize("old, new", [
    ('"model": "', '"model": "\\ud800'),                       # a lone surrogate: unprintable as it stands
    ('"target": "', '"target": "\\udfff\\u001b[2J'),
    ('"total": ', '"total": 1' + "0" * 5000 + ', "_": '),      # int() of 5,000 digits raises
])
def test_a_report_with_a_lone_surrogate_or_a_huge_integer_gets_a_verdict(tmp_path, upstream_file, old, new):
    result = run_cli(["loadtest-report", str(_report_with(tmp_path, upstream_file, old, new)), "--stack", "dev"])
    assert result.exit_code in (1, 2), result.stderr
    assert "\x1b" not in result.stdout + result.stderr


def test_a_huge_integer_in_a_config_json_names_the_field(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "llama", "hidden_size": 1' + "0" * 5000 + "}")
    result = run_cli(["size", "--model-config", str(tmp_path / "config.json")])
    assert (result.exit_code, result.stderr) == (2, "error: --model-config: config.json: hidden_size: expected an "
                                                    "integer, got not a finite number\n")


def test_an_argument_that_is_not_utf8_is_one_line():
    from llmserve.cli import main
    assert main(["size", "--model", "\udcff"]) == 2       # what Python makes of the byte 0xff in argv
