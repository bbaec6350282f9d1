"""The accuracy gate's run: wait for the gateway, load the tokenizer, run lm-eval, judge its scores.

This file runs as it is inside the gate's Job (shipped in a ConfigMap, standard library only) and is
imported by the tests, so what is tested is what runs:

    python gate_runner.py RUN_JSON

RUN_JSON (deployment.jobs.gate_run): {"gateway_url", "ready_wait_s", "key_file", "work", "tokenizer",
"lm_eval": [argv], "check": [argv]}. No shell: every value reaches lm-eval as one argv element, read
from that file, so nothing in the stack (a model name, a hostname) is ever parsed by a shell.

Exit codes: lm-eval's or accuracy_check.py's own (0 pass, 1 a task below its baseline); 2 the
gateway never answered; 3 the tokenizer cannot be read (a gated or private hub repository: the gate
reads it with the stack's `hubToken`, mounted as a file for huggingface_hub's HF_TOKEN_PATH). The
reason goes to stdout and to the container's termination message, where `kubectl describe` shows it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request

TERMINATION_LOG = "/dev/termination-log"
GATEWAY_DOWN, TOKENIZER_UNREADABLE = 2, 3
# transformers 5.24.0 `utils/hub.py` `cached_files` wraps huggingface_hub's errors in an OSError
# (L566-574 for a missing or private repository, L605-612 for a gated one), the original as its
# __cause__: the gate names the case from the cause's class, never from a message.
HUB_NO_ACCESS = {"GatedRepoError": "a gated hub repository", "RepositoryNotFoundError": "a private or missing hub repository"}


def say(line: str) -> None:
    print(line, flush=True)
    try:
        with open(TERMINATION_LOG, "a") as log:
            log.write(line + "\n")
    except OSError:
        pass                    # outside Kubernetes: stdout only


def wait_for_gateway(url: str, wait_s: float, key: str) -> bool:
    """Until the gateway answers /v1/models with its real certificate and accepts the key."""
    deadline = time.time() + wait_s
    request = urllib.request.Request(url + "/v1/models", headers={"Authorization": "Bearer " + key})
    while True:
        try:
            urllib.request.urlopen(request, timeout=10).read()
            return True
        except Exception as exc:           # noqa: BLE001 (any failure means: not ready yet)
            if time.time() > deadline:
                say(f"gateway not ready at {url}/v1/models after {wait_s:g} s ({type(exc).__name__})")
                return False
            time.sleep(10)


def tokenizer_problem(tokenizer: str) -> str | None:
    """Why the served model's tokenizer cannot be loaded (None when it can)."""
    try:
        from transformers import AutoTokenizer
        AutoTokenizer.from_pretrained(tokenizer)
        return None
    except Exception as exc:               # noqa: BLE001 (named below, the message never quoted)
        causes, cause = [], exc
        while cause is not None:
            causes.append(type(cause).__name__)
            cause = cause.__cause__
        kind = next((HUB_NO_ACCESS[c] for c in causes if c in HUB_NO_ACCESS), None)
        if kind:
            return (f"the tokenizer {tokenizer} is in {kind} the gate cannot read: set hubToken "
                    "(`pulumi config set --secret hubToken <token>`) to a token with access to it, then `pulumi up`")
        return f"the tokenizer {tokenizer} cannot be loaded ({' <- '.join(causes)})"


def main(argv: list[str]) -> int:
    with open(argv[1]) as f:
        run = json.load(f)
    with open(run["key_file"]) as f:
        key = f.read().strip()
    if not wait_for_gateway(run["gateway_url"], run["ready_wait_s"], key):
        return GATEWAY_DOWN
    py = os.path.join(run["work"], "py")
    sys.path.insert(0, py)                 # lm-eval and transformers, installed by the init container
    problem = tokenizer_problem(run["tokenizer"])
    if problem:
        say(problem)
        return TOKENIZER_UNREADABLE
    env = {**os.environ, "PYTHONPATH": py, "PATH": os.path.join(py, "bin") + os.pathsep + os.environ.get("PATH", "")}
    # lm-eval's local-completions reads its Bearer key from OPENAI_API_KEY: set for lm-eval's process
    # alone, from the mounted file, so the key is in no pod spec and no other process.
    code = subprocess.run(run["lm_eval"], env={**env, "OPENAI_API_KEY": key}).returncode
    if code:
        say(f"lm-eval exited {code}")
        return code
    return subprocess.run(run["check"], env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv))
