"""Read stack settings from a `Pulumi.<stack>.yaml` file or from the running program's config.

Errors come back as `SettingsError`: one line per problem, each naming the key
(`llm-serving:gpuPools[1].zone`) and what to do about it.
"""
from __future__ import annotations

import difflib
import json
import math
import os
import re
from pathlib import Path

from pydantic import ValidationError

from conventions import PROJECT, ZONE_LETTERS
from inputs import InputError, safe_yaml
from inputs.files import check_path_length, file_in_folder, read_text
from sizing.catalog import CatalogError, load_catalog, resolve_model
from sizing.checks import MAX_NODES_PER_REPLICA, candidate_tps, check_shape
from sizing.memory import Shape
from sizing.profiles import get_profile
from sizing.workload import SizingError

from .accuracy_fit import gate_fit_problems
from .names import AWS_REGIONS, region as valid_region, role_key, stack_name_problems
from .schema import ALL_SECRET_KEYS, MAX_API_KEYS, REQUEST_KEYS, PlanRequestSettings, StackSettings, _Strict

STACKS_DIR = Path(__file__).resolve().parent.parent / "stacks"
# Where `--stack NAME` finds Pulumi.NAME.yaml: the checkout's stacks/ (Pulumi.yaml's stackConfigDir),
# or the folder LLM_SERVING_STACKS names. The test suite points it at its own fixtures, so the values
# a real deploy writes into stacks/ never reach a test (tests/test_user_stacks.py checks stacks/ itself).
STACKS_ENV = "LLM_SERVING_STACKS"
REGION_KEY = "aws:region"
STACK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")    # Pulumi's stack name characters
MAX_STACK_FILE_BYTES = 1_000_000
# The accuracy gate's key takes what the tenants' quotas leave: at least 5% of the capacity after a loss.
MAX_TENANT_SHARE_WITH_GATE = 0.95
MAX_DEPTH = 20           # deeper than any stack file needs; bounds recursion over hostile input


class SettingsError(ValueError):
    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


def stacks_dir() -> Path:
    return Path(os.environ.get(STACKS_ENV) or STACKS_DIR)


def stack_file(stack: str, folder: Path | None = None) -> Path:
    if not STACK_NAME.fullmatch(stack):
        raise SettingsError([f"'{stack[:60]}' is not a stack name; use letters, digits, '-', '_' and '.'"])
    return (folder or stacks_dir()) / f"Pulumi.{stack}.yaml"


def _text(path: Path) -> str:
    """The stack file's text: a regular file of at most MAX_STACK_FILE_BYTES (inputs.files)."""
    try:
        check_path_length(path)
    except InputError as exc:
        raise SettingsError([str(exc)]) from None
    if path.is_dir():
        raise SettingsError([f"{path}: is a folder; --config takes a stack file (Pulumi.<stack>.yaml)"])
    if not path.exists():
        raise SettingsError([f"{path}: no such stack file; create it or pass --config PATH"])
    try:
        return read_text(path, MAX_STACK_FILE_BYTES, "stack file")
    except InputError as exc:
        raise SettingsError([str(exc)]) from None


def read_stack_config(path: Path) -> dict:
    """The raw `config:` map of a stack file (namespaced keys, secure values left as they are)."""
    text = _text(path)
    try:      # no aliases, YAML 1.2 scalars, no duplicate keys, core tags only (inputs.safe_yaml)
        doc = safe_yaml.load(text, str(path))
    except InputError as exc:
        raise SettingsError([str(exc)]) from None
    config = doc.get("config") if isinstance(doc, dict) else None
    if not isinstance(config, dict):
        raise SettingsError([f"{path}: needs a top-level 'config:' map of llm-serving: keys"])
    bad = [k for k in config if not isinstance(k, str)]
    if bad:
        raise SettingsError([f"{path}: config key {bad[0]!r} is not a name; keys look like llm-serving:workload"])
    return config


# Namespaces a stack file may hold besides ours: Pulumi's providers read these.
OTHER_NAMESPACES = ("aws", "pulumi", "kubernetes")


