"""The four real-server twin runs tests/test_twin.py judges, played in the background.

A twin spends nearly all of its wall time waiting: for Prometheus to hand its targets to the
scrapers (about 5 s), then for the twin's clock to reach the instant a test reads (8 to 16 s at
100 simulated seconds per wall second). Played when their tests came up, the four runs kept one
test worker asleep for about 70 s of an otherwise CPU-bound suite. So the session starts them
at its first test, in one background process (`started`, from the session fixture `twin_runs`
in tests/conftest.py; under pytest-xdist the first worker to claim the session's shared folder
starts it), one run after another; a test's fixture waits for its run's result (`Runs.result`)
in whichever worker the test lands. The runs are the same as when each test played its own.

The twins with a server killed part-way (tests/test_twin_fail_closed.py, played by
tests/twin_kills.py) are a second lane: another background process, started beside the first,
so their five short runs (about 35 s in all, nearly all of it waiting) overlap the rest too.

`python -m tests.twin_runs FOLDER LANE NAME...` plays the named runs in that order and writes
FOLDER/NAME.json as each ends (FOLDER/NAME.error, with the traceback, if it raised), and
FOLDER/LANE.ended when it stops.
"""
from __future__ import annotations

import dataclasses
import io
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCALE = "100"              # simulated seconds per wall second
CHECK_AT_S = 800           # simulated: when check and calibrate read the twin
WINDOW = "6s"              # wall: 600 simulated seconds at SCALE
SLOWDOWN = 1.2
WAIT_S = 600.0             # the longest a test waits for its run (the four take about 90 s; the lanes overlap)
POLL_S = 0.2
ENDED = ".ended"           # FOLDER/LANE.ended: written by a lane's runner when it stops, however it stops


def run_cli(*argv: str) -> tuple[int, str, str]:
    from llmserve.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def twin_json(*argv: str) -> dict:
    code, out, err = run_cli("twin", "--stack", "prod", "--time-scale", SCALE, "--json", *argv)
    assert code == 0, out + err
    return json.loads(out)


def against_twin(slowdown: float, profiles: Path) -> dict:
    """`check` and `calibrate` against a live twin of prod at the planned load, read at
    CHECK_AT_S, and the alerts it sent."""
    from tests.stacks import plan_for
    from twin.scenario import Twin

    settings, plan = plan_for("prod")
    with Twin(plan, settings.serving.namespace, duration_s=1200, scale=float(SCALE), slowdown=slowdown) as twin:
        twin.wait_until(CHECK_AT_S)
        url = twin.prometheus_url
        check = run_cli("check", "--stack", "prod", "--prometheus", url, "--window", WINDOW)
        calibrate = run_cli("calibrate", "--stack", "prod", "--prometheus", url, "--window", WINDOW,
                            "--name", "fleet-test", "--profiles-file", str(profiles), "--json")
        alerts = [dataclasses.asdict(event) for event in twin.alert_events()]
    return {"check": check, "calibrate": calibrate, "alerts": alerts, "url": url}


def profiles_copy(folder: Path) -> Path:
    """calibrate writes here, not into the project's profiles."""
    from sizing.catalog import DATA_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "profiles.yaml"
    path.write_text((DATA_DIR / "profiles.yaml").read_text())
    return path


# -- the runs ----------------------------------------------------------------------------------
def zone_loss(folder: Path) -> dict:
    return twin_json("--fail-zone", "us-east-1b@300:900")


def past_capacity(folder: Path) -> dict:
    from tests.stacks import plan_for
    _, plan = plan_for("prod")
    return twin_json("--qps", str(round(1.25 * plan.capacity_qps, 1)), "--duration", "1200")


def as_planned(folder: Path) -> dict:
    return against_twin(1.0, profiles_copy(folder / "planned"))


def slower(folder: Path) -> dict:
    path = profiles_copy(folder / "slower")
    return {**against_twin(SLOWDOWN, path), "profiles": str(path)}


def killed(server: str, sig, phase: str):
    """`llmserve twin` with its `server` sent `sig` at `phase` (tests/twin_kills.py): what it
    printed, the pid signalled, and whether that server was gone once the run had ended."""
    def play_it(folder: Path) -> dict:
        from tests.twin_kills import no_server_left, twin_with_a_signalled_server
        started = time.monotonic()
        result, pid = twin_with_a_signalled_server(server, sig, phase)
        return {"exit_code": result.exit_code, "stdout": result.stdout, "stderr": result.stderr, "pid": pid,
                "gone": pid is not None and no_server_left(pid), "wall_s": round(time.monotonic() - started, 1)}
    return play_it


