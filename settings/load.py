"""Read stack settings from a `Pulumi.<stack>.yaml` file or from the running program's config.

Errors come back as `SettingsError`: one line per problem, each naming the key
(`llm-serving:gpuPools[1].zone`) and what to do about it.
"""
from __future__ import annotations

import re
from pathlib import Path

import yaml
from pydantic import ValidationError

from sizing.catalog import CatalogError, load_catalog
from sizing.model import Shape, SizingError, check_shape
from sizing.planner import candidate_tps
from sizing.profiles import get_profile

from .schema import ALL_SECRET_KEYS, NAMESPACE, StackSettings

STACKS_DIR = Path(__file__).resolve().parent.parent / "stacks"
REGION_KEY = "aws:region"


class SettingsError(ValueError):
    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


def stack_file(stack: str, stacks_dir: Path = STACKS_DIR) -> Path:
    return stacks_dir / f"Pulumi.{stack}.yaml"


def read_stack_config(path: Path) -> dict:
    """The raw `config:` map of a stack file (namespaced keys, secure values left as they are)."""
    if not path.exists():
        raise SettingsError([f"{path}: no such stack file; create it or pass --config PATH"])
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise SettingsError([f"{path}: not valid YAML ({exc.__class__.__name__}: {exc})"]) from None
    config = doc.get("config")
    if not isinstance(config, dict):
        raise SettingsError([f"{path}: needs a top-level 'config:' map of llm-serving: keys"])
    return config


def settings_from_config(stack: str, config: dict) -> StackSettings:
    """Validate a namespaced config map (as in the stack file) into settings."""
    body: dict = {"stack": stack}
    problems = []
    for key, value in config.items():
        ns, _, name = key.partition(":")
        if key == REGION_KEY:
            body["region"] = value
        elif ns == NAMESPACE:
            if name in ALL_SECRET_KEYS:
                if not (isinstance(value, dict) and "secure" in value):
                    problems.append(f"{key}: must be a secret; set it with "
                                    f"`pulumi config set --secret {name} ...`")
                continue
            body[name] = value
    if "region" not in body:
        problems.append(f"{REGION_KEY}: missing; set the stack's AWS region, e.g. `aws:region: us-east-1`")
        body["region"] = "missing"
    try:
        settings = StackSettings.model_validate(body)
    except ValidationError as exc:
        problems.extend(_pydantic_problems(exc))
        raise SettingsError(problems) from None
    problems.extend(semantic_problems(settings))
    if problems:
        raise SettingsError(problems)
    return settings


def load_stack(stack: str, config_path: Path | None = None) -> StackSettings:
    path = config_path or stack_file(stack)
    return settings_from_config(stack, read_stack_config(path))


# -- checks that span keys -------------------------------------------------------------------
def semantic_problems(s: StackSettings) -> list[str]:
    catalog = load_catalog()
    problems = []
    region = s.region
    region_ok = bool(re.fullmatch(r"[a-z]{2}(-gov)?-[a-z]+-\d", region))
    if not region_ok and region != "missing":     # "missing" is already reported
        problems.append(f"{REGION_KEY}: '{region}' is not an AWS region name; use e.g. us-east-1")
    names = set()
    for i, pool in enumerate(s.gpuPools):
        key = f"{NAMESPACE}:gpuPools[{i}]"
        if region_ok and not (pool.zone.startswith(region) and re.fullmatch(r"[a-z]", pool.zone[len(region):])):
            problems.append(f"{key}.zone: '{pool.zone}' is not a zone of the stack's region {region}; "
                            f"use a zone such as {region}a")
        label = pool.name or pool.zone
        if label in names:
            problems.append(f"{key}: a second pool named '{label}'; give each pool in a zone its own name")
        names.add(label)
        cb = pool.capacityBlock
        if cb and pool.capacityReservationId:
            problems.append(f"{key}: set capacityReservationId or capacityBlock, not both")
        if cb and cb.purchase and not (cb.offeringId and cb.durationHours):
            problems.append(f"{key}.capacityBlock: a purchase needs offeringId and durationHours")
        if cb and cb.purchase and not cb.allowPurchase:
            problems.append(f"{key}.capacityBlock.allowPurchase: a capacity block purchase is non-refundable; "
                            "set allowPurchase: true to confirm it")
        if cb and not cb.id and not cb.purchase:
            problems.append(f"{key}.capacityBlock: give id (a block you hold, cr-...) or purchase: true")
        if cb and cb.id and cb.purchase:
            problems.append(f"{key}.capacityBlock: set id or purchase, not both")
    types = {p.instanceType for p in s.gpuPools}
    if len(types) > 1:
        problems.append(f"{NAMESPACE}:gpuPools: pools mix instance types ({', '.join(sorted(types))}); "
                        "use one instance type for all GPU pools")
        return problems
    instance = catalog.instance(types.pop())
    model = catalog.model(s.model.id)
    profile = get_profile(s.sizing.profile)
    req = s.plan_request()
    tp = s.model.tensorParallel
    if tp is not None:
        if tp > instance.gpus:
            problems.append(f"{NAMESPACE}:model.tensorParallel: {tp} is larger than a {instance.id} node "
                            f"({instance.gpus} GPUs); a TP group never spans nodes, use at most {instance.gpus}")
        elif model.heads % tp:
            problems.append(f"{NAMESPACE}:model.tensorParallel: {tp} does not divide the {model.heads} "
                            f"attention heads of {model.id}; use one of {candidate_tps(model, instance)}")
        else:
            try:
                check_shape(Shape(model, instance, tp, s.model.weights, s.model.kvCacheDtype), req.workload, profile)
            except SizingError as exc:
                problems.append(f"{NAMESPACE}:model: {exc}")
    else:
        fits = []
        for t in candidate_tps(model, instance):
            try:
                check_shape(Shape(model, instance, t, s.model.weights, s.model.kvCacheDtype), req.workload, profile)
                fits.append(t)
            except SizingError:
                pass
        if not fits:
            problems.append(f"{NAMESPACE}:gpuPools: {model.id} with {s.model.weights} weights does not fit on "
                            f"{instance.id} even at TP={instance.gpus}; use a larger instance type or fp8 weights")
    return problems


def _pydantic_problems(exc: ValidationError) -> list[str]:
    out = []
    errors = exc.errors()
    for err in errors:
        loc = [str(p) for p in err["loc"]]
        # A list whose only items failed is also "too short": the item's own error says it all.
        if err["type"] == "too_short" and any(
                len(e["loc"]) > len(err["loc"]) and tuple(e["loc"][:len(err["loc"])]) == tuple(err["loc"])
                for e in errors):
            continue
        if not loc:
            key = NAMESPACE
        else:
            head, rest = loc[0], loc[1:]
            key = REGION_KEY if head == "region" else f"{NAMESPACE}:{head}"
            for part in rest:
                key += f"[{part}]" if part.isdigit() else f".{part}"
        msg = err["msg"]
        ctx_err = (err.get("ctx") or {}).get("error")
        if isinstance(ctx_err, CatalogError):
            msg = str(ctx_err)
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        if err["type"] == "extra_forbidden":
            msg = "unknown key; check its spelling against stacks/README.md"
        elif err["type"] == "missing":
            msg = "required; add it to the stack config"
        out.append(f"{key}: {msg}")
    return out