def settings_from_config(stack: str, config: dict, folder: Path | None = None) -> StackSettings:
    """Validate a namespaced config map (as in the stack file) into settings. `folder`: the stack
    file's, from which the files it names are read (default: where `--stack` finds stacks)."""
    body: dict = {"stack": stack}
    problems = [p for key, value in config.items() for p in _non_finite(str(key), value)]
    if problems:       # reported alone: pydantic would name the same values again
        raise SettingsError(problems)
    config, problems = files_resolved(config, folder or stacks_dir())
    problems += stack_name_problems(stack)      # the cluster, KMS alias and log group names it makes
    for key, value in config.items():
        if not isinstance(key, str):
            problems.append(f"config: key {key!r} is not a name; keys look like {PROJECT}:workload")
            continue
        ns, colon, name = key.partition(":")
        if key == REGION_KEY:
            body["region"] = value
        elif ns == PROJECT:
            if name in ALL_SECRET_KEYS:
                if not (isinstance(value, dict) and "secure" in value):
                    problems.append(f"{key}: must be a secret; set it with "
                                    f"`pulumi config set --secret {name} ...`")
                continue
            body[name] = value
        elif not colon:
            problems.append(f"{key}: a config key needs its namespace; did you mean {PROJECT}:{key}?")
        elif ns not in OTHER_NAMESPACES and _near(ns, PROJECT):
            problems.append(f"{key}: unknown namespace '{ns}'; did you mean {PROJECT}:{name}?")
    if "region" not in body:
        problems.append(f"{REGION_KEY}: missing; set the stack's AWS region, e.g. `aws:region: us-east-1`")
        body["region"] = "missing"
    return _validated(StackSettings, body, problems)


def files_resolved(config: dict, folder: Path) -> tuple[dict, list[str]]:
    """The config with the lengths file (and the traffic file) it names made absolute from the stack
    file's folder (and kept in it), and the problems if not; the caller's map is left as it was."""
    config, problems = _traffic_file_resolved(config, folder)
    key = f"{PROJECT}:workload"
    workload = config.get(key)
    name = workload.get("lengthsFile") if isinstance(workload, dict) else None
    if not isinstance(name, str) or not name:
        return config, problems
    rest = {k: v for k, v in workload.items() if k != "lengthsFile"}
    try:
        return {**config, key: {**rest, "lengthsFile": file_in_folder(name, folder)}}, problems
    except InputError as exc:
        return {**config, key: rest}, problems + [f"{key}.lengthsFile: {exc}"]


def _traffic_file_resolved(config: dict, folder: Path) -> tuple[dict, list[str]]:
    """`workload.traffic: {file: NAME}` made absolute from the stack file's folder (and kept in it)."""
    key = f"{PROJECT}:workload"
    workload = config.get(key)
    traffic = workload.get("traffic") if isinstance(workload, dict) else None
    name = traffic.get("file") if isinstance(traffic, dict) else None
    if not isinstance(name, str) or not name:
        return config, []
    try:
        return {**config, key: {**workload, "traffic": {**traffic, "file": file_in_folder(name, folder)}}}, []
    except InputError as exc:
        rest = {k: v for k, v in workload.items() if k != "traffic"}
        return {**config, key: rest}, [f"{key}.traffic.file: {exc}"]


def request_from_body(body: dict, fit: bool = True) -> PlanRequestSettings:
    """Validate a plan request given as settings keys (what `llmserve size` builds from its flags,
    on top of a stack's request or the reference one): the same checks, the same messages, as
    those keys get in a stack file. `fit=False` (the sweep) skips whether the model fits the
    request's own instance type: the sweep tries every type and says why each is refused."""
    problems = [p for key, value in body.items() for p in _non_finite(_full_key(key), value)]
    if problems:
        raise SettingsError(problems)
    return _validated(PlanRequestSettings, body, [], fit)


