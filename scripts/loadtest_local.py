"""The load test end to end on this machine, with no GPU: `make loadtest-local` (opt-in, not CI).

1. GuideLLM 0.8.1 (the Job's pinned version) in its own virtualenv, `.venv-guidellm` (about 6 GB:
   it brings torch), and a tiny word-level tokenizer built offline (`.loadtest-local/tokenizer`);
2. `llmserve emulate --stack STACK` (the plan's fleet in real time), then GuideLLM with the Job's
   own scenario (deployment.jobs.scenario) and its own environment (one worker process), adapted
   only in target, step length and tokenizer; then `llmserve loadtest-report`, which must say the
   plan holds (exit 0);
3. the same against the fleet slowed 30% (`emulate --slowdown 1.3`): the report must say it does
   not hold (exit 1).
Exit 0 when both verdicts are the expected ones. Usage:
    .venv/bin/python scripts/loadtest_local.py [--stack prod] [--step-seconds 40] [--slowdown 1.3]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
GUIDELLM_VENV = ROOT / ".venv-guidellm"
WORK = ROOT / ".loadtest-local"
GUIDELLM = "guidellm==0.8.1"       # conventions.GUIDELLM_IMAGE's version
LLMSERVE = ROOT / ".venv" / "bin" / "llmserve"
# A byte-level BPE trained on the text GuideLLM's synthetic prompts are cut from (Faker's, seeded), to
# 1,950 tokens: about 4.0 characters a token on that text, which is the emulator's count (one token per
# 4 characters, docs/proving.md), so a 1,000-token prompt reaches the emulated engine as ~1,000 tokens.
# Byte-level: no word is unknown (an <unk> would be dropped from the decoded prompt).
TOKENIZER_SCRIPT = """
import sys
from faker import Faker
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast
fake = Faker()
Faker.seed(0)
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator([fake.text(max_nb_chars=2000) for _ in range(1500)],
                        trainers.BpeTrainer(vocab_size=1950, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                            show_progress=False))
fast = PreTrainedTokenizerFast(tokenizer_object=tok)
Faker.seed(1)
text = fake.text(max_nb_chars=50000)
print(f"tokenizer: {len(text) / len(fast.encode(text)):.2f} characters a token")
fast.save_pretrained(sys.argv[1])
"""


def guidellm() -> Path:
    """GuideLLM 0.8.1 in its own virtualenv (its dependencies would not fit the project's pins)."""
    exe = GUIDELLM_VENV / "bin" / "guidellm"
    if not exe.exists():
        subprocess.run([sys.executable, "-m", "venv", str(GUIDELLM_VENV)], check=True)
        subprocess.run([str(GUIDELLM_VENV / "bin" / "pip"), "install", "-q", GUIDELLM], check=True)
    return exe


def tokenizer() -> Path:
    """A tokenizer made offline (TOKENIZER_SCRIPT): GuideLLM needs one to cut prompts of the planned lengths."""
    folder = WORK / "tokenizer"
    if not (folder / "tokenizer.json").exists():
        subprocess.run([str(GUIDELLM_VENV / "bin" / "python"), "-c", TOKENIZER_SCRIPT, str(folder)], check=True)
    return folder


def local_scenario(stack: str, port: int, step_s: int, tok: Path, out: Path) -> dict:
    """The Job's scenario, with the target, the step length and the tokenizer changed."""
    from deployment.jobs import LoadTestRun, scenario
    from offline.stack import load_stack
    loaded = load_stack(stack)
    settings = loaded.settings
    run = LoadTestRun.for_stack(loaded.plan, settings)
    run = LoadTestRun(**{**run.__dict__, "load_test": settings.loadTest.model_copy(update={"stepSeconds": step_s}),
                         "checkpoint": str(tok)})
    doc = scenario(loaded.plan, run)
    doc["spec"]["backend"]["target"] = f"http://127.0.0.1:{port}"
    doc["spec"]["outputs"] = [{"kind": "json", "path": str(out)}]
    return doc


def start_emulator(stack: str, slowdown: float) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([str(LLMSERVE), "emulate", "--stack", stack, "--port", "0", "--slowdown", str(slowdown)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = proc.stdout.readline()
    match = re.search(r"http://127\.0\.0\.1:(\d+)", line)
    if not match:
        proc.kill()
        sys.exit(f"loadtest-local: emulate did not start: {line.strip()}")
    port = int(match.group(1))
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).close()
            return proc, port
        except OSError:
            time.sleep(0.1)
    proc.kill()
    sys.exit("loadtest-local: emulate never answered /health")


def one_case(args, slowdown: float, exe: Path, tok: Path) -> tuple[int, dict]:
    """emulate, GuideLLM, loadtest-report: the report's exit code and its JSON."""
    name = "healthy" if slowdown == 1.0 else f"slowed-{slowdown:g}"
    out = WORK / f"{name}.json"
    proc, port = start_emulator(args.stack, slowdown)
    try:
        path = WORK / f"scenario-{name}.json"
        path.write_text(json.dumps(local_scenario(args.stack, port, args.step_seconds, tok, out), indent=1))
        from deployment.jobs import CLIENT_PROCESSES
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "GUIDELLM__MAX_WORKER_PROCESSES": str(CLIENT_PROCESSES),
               "GUIDELLM__SPEC__BACKEND__API_KEY": "local"}
        print(f"== {name}: GuideLLM against emulate on port {port} ({args.step_seconds} s steps)", flush=True)
        subprocess.run([str(exe), "run", "--scenario", str(path), "--disable-console-interactive"], env=env,
                       check=True, stdout=subprocess.DEVNULL)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    report = subprocess.run([str(LLMSERVE), "loadtest-report", str(out), "--stack", args.stack, "--json"],
                            capture_output=True, text=True)
    shown = subprocess.run([str(LLMSERVE), "loadtest-report", str(out), "--stack", args.stack],
                           capture_output=True, text=True)
    print(shown.stdout + shown.stderr)
    return report.returncode, json.loads(report.stdout) if report.stdout.strip() else {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", default="prod")
    parser.add_argument("--step-seconds", type=int, default=40)
    parser.add_argument("--slowdown", type=float, default=1.3)
    args = parser.parse_args()
    WORK.mkdir(exist_ok=True)
    exe = guidellm()
    tok = tokenizer()
    healthy, _ = one_case(args, 1.0, exe, tok)
    slowed, _ = one_case(args, args.slowdown, exe, tok)
    ok = healthy == 0 and slowed == 1
    print(f"loadtest-local: healthy fleet exit {healthy} (expected 0), slowed {args.slowdown:g}x exit {slowed} "
          f"(expected 1): {'as expected' if ok else 'NOT as expected'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
