"""Benchmark: `llmserve emulate` against `llmserve simulate`, the acceptance check of issue 31.

    .venv/bin/python bench/bench_emulate.py [--stack prod] [--duration 40] [--seed 0]

Starts `llmserve emulate --stack STACK --port 0` as its own process, replays on it the requests
`simulate` draws for the same stack, duration and seed (Poisson arrivals at the plan's rate, the
plan's lengths: `simulator.workload.generate`), each a streamed completion on its own connection
(`emulator.client`, the standard library), and compares the client's mean TTFT and TPOT with the
simulation's. Target: both within 25%. Also prints the server's CPU time per token streamed
(its /proc/<pid>/stat over the run, start-up excluded) and the client's, and the rate one core
could drive at that cost. tests/test_emulate.py runs the same for a shorter time.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET = 0.25
LLMSERVE = Path(sys.executable).parent / "llmserve"


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a running process (Linux: /proc/<pid>/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_server(stack: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([str(LLMSERVE), "emulate", "--stack", stack, "--port", "0"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    found = re.search(r"http://127\.0\.0\.1:(\d+)", line)
    if not found:
        proc.kill()
        raise SystemExit(f"emulate did not start: {line}{proc.stderr.read()}")
    return proc, int(found.group(1))


def measure(stack: str, duration_s: float, seed: int = 0) -> dict:
    """Emulated and simulated mean TTFT and TPOT (ms) for the same requests, and CPU per token."""
    from emulator.client import means_ms, replay
    from settings import stack_settings
    from simulator import config_from_plan, simulate, summarize
    from simulator.workload import generate
    from sizing.planner import plan

    p = plan(stack_settings(stack).plan_request())
    cfg = config_from_plan(p, duration_s, seed=seed)
    simulated = summarize(simulate(cfg).requests, cfg.ttft_slo_s, cfg.tpot_slo_s)
    requests = [(r.arrival, r.prompt, r.out) for r in generate(cfg.workload)]
    proc, port = start_server(stack)
    try:
        server_cpu, client_cpu = cpu_s(proc.pid), time.process_time()
        timings = asyncio.run(replay(port, requests))
        server_cpu, client_cpu = cpu_s(proc.pid) - server_cpu, time.process_time() - client_cpu
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    tokens = sum(t.tokens for t in timings)
    return {"stack": stack, "duration_s": duration_s, "qps": cfg.workload.qps, "emulated": means_ms(timings),
            "simulated": {"ttft_ms": simulated["ttft_ms"]["mean"], "tpot_ms": simulated["tpot_ms"]["mean"],
                          "requests": simulated["requests"]},
            "tokens": tokens, "server_us_per_token": 1e6 * server_cpu / max(1, tokens),
            "client_us_per_token": 1e6 * client_cpu / max(1, tokens), "exit_code": proc.returncode}


def errors(result: dict) -> dict[str, float]:
    return {k: result["emulated"][k] / result["simulated"][k] - 1 for k in ("ttft_ms", "tpot_ms")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", default="prod")
    parser.add_argument("--duration", type=float, default=40.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    r = measure(args.stack, args.duration, args.seed)
    e, em, sim = errors(r), r["emulated"], r["simulated"]
    ok = em["failed"] == 0 and all(abs(v) <= TARGET for v in e.values())
    per_output = 1e6 / r["server_us_per_token"] if r["server_us_per_token"] else float("inf")
    print(f"emulate vs simulate, stack {r['stack']}, {r['qps']:g} QPS for {r['duration_s']:g} s: "
          f"{em['requests']} requests ({em['failed']} failed), mean TTFT {em['ttft_ms']:.1f} / {sim['ttft_ms']:.1f} ms "
          f"({100 * e['ttft_ms']:+.1f}%), mean TPOT {em['tpot_ms']:.2f} / {sim['tpot_ms']:.2f} ms "
          f"({100 * e['tpot_ms']:+.1f}%) (target within {100 * TARGET:g}%): {'PASS' if ok else 'FAIL'}")
    print(f"CPU per token streamed: server {r['server_us_per_token']:.1f} us, client {r['client_us_per_token']:.1f} us "
          f"({r['tokens']:,} tokens): one core serves about {per_output:,.0f} tokens/s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
