"""Does each accuracy-gate task fit the served context? lm-eval asks for a task's generated
tokens after its longest few-shot prompt; vLLM refuses (400) a request past max_model_len, and the
gate Job would fail after every other resource is up. Figures: data/lm_eval_tasks.yaml."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml

TASKS_YAML = Path(__file__).parent / "data" / "lm_eval_tasks.yaml"


@lru_cache(maxsize=1)
def _tasks_file() -> dict:
    """The shipped task figures: {lm_eval_version, tasks: {task: {generated_tokens,
    longest_prompt_tokens, num_fewshot, source}}}. Shipped data, read as the catalog is: libyaml's
    parser (PyYAML's pure-Python one took ten times as long, 5 ms of `size`), the same safe constructor."""
    return yaml.load(TASKS_YAML.read_text(), Loader=yaml.CSafeLoader)


def gate_fit_problems(tasks: tuple[str, ...], max_model_len: int, key: str) -> list[str]:
    """One line per task that cannot fit max_model_len, naming both numbers."""
    out, doc = [], _tasks_file()
    for task in tasks:
        gen, prompt = doc["tasks"][task]["generated_tokens"], doc["tasks"][task]["longest_prompt_tokens"]
        if gen + prompt > max_model_len:
            out.append(f"{key}: {task} asks for {gen:,} generated tokens after prompts of up to {prompt:,} "
                       f"({gen + prompt:,} in all, lm-eval {doc['lm_eval_version']}), above the served "
                       f"max_model_len of {max_model_len:,}; raise workload.maxModelLen to at least {gen + prompt:,} "
                       "or drop the task")
    return out
