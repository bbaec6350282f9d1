"""Every command that reads a stack reports a stack it cannot read the same way: one line,
`error: --stack NAME: ...` (or `--config PATH: ...`), exit code 2, nothing on stdout."""
from __future__ import annotations

import pytest

from llmserve.cli import main
from settings import stack_file

# Every command that reads a stack reads it through offline.stack.load_stack (loadtest-report after
# its report, check after its URL): one loader, one line.
COMMANDS = [["size"], ["preview"], ["preflight"], ["render", "--out", "{tmp}/out"], ["simulate"], ["emulate"], ["twin"],
            ["check", "--prometheus", "http://127.0.0.1:9090"], ["calibrate", "--prometheus", "http://127.0.0.1:9090"],
            ["loadtest-report", "{report}"]]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_missing_stack_file(capsys, tmp_path, upstream_file, command):
    report = upstream_file("samples/guidellm-report-0.8.0.dev18.json") if "{report}" in command else ""
    args = [a.format(tmp=tmp_path, report=report) for a in command] + ["--stack", "nope"]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        f"error: --stack nope: {stack_file('nope')}: no such stack file; create it or pass --config PATH"]
    assert captured.out == ""


@pytest.mark.parametrize("command", [c for c in COMMANDS if c[0] in ("preview", "preflight", "render")],
                         ids=lambda c: c[0])
def test_a_config_file_that_is_not_a_stack_file(capsys, tmp_path, command):
    path = tmp_path / "Pulumi.x.yaml"
    path.write_text("just: text\n")
    args = [a.format(tmp=tmp_path) for a in command] + ["--stack", "x", "--config", str(path)]
    assert main(args) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: --config {path}: needs a top-level 'config:' map of llm-serving: keys"]


def test_a_component_refusing_the_config_is_one_line_too(capsys, monkeypatch):
    """Settings and plan pass, a component raises while the program builds: its message, on one line."""
    import offline.engine

    def refuse(stack, raw):
        raise ValueError("g6e.48xlarge does not support EFA\nset efa: false for pool us-east-1a-g6e")
    monkeypatch.setattr(offline.engine, "run_program", refuse)
    assert main(["preview", "--stack", "prod"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: --stack prod: g6e.48xlarge does not support EFA; set efa: false for pool us-east-1a-g6e"]