def _validated(model: type[PlanRequestSettings], body: dict, problems: list[str], fit: bool = True):
    """The schema, then the rules that span keys; every problem at once, each naming its key."""
    try:
        # Strict, through JSON: `true` is not 1 for qps, nodes or tensorParallel, nor "yes" a boolean,
        # nor "10" a number; JSON mode still takes a list where the model holds a tuple.
        settings = model.model_validate_json(json.dumps(body), strict=True)
    except ValidationError as exc:
        problems.extend(_pydantic_problems(exc))
        raise SettingsError(problems) from None
    except RecursionError:
        raise SettingsError(problems + [f"{PROJECT}: a value is nested too deeply; check the stack file"]) from None
    problems.extend(semantic_problems(settings) if isinstance(settings, StackSettings) else request_problems(settings, fit))
    if problems:
        raise SettingsError(problems)
    return settings


def stack_settings(stack: str, config_path: Path | None = None) -> StackSettings:
    """The validated settings of stacks/Pulumi.STACK.yaml (or of `config_path`). The commands
    read a stack through `offline.stack.load_stack`, which reports failures as `StackError`."""
    path = config_path or stack_file(stack)
    return settings_from_config(stack, read_stack_config(path), path.parent)


def _full_key(name: str) -> str:
    return REGION_KEY if name == "region" else f"{PROJECT}:{name}"


def request_key(field: str | None) -> str | None:
    """The settings key a sizing field comes from (`SizingError.field`), fully named."""
    key = REQUEST_KEYS.get(field) if field else None
    return None if key is None else _full_key(key)


def sizing_problem(exc: SizingError) -> str:
    """A sizing error as a settings problem: `llm-serving:<key>: message`, or the bare message
    when no one key fixes it (the layout)."""
    key = request_key(exc.field)
    return f"{key}: {exc}" if key else str(exc)


def key_part(name) -> str:
    """One step of a key path: `.name` for a plain name, `['odd name']` for anything else."""
    text = str(name)
    return f".{text}" if re.fullmatch(r"[A-Za-z0-9_-]+", text) else f"[{text[:40]!r}]"


def _near(word: str, target: str) -> bool:
    return word.lower() == target or difflib.SequenceMatcher(None, word.lower(), target).ratio() >= 0.75


def _non_finite(path: str, value, depth: int = 0) -> list[str]:
    """NaN and infinity (YAML's .nan, .inf) pass every `<= 0` check: refuse them wherever they appear."""
    if isinstance(value, float) and not math.isfinite(value):
        return [f"{path}: {value} is not a finite number; give a finite value"]
    if depth > MAX_DEPTH:
        return [f"{path}: nested more than {MAX_DEPTH} levels deep; a stack value never is"]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _non_finite(f"{path}{key_part(k)}", v, depth + 1)]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _non_finite(f"{path}[{i}]", v, depth + 1)]
    return []


# -- checks that span keys -------------------------------------------------------------------
def semantic_problems(s: StackSettings) -> list[str]:
    """Problems no single field shows: the plan request's (below), the gateway's quota with the
    gate on, and the load test's workload."""
    problems = request_problems(s)
    if s.accuracy_gate_enabled and s.gateway.rateLimitShare > MAX_TENANT_SHARE_WITH_GATE:
        problems.append(f"{PROJECT}:gateway.rateLimitShare: {s.gateway.rateLimitShare:g} leaves the accuracy gate's "
                        f"own key less than {1 - MAX_TENANT_SHARE_WITH_GATE:.0%} of the capacity; use at most "
                        f"{MAX_TENANT_SHARE_WITH_GATE:g}, or set accuracyGate.enabled: false")
    if s.accuracy_gate_enabled:
        problems += gate_fit_problems(s.accuracyGate.tasks, s.workload.sizing_workload().served_max_model_len,
                                      f"{PROJECT}:accuracyGate.tasks")
    release = s.nodeAmiReleaseVersion
    if release and not release.startswith(f"{s.kubernetesVersion}."):
        problems.append(f"{PROJECT}:nodeAmiReleaseVersion: {release} is an AMI for another Kubernetes version than "
                        f"kubernetesVersion {s.kubernetesVersion}; use a {s.kubernetesVersion}.x release "
                        f"(`aws ssm get-parameter --name /aws/service/eks/optimized-ami/{s.kubernetesVersion}/"
                        "amazon-linux-2023/x86_64/nvidia/recommended/release_version`) or unset it")
    if s.model.config and "id" not in s.model.model_fields_set:
        from sizing.catalog import model_from_config

        from .names import served_name
        try:
            served_name(model_from_config(s.model.config).name)     # the name deployment.serving serves it under
        except ValueError:
            problems.append(f"{PROJECT}:model.id: model.config's folder name is not a name clients can ask for; "
                            "set model.id to the served model's name (ASCII letters, digits and -_./:)")
    if s.model.config and not s.model.checkpoint:
        problems.append(f"{PROJECT}:model.checkpoint: model.config sizes a local config.json, which names no "
                        "weights to serve; set model.checkpoint to the hub id or the /models/<folder> path of "
                        "the checkpoint that config.json belongs to")
    problems += _preview_role_problems(s)
    if s.loadTest.enabled and s.workload.concurrency is not None:
        problems.append(f"{PROJECT}:loadTest.enabled: the workload is closed-loop (concurrency); the rate "
                        "sweep needs workload.qps, or set loadTest.enabled: false")
    return problems


