"""Does each accuracy-gate task fit the served context? lm-eval asks for a task's generated
tokens after its longest few-shot prompt; vLLM refuses (400) a request past max_model_len, and the
gate Job would fail after every other resource is up. Figures: data/lm_eval_tasks.yaml."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml

TASKS_YAML = Path(__file__).parent / "data" / "lm_eval_tasks.yaml"


@lru_cache(maxsize=1)
def task_needs() -> dict[str, dict]:
    """task -> {generated_tokens, longest_prompt_tokens, num_fewshot, source}."""
    return yaml.safe_load(TASKS_YAML.read_text())["tasks"]


def tokens_needed(task: str) -> tuple[int, int]:
    """(generated tokens, longest few-shot prompt tokens) of one task."""
    t = task_needs()[task]
    return t["generated_tokens"], t["longest_prompt_tokens"]


def gate_fit_problems(tasks: tuple[str, ...], max_model_len: int, key: str) -> list[str]:
    """One line per task that cannot fit max_model_len, naming both numbers."""
    out = []
    for task in tasks:
        gen, prompt = tokens_needed(task)
        if gen + prompt > max_model_len:
            out.append(f"{key}: {task} asks for {gen:,} generated tokens after prompts of up to {prompt:,} "
                       f"({gen + prompt:,} in all, lm-eval {_version()}), above the served "
                       f"max_model_len of {max_model_len:,}; raise workload.maxModelLen to at least {gen + prompt:,} "
                       "or drop the task")
    return out


@lru_cache(maxsize=1)
def _version() -> str:
    return str(yaml.safe_load(TASKS_YAML.read_text())["lm_eval_version"])