def killed_name(server: str, sig, phase: str) -> str:
    return f"killed_{server}_{sig.name}_{phase}"


def _killed_runs() -> dict:
    from tests.twin_kills import FIXED
    return {killed_name(*case): killed(*case) for case in FIXED}


# lane -> (the fixture that reads its runs, its runs in play order). A lane's runs play one after
# another in one background process; the lanes play side by side.
LANES = {
    "servers": (None, {"zone_loss": zone_loss, "past_capacity": past_capacity, "as_planned": as_planned,
                       "slower": slower}),
    "killed": ("killed_run", _killed_runs()),
}
RUNS = {name: run for _, runs in LANES.values() for name, run in runs.items()}


def lane_of(name: str) -> str:
    return next(lane for lane, (_, runs) in LANES.items() if name in runs)


def needed(items) -> list[str]:
    """The runs the selected tests use (by fixture name: a run's own, or its lane's), in the order above."""
    used = {name for item in items for name in getattr(item, "fixturenames", ())}
    return [name for fixture, runs in LANES.values() for name in runs if name in used or fixture in used]


# -- the background process and its readers ----------------------------------------------------
def _write(path: Path, text: str) -> None:
    """Whole or not at all: a reader polling for `path` never sees half of it."""
    part = path.with_name(path.name + ".part")
    part.write_text(text)
    os.replace(part, path)


def play(folder: Path, lane: str, names: list[str]) -> None:
    try:
        for name in names:
            try:
                _write(folder / f"{name}.json", json.dumps(RUNS[name](folder)))
            except Exception:               # the test that reads this run fails with it
                _write(folder / f"{name}.error", traceback.format_exc())
    finally:
        _write(folder / f"{lane}{ENDED}", "")


class Runs:
    """The session's runs, read from the shared folder by any worker."""

    def __init__(self, folder: Path):
        self.folder = folder

    def result(self, name: str) -> dict:
        deadline = time.monotonic() + WAIT_S
        done, failed = self.folder / f"{name}.json", self.folder / f"{name}.error"
        lane = lane_of(name)
        while time.monotonic() < deadline:
            ended = (self.folder / f"{lane}{ENDED}").exists()   # before looking for the result: it is written last
            if done.exists():
                return json.loads(done.read_text())
            if failed.exists():
                pytest.fail(f"twin run {name} failed:\n{failed.read_text()}", pytrace=False)
            if ended:
                pytest.fail(f"twin run {name} was not played: {self._log(lane)}", pytrace=False)
            time.sleep(POLL_S)
        pytest.fail(f"twin run {name} did not end within {WAIT_S:g} s: {self._log(lane)}", pytrace=False)

    def _log(self, lane: str) -> str:
        log = self.folder / f"runner-{lane}.log"
        return log.read_text(errors="replace")[-2000:] if log.exists() else "(no runner log)"


@contextmanager
def started(folder: Path, names: list[str], stop_early=lambda: False):
    """Start the runs `names` in the background, one process per lane, unless another process of
    this session already has; on exit wait for them (other workers may still read them), or stop
    them at once if `stop_early()` holds (the session is stopping on a failure)."""
    from twin.lifecycle import spawn

    folder.mkdir(parents=True, exist_ok=True)
    procs = []
    if names:
        try:
            os.close(os.open(folder / "claimed", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            pass
        else:
            for lane in LANES:
                mine = [name for name in names if lane_of(name) == lane]
                if mine:
                    procs.append(spawn([sys.executable, "-m", "tests.twin_runs", str(folder), lane, *mine],
                                       folder / f"runner-{lane}.log", ROOT))
    try:
        yield Runs(folder)
    finally:
        _wait_or_stop(procs, stop_early)


def _wait_or_stop(procs: list, stop_early) -> None:
    from twin.lifecycle import stop
    deadline = time.monotonic() + WAIT_S
    for proc in procs:
        try:
            if stop_early():
                raise subprocess.TimeoutExpired(proc.args, 0)
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            stop(proc)


def _stop_on_term(signum, frame):
    raise SystemExit(128 + signum)      # a `with Twin` block then closes its servers


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _stop_on_term)
    play(Path(sys.argv[1]), sys.argv[2], sys.argv[3:])