def _preview_role_problems(s: StackSettings) -> list[str]:
    """A preview role that is also an admin role: EKS takes a principal in one access entry only
    (EKS User Guide, "Create access entries"), so the second entry would fail `pulumi up`; and the
    admin entry already reads everything the view one would."""
    admins = {role_key(arn): j for j, arn in enumerate(s.adminRoleArns)}
    return [f"{PROJECT}:previewRoleArns[{i}]: {ascii(arn)} is the admin role again (adminRoleArns[{admins[role_key(arn)]}]); "
            "EKS takes an IAM principal in one access entry only, and cluster-admin already reads everything: drop it "
            "from previewRoleArns"
            for i, arn in enumerate(s.previewRoleArns) if role_key(arn) in admins]


def request_problems(r: PlanRequestSettings, fit: bool = True) -> list[str]:
    """A plan request's problems no single field shows: the region and its zones, pool names and
    capacity, one instance type, and whether the model fits it."""
    problems = []
    region = r.region
    region_ok = region in AWS_REGIONS           # botocore's endpoint data (settings.names.region)
    if not region_ok and region != "missing":     # "missing" is already reported
        try:
            valid_region(region)
        except ValueError as exc:
            problems.append(f"{REGION_KEY}: {exc}")
    problems += _pool_problems(r, region if region_ok else None)
    types = {p.instanceType for p in r.gpuPools}
    if len(types) > 1:
        problems.append(f"{PROJECT}:gpuPools: pools mix instance types ({', '.join(sorted(types))}); "
                        "use one instance type for all GPU pools")
        return problems
    return problems + (_fit_problems(r, types.pop()) if fit else [])


def _pool_problems(s: PlanRequestSettings, region: str | None) -> list[str]:
    """Each GPU pool: a zone of the region (None: the region itself is wrong), its own name, and
    one consistent way to its capacity (reservation, a block held, or a block bought), a
    reservation in its own zone only."""
    problems, names = [], set()
    reservations: dict[str, tuple[int, str]] = {}      # reservation id -> (first pool using it, its zone)
    for i, pool in enumerate(s.gpuPools):
        key = f"{PROJECT}:gpuPools[{i}]"
        if region and not (pool.zone.startswith(region) and re.fullmatch(r"[a-z]", pool.zone[len(region):])):
            problems.append(f"{key}.zone: '{pool.zone}' is not a zone of the region {region}; "
                            f"use a zone such as {region}a")
        elif region and pool.zone[len(region):] not in ZONE_LETTERS:
            problems.append(f"{key}.zone: the subnet layout covers zones {region}a to {region}{ZONE_LETTERS[-1]}; "
                            "use one of those")
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
        purchase_only = [k for k in ("allowPurchase", "offeringId", "durationHours") if cb and k in cb.model_fields_set]
        if cb and cb.id and not cb.purchase and purchase_only:
            one = len(purchase_only) == 1
            named = purchase_only[0] if one else ", ".join(purchase_only[:-1]) + " and " + purchase_only[-1]
            them = "it" if one else "them"
            problems.append(f"{key}.capacityBlock: {named} only describe{'s' if one else ''} a purchase, and a block "
                            f"you hold (id) is not bought: the program would ignore {them}; drop {them}")
        problems += _reservation_zone_problems(key, i, pool, reservations)
    return problems


