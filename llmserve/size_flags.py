"""`llmserve size`'s flags as settings keys: one table (`FLAGS`), flag -> the `llm-serving:` key
it fills in the same `settings.PlanRequestSettings` a stack file fills, and the way back: a
problem with a key is reported under the flag the user typed, else under the stack key.

So a bad value meets one rule with one message, from a flag or from a stack file; only the name
in front differs (`--qps: ...` or `--stack prod: llm-serving:workload.qps: ...`). To add a flag,
declare the typer option in size_cmd.py and add its row here.
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any, Callable

ZONE_NAME = re.compile(r"[a-z]{2}(-gov)?-[a-z]+-\d[a-z]")
MAX_ZONE_COUNT = 6


def _set(body: dict, key: str, value: Any) -> None:
    *parents, leaf = key.split(".")
    for part in parents:
        body = body.setdefault(part, {})
    body[leaf] = value


def _pools_by_zone(body: dict) -> list[dict]:
    """One pool per zone of the request (a pool flag sizes zones, not the stack's named pools)."""
    nodes: dict[str, int] = {}
    for p in body["gpuPools"]:
        nodes[p["zone"]] = nodes.get(p["zone"], 0) + p.get("nodes", 1)
    kind = {k: v for k, v in body["gpuPools"][0].items() if k == "instanceType"}   # absent: the default
    body["gpuPools"] = [{"zone": z, "nodes": n, **kind} for z, n in nodes.items()]
    return body["gpuPools"]


def _each_pool(body: dict, key: str, value: Any) -> None:
    for pool in _pools_by_zone(body):
        pool[key.rpartition(".")[2]] = value


def _gpu(body: dict, key: str, value: str) -> None:
    from sizing.catalog import load_catalog
    _each_pool(body, key, load_catalog().node_for_gpu(value).id)    # an unknown GPU: CatalogError


def _zones(body: dict, key: str, value: str) -> None:
    """A count (that many zones of the request's region) or zone names."""
    region = body["region"]
    if value.isdigit():
        if not 1 <= int(value) <= MAX_ZONE_COUNT:
            raise ValueError(f"give 1 to {MAX_ZONE_COUNT} zones (got {value})")
        names = [f"{region}{chr(ord('a') + i)}" for i in range(int(value))]
    else:
        names = [z.strip() for z in value.split(",") if z.strip()]
        if not names:
            raise ValueError("give a count (2) or zone names (us-east-1a,us-east-1b)")
    pools = _pools_by_zone(body)
    per_zone = {p["zone"]: p["nodes"] for p in pools}
    kind = {k: v for k, v in pools[0].items() if k == "instanceType"}
    body["gpuPools"] = [{"zone": z, "nodes": per_zone.get(z, 1), **kind} for z in names]


# ASCII digits (`\d` takes any script's), at most 12: int() of 5,000 digits raises, and the settings
# bound a length far below 10^12 anyway.
NUMBER = re.compile(r"-?[0-9]{1,12}")


def _length(body: dict, key: str, value: str) -> None:
    """`1000` (every request alike) or `p50=800,p95=3000,max=7000` (percentiles), as the stack
    key's number or map: the settings judge the values, with the stack's messages."""
    text = value.strip()
    if re.fullmatch(NUMBER, text):
        _set(body, key, int(text))
        return
    parts = dict(p.partition("=")[::2] for p in text.split(","))
    if set(parts) != {"p50", "p95", "max"} or not all(re.fullmatch(NUMBER, v.strip()) for v in parts.values()):
        raise ValueError(f"expected a number of tokens (1000) or p50=N,p95=N,max=N (got {text[:60]!r})")
    _set(body, key, {k: int(v) for k, v in parts.items()})


def _lengths_file(body: dict, key: str, value) -> None:
    """Observed lengths replace the stack's numbers; the path is the user's, from where they are
    (made absolute, links left for the reader to follow: a link loop is its one-line error)."""
    import os
    for field in ("inputTokens", "outputTokens"):
        body.get("workload", {}).pop(field, None)
    _set(body, key, os.path.abspath(value))


@dataclass(frozen=True)
class Flag:
    key: str                                      # the llm-serving: key (gpuPools.x: every pool's x)
    apply: Callable[[dict, str, Any], None] = _set
    replaces: tuple[str, ...] = ()                # keys of the stack's a given flag clears first


LOAD = ("workload.qps", "workload.concurrency")   # a load flag replaces the stack's load, open or closed
# How a flag fills its key, where it does more than set it (settings.schema.REQUEST_TABLE names the key).
APPLY: dict[str, Flag] = {
    "--qps": Flag("workload.qps", replaces=LOAD),
    "--concurrency": Flag("workload.concurrency", replaces=LOAD),
    "--lengths": Flag("workload.lengthsFile", _lengths_file),
    "--input-tokens": Flag("workload.inputTokens", _length, replaces=("workload.lengthsFile",)),
    "--output-tokens": Flag("workload.outputTokens", _length, replaces=("workload.lengthsFile",)),
}
# The pool flags lay out `gpuPools` (the request's `pools`): --zones first (it lays out the
# pools), --instance after --gpu (it wins).
POOL_FLAGS: dict[str, Flag] = {
    "--zones": Flag("gpuPools.zone", _zones),
    "--gpu": Flag("gpuPools.instanceType", _gpu),
    "--instance": Flag("gpuPools.instanceType", _each_pool),
    "--nodes-per-zone": Flag("gpuPools.nodes", _each_pool),
}


def _flags() -> dict[str, Flag]:
    """Every request flag, in the order they apply: the request table's, then the pool flags."""
    from settings.schema import REQUEST_TABLE
    table = {row.flag: APPLY.get(row.flag, Flag(row.key)) for row in REQUEST_TABLE if row.flag}
    return {**table, **POOL_FLAGS}


FLAGS: dict[str, Flag] = _flags()


def request_body(base: dict, given: dict[str, Any], reference: bool) -> tuple[dict, list[str]]:
    """The base request's settings keys with the given flags applied, and the problems of flags
    that do not parse (each naming its flag)."""
    body = copy.deepcopy(base)
    for flag in given:
        for key in FLAGS[flag].replaces:
            _set(body, key, None)
    problems = []
    for flag, spec in FLAGS.items():
        if flag in given:
            try:
                spec.apply(body, spec.key, given[flag])
            except ValueError as exc:       # CatalogError included
                problems.append(f"{flag}: {exc}")
    zone = body["gpuPools"][0]["zone"]
    if reference and "--zones" in given and ZONE_NAME.fullmatch(zone):
        body["region"] = zone[:-1]          # no stack: the zones named say the region
    return body, problems


def named(problem: str, given: dict[str, Any], source: str | None) -> str:
    """A settings problem (`llm-serving:<key>: message`) under the flag the user typed for that
    key, else under the stack key, after its source (`--stack NAME: llm-serving:<key>: ...`).
    Without a stack the flag is the only way to the value, so it is named even when left at its
    default."""
    from conventions import PROJECT

    head, _, message = problem.partition(": ")
    key = re.sub(r"\[\d+\]", "", head.removeprefix(f"{PROJECT}:")) if head.startswith(PROJECT) else None
    flags = [f for f in given if FLAGS[f].key == key] or [
        f for f in given if key and (FLAGS[f].key.startswith(f"{key}.") or key.startswith(f"{FLAGS[f].key}."))]
    if not flags and source is None:
        flags = [f for f, spec in FLAGS.items() if spec.key == key][:1]
    if flags:
        return f"{' and '.join(flags)}: {message}"
    return f"{source}: {problem}" if source is not None else problem