def _reservation_zone_problems(key: str, index: int, pool, seen: dict[str, tuple[int, str]]) -> list[str]:
    """A capacity reservation (an ODCR, or a Capacity Block's reservation) is in exactly one
    Availability Zone (EC2 API Reference, CapacityReservation: `AvailabilityZone`, "The Availability
    Zone in which the capacity is reserved"; CreateCapacityReservation takes one), so two pools in
    two zones cannot both use it. Pools in one zone may share one (its instance count permitting)."""
    field = ("capacityReservationId", pool.capacityReservationId) if pool.capacityReservationId else (
        ("capacityBlock.id", pool.capacityBlock.id) if pool.capacityBlock and pool.capacityBlock.id else None)
    if field is None:
        return []
    name, rid = field
    first = seen.setdefault(rid, (index, pool.zone))
    if first[1] == pool.zone:
        return []
    return [f"{key}.{name}: {rid} is also gpuPools[{first[0]}]'s reservation, in {first[1]}; a capacity reservation "
            f"is in exactly one Availability Zone, so gpuPools[{index}] ({pool.zone}) needs one of its own zone"]


def _fit_problems(r: PlanRequestSettings, instance_type: str) -> list[str]:
    """The model at the request's TP (or at some TP, when the planner picks) fits the instance
    type; the sizing's own check (`check_shape`) says why not, naming its field."""
    catalog = load_catalog()
    instance = catalog.instance(instance_type)
    model = resolve_model(r.model.id, r.model.config)
    layout = r.model.layout or "tp"
    profile = get_profile(r.sizing.profile)
    workload = r.plan_request().workload
    tp = r.model.tensorParallel
    errors = []
    tps = [tp] if tp is not None else ([instance.gpus] if layout == "dp-ep" else candidate_tps(model, instance, layout))
    for t in tps:
        try:
            check_shape(Shape(model, instance, t, r.model.weights, r.model.kvCacheDtype, layout), workload, profile)
            return []
        except SizingError as exc:
            errors.append(exc)
    if tp is not None:
        return [sizing_problem(exc) for exc in errors]
    if errors and errors[0].field == "layout":      # no TP helps: the layout cannot run the model (EP, dense)
        return [sizing_problem(errors[0])]
    if errors and (errors[-1].field or "").startswith("workload."):
        return [sizing_problem(errors[-1])]     # a served length no TP helps: the most capable TP's reason
    if layout == "tp" and _fits_on_nodes(model, instance, r, workload, profile):
        return []       # the planner spans nodes (docs/multi-node.md)
    if all(exc.field == "weights" for exc in errors):     # no layout holds the weights: say so, and what does
        from sizing.planner import does_not_fit
        return [f"{PROJECT}:gpuPools: {does_not_fit(r.plan_request(), model, instance)}"]
    return [f"{PROJECT}:gpuPools: {model.id} with {r.model.weights} weights does not fit on "
            f"{instance.id} even at TP={instance.gpus} on {MAX_NODES_PER_REPLICA} nodes per replica; "
            "use a larger instance type or fp8 weights"]


def _fits_on_nodes(model, instance, r: PlanRequestSettings, workload, profile) -> bool:
    """Whether a replica of whole nodes (TP = the node's GPUs, PP across 2 and more) holds the model."""
    for n in range(2, MAX_NODES_PER_REPLICA + 1):
        try:
            check_shape(Shape(model, instance, instance.gpus, r.model.weights, r.model.kvCacheDtype, nodes=n),
                        workload, profile)
            return True
        except SizingError:
            continue
    return False


# Messages for lists of the wrong length, where pydantic's own does not say what to do.
LENGTH_FIXES = {
    ("gatewayAllowedCidrs", "too_short"): "empty would open the load balancer to everyone; list the client CIDRs, "
                                          "or [\"0.0.0.0/0\"] to open it on purpose",
    ("apiAllowedCidrs", "too_short"): "list the CIDRs that may reach the Kubernetes API (your office or VPN egress)",
    ("gateway.apiKeyNames", "too_short"): "name at least one API key; every route needs one",
    ("gateway.apiKeyNames", "too_long"): f"at most {MAX_API_KEYS} keys (Envoy Gateway's limit on local "
                                         "rate-limit rules); share keys between teams",
    ("accuracyGate.tasks", "too_short"): "an empty task list would pass without checking anything; list at least "
                                         "one task, or set accuracyGate.enabled: false",
    ("gpuPools", "too_short"): "give at least one GPU pool",
}


# A number out of its range and a word not among the choices read the same whether the value came
# from a stack key or from `llmserve size`'s flag for it (pydantic's own words name neither the value nor the fix).
# pydantic 2.14.3's error types and their `ctx` (docs.pydantic.dev/latest/errors/validation_errors/):
# greater_than {gt}, greater_than_equal {ge}, less_than {lt}, less_than_equal {le}, literal_error {expected}.
BOUND_WORDS = {"greater_than": ("greater than", "gt"), "greater_than_equal": ("at least", "ge"),
               "less_than": ("less than", "lt"), "less_than_equal": ("at most", "le")}
CHOICE_NOUNS = {"weights": "precision", "kvCacheDtype": "precision", "sloStatistic": "statistic", "layout": "layout",
                "kubernetesVersion": "Kubernetes version", "environment": "environment"}


def _bound_or_choice(err: dict, field: str) -> str:
    ctx, value = err.get("ctx") or {}, err.get("input")
    if err["type"] == "literal_error":
        choices = ", ".join(re.findall(r"'([^']*)'", str(ctx.get("expected", ""))))
        return f"unknown {CHOICE_NOUNS.get(field, 'value')} '{_shown(value)}'; choose one of: {choices}"
    words, bound = BOUND_WORDS[err["type"]]
    return f"must be {words} {_shown(ctx.get(bound))} (got {_shown(value)})"


def _shown(value) -> str:
    """A value as the user wrote it, whichever way it came (a flag parses 0 as 0.0, YAML as 0)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, float):
        return f"{value:g}"          # 1e+300, not its 301 digits
    return str(value)[:40]


def _fields_at(loc: list[str]) -> list[str]:
    """The field names of the settings model that holds the key at `loc` (for a suggestion)."""
    model = StackSettings
    for part in loc[:-1]:
        field = model.model_fields.get(part)
        if field is None:
            continue          # an index into a list of models
        annotation = field.annotation
        for candidate in (annotation, *getattr(annotation, "__args__", ())):
            if isinstance(candidate, type) and issubclass(candidate, _Strict):
                model = candidate
                break
            inner = getattr(candidate, "__args__", ())
            if inner and isinstance(inner[0], type) and issubclass(inner[0], _Strict):
                model = inner[0]
                break
    return [f for f in model.model_fields if f not in ("stack", "region")]


def _suggest(loc: list[str]) -> str:
    close = difflib.get_close_matches(loc[-1], _fields_at(loc), n=1, cutoff=0.6)
    return f"did you mean {close[0]}?" if close else "check its spelling against stacks/README.md"


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
            key = PROJECT
        else:
            head, rest = loc[0], loc[1:]
            key = REGION_KEY if head == "region" else f"{PROJECT}:{head}"
            for part in rest:
                key += f"[{part}]" if part.isdigit() else key_part(part)
        msg = err["msg"]
        ctx_err = (err.get("ctx") or {}).get("error")
        if isinstance(ctx_err, CatalogError):
            msg = str(ctx_err)
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        fix = LENGTH_FIXES.get((".".join(p for p in loc if not p.isdigit()), err["type"]))
        if fix:
            msg = fix
        elif err["type"] in BOUND_WORDS or err["type"] == "literal_error":
            msg = _bound_or_choice(err, loc[-1] if loc else "")
        if err["type"] == "extra_forbidden":
            msg = "unknown key; " + _suggest(loc)
        elif err["type"] == "missing":
            msg = "required; add it to the stack config"
        out.append(f"{key}: {msg}")
    return out
