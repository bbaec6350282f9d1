"""Stack settings: the `llm-serving:` keys of `stacks/Pulumi.<stack>.yaml`, validated once.

Keys are camelCase as in the YAML. Every error names the key and the fix (see `errors.py`).
Secrets (`hubToken`, `apiKeys`, `grafanaAdminPassword`) never live here: the program reads them
with `Config.require_secret`, so they stay Pulumi secrets end to end.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pathlib import Path

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, ValidationInfo,
                      field_validator, model_validator)

from conventions import SERVING_NAMESPACE
from sizing.catalog import CatalogError, load_catalog
from sizing.planner import PlanRequest, Pool
from sizing.modes import SERVING_MODES, SPECULATIVE_METHODS
from sizing.profiles import load_profiles, unknown_profile
from sizing.traffic import LengthDistribution, LengthsError, Percentiles, from_percentiles, parse_lengths_text
from sizing.workload import Workload

from inputs import InputError
from inputs.files import read_text
from inputs.untrusted import nfkc_ascii

from .capacity import duration_hours, offering_id, reservation_id
from .names import RESERVED_NAMESPACES, dns_label, private_cidr, role_arn, role_key, secret_key
from .names import acme_server, checkpoint as valid_checkpoint, hostname as valid_hostname, system_instance_type
from .names import served_name as valid_served_name
from .names import tags as valid_tags

SECRET_KEYS = ("hubToken", "apiKeys", "grafanaAdminPassword")
# Only with `gateway.certificate: provided`: the certificate chain and key (PEM) the gateway serves.
TLS_SECRET_KEYS = ("tlsCertificate", "tlsPrivateKey")
ALL_SECRET_KEYS = SECRET_KEYS + TLS_SECRET_KEYS
LETS_ENCRYPT = "https://acme-v02.api.letsencrypt.org/directory"
# EKS versions the stack accepts: in EKS standard support on the prices' date (2026-11) and in
# Envoy Gateway v1.8's compatibility matrix (v1.32-v1.35). See docs/operations.md to move to the next.
KUBERNETES_VERSIONS = ("1.34", "1.35")     # 1.34: standard support to 2026-12-02; 1.35: to 2027-03-27
GATE_KEY_NAME = "accuracy-gate"   # the accuracy gate's own client id at the gateway (not a tenant's)
MAX_API_KEYS = 16          # Envoy Gateway's BackendTrafficPolicy takes at most 16 local rate-limit rules
# The score each supported accuracy task is judged on (lm-eval 0.4.13 task configs: metric,filter).
ACCURACY_TASK_METRICS = {
    "gsm8k": "exact_match,strict-match",
    "gsm8k_cot": "exact_match,strict-match",
    "mmlu_pro": "exact_match,custom-extract",
}

K8sLabelName = Annotated[str, AfterValidator(dns_label)]
Hostname = Annotated[str, AfterValidator(valid_hostname)]
ApiKeyName = Annotated[str, AfterValidator(secret_key)]
RoleArn = Annotated[str, AfterValidator(role_arn)]
MAX_GATE_DROP = 0.5      # accuracyGate.maxDrop stays below it: a gate that lets half the accuracy go is no gate


def _baseline_score(v: float) -> float:
    """A BF16 baseline in (0, 1]: the gate fails a score more than maxDrop below it, so a baseline
    of 0 (or less) fails none (deployment/accuracy_check.py)."""
    if v <= 0:
        raise ValueError(f"a baseline of {v:g} fails no score (the gate fails a score only when it falls more than "
                         "maxDrop below the baseline); give the task's BF16 score, greater than 0 and at most 1")
    return v


Baseline = Annotated[float, Field(le=1), AfterValidator(_baseline_score)]
ReservationId = Annotated[str, AfterValidator(reservation_id)]      # cr-<17 hex>: settings/capacity.py
OfferingId = Annotated[str, AfterValidator(offering_id)]            # cb-<17 hex>
BlockHours = Annotated[int, AfterValidator(duration_hours)]         # a length EC2 offers blocks in


class _Strict(BaseModel):
    # allow_inf_nan=False: NaN and infinity pass every `<= 0` check, so no float field takes them.
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False)


Tokens = Annotated[int, Field(gt=0, le=1_000_000)]


class PercentileLengths(_Strict):
    """A length by its percentiles: the median, the 95th percentile and the longest."""
    p50: Tokens
    p95: Tokens
    max: Tokens

    @model_validator(mode="after")
    def _ordered(self):
        try:
            Percentiles(self.p50, self.p95, self.max).check("")
        except LengthsError as exc:
            raise ValueError(str(exc)) from None
        return self


class WorkloadSettings(_Strict):
    qps: float | None = Field(None, gt=0)
    concurrency: int | None = Field(None, gt=0)
    # A length is a number (every request alike) or {p50, p95, max}; or lengthsFile holds the
    # observed (input_tokens, output_tokens) of each request (CSV or JSONL, sizing/traffic.py).
    inputTokens: Tokens | PercentileLengths = 1000
    outputTokens: Tokens | PercentileLengths = 300
    lengthsFile: str | None = Field(None, min_length=1, max_length=4096)
    # The longest request served (prompt + output): vLLM's max_model_len. Default: the longest
    # the lengths allow (fixed: in + out; percentiles: max + max; a file: its longest, rounded up).
    maxModelLen: int | None = Field(None, gt=0, le=10_000_000)
    # Prefix caching the plan counts on: prompt tokens every request shares (system prompt,
    # template), or the share of prompt tokens found in the cache (multi-turn). vLLM 0.29.0 caches
    # prefixes by default; with either set, the serving args say --enable-prefix-caching and the
    # plan shows TTFT and capacity with and without it.
    sharedPrefixTokens: int = Field(0, ge=0, le=1_000_000)
    prefixHitFraction: float = Field(0.0, ge=0, lt=1)
    # Bounded above so a typo (1e300) is refused, not planned: a first token after an hour, or an
    # output token a minute apart, is no latency objective an interactive service states.
    ttftSeconds: float = Field(1.0, gt=0, le=3600)
    tpotSeconds: float = Field(0.040, gt=0, le=60)
    sloStatistic: Literal["mean", "p50", "p90", "p95", "p99"] = "p95"   # the SLOs hold at this statistic
    # Load over time (sizing/load_curve.py): 24 hourly rates, {hour: rate}, or {file: a CSV of t_s,qps}.
    # qps is then the plan's (the peak's) rate: left unset, the curve's peak; set, at least the peak.
    traffic: Any = None
    _lengths: LengthDistribution | None = PrivateAttr(None)
    _curve: Any = PrivateAttr(None)      # sizing.load_curve.LoadCurve (read_traffic), None without traffic

    @model_validator(mode="after")
    def _one_load(self):
        if self.traffic is not None:
            self._curve = read_traffic(self.traffic)
            _check_peak(self.qps, self.concurrency, self._curve)
            if self.qps is None and self.concurrency is None:
                return self
        if (self.qps is None) == (self.concurrency is None):
            raise ValueError("give exactly one of qps (open loop) or concurrency (closed loop)")
        return self

    @field_validator("inputTokens", "outputTokens", mode="before")
    @classmethod
    def _one_form(cls, v):
        """One error for a length in either form (the union would report both forms' errors)."""
        if isinstance(v, dict):
            try:      # strict, as the stack is: "800" or true is not a length
                return PercentileLengths.model_validate(v, strict=True)
            except ValidationError as exc:
                err = exc.errors()[0]
                where = ".".join(str(p) for p in err["loc"])
                msg = err["msg"].removeprefix("Value error, ")
                raise ValueError(msg if msg.startswith(f"{where}:") or not where else f"{where}: {msg}") from None
        if isinstance(v, bool) or not isinstance(v, int) or not 0 < v <= 1_000_000:
            raise ValueError(f"expected a whole number of tokens from 1 to 1,000,000, or {{p50: N, p95: N, max: N}} "
                             f"(got {str(v)[:40]!r})")
        return v

    @field_validator("lengthsFile")
    @classmethod
    def _readable(cls, v: str | None) -> str | None:
        """The file read and parsed here, so a problem names this key (and the CLI, --lengths)."""
        if v is not None:
            read_lengths_file(v)
        return v

    @model_validator(mode="after")
    def _read_lengths(self):
        given = {"inputTokens", "outputTokens"} & self.model_fields_set
        if self.lengthsFile is not None:
            if given:
                raise ValueError(f"lengthsFile and {' and '.join(sorted(given))}: give the lengths one way "
                                 "(a file of observed lengths, or numbers/percentiles), not both")
            self._lengths = read_lengths_file(self.lengthsFile)
        elif isinstance(self.inputTokens, PercentileLengths) or isinstance(self.outputTokens, PercentileLengths):
            self._lengths = from_percentiles(_as_percentiles(self.inputTokens), _as_percentiles(self.outputTokens))
        self._check_prefix_and_limit()
        return self

    def _check_prefix_and_limit(self) -> None:
        """A shared prefix is part of every prompt, so below the shortest; the served limit holds the
        longest request planned (vLLM refuses a longer one with a 400)."""
        lengths = self._lengths
        if lengths is not None and lengths.form == "observed":
            shortest, what = min(lengths.inputs), "the shortest prompt in lengthsFile"
            longest = max(i + o for i, o in zip(lengths.inputs, lengths.outputs))
        else:
            shortest = self.inputTokens if isinstance(self.inputTokens, int) else self.inputTokens.p50
            what = "inputTokens" if isinstance(self.inputTokens, int) else "inputTokens.p50 (the median prompt)"
            longest = sum(v if isinstance(v, int) else v.max for v in (self.inputTokens, self.outputTokens))
        if self.sharedPrefixTokens and self.sharedPrefixTokens >= shortest:
            raise ValueError(f"sharedPrefixTokens: {self.sharedPrefixTokens:,} is not below {what} ({shortest:,}); "
                             "the shared prefix is part of each prompt")
        if self.maxModelLen is not None and self.maxModelLen < longest:
            raise ValueError(f"maxModelLen: {self.maxModelLen:,} is below the longest request planned ({longest:,} "
                             "tokens, prompt and output); vLLM would refuse it. Raise maxModelLen or leave it unset")

    @property
    def lengths(self) -> LengthDistribution | None:
        """The distribution the lengths describe; None when every request is the same."""
        return self._lengths

    def sizing_workload(self) -> Workload:
        qps = self.qps if self.qps is not None or self._curve is None else self._curve.peak_qps
        common = dict(ttft_slo_s=self.ttftSeconds, tpot_slo_s=self.tpotSeconds, qps=qps,
                      concurrency=self.concurrency, slo_statistic=self.sloStatistic, stated_max_model_len=self.maxModelLen,
                      shared_prefix_tokens=self.sharedPrefixTokens, prefix_hit_fraction=self.prefixHitFraction)
        if self._lengths is not None:
            return Workload.with_lengths(self._lengths, **common)
        return Workload(input_tokens=self.inputTokens, output_tokens=self.outputTokens, **common)


def _as_percentiles(v: int | PercentileLengths) -> Percentiles:
    """A fixed length among percentile ones: every request that long."""
    return Percentiles(v, v, v) if isinstance(v, int) else Percentiles(v.p50, v.p95, v.max)


PROJECT_ROOT = Path(__file__).resolve().parent.parent


MAX_LENGTHS_FILE_BYTES = 64 * 2**20     # 64 MiB: about a million rows of two lengths


def read_lengths_file(path: str) -> LengthDistribution:
    """A lengths file named by a stack key (made absolute from the stack file's folder by the
    loader: settings.load.files_resolved) or a flag (made absolute by the CLI). Parsed once per
    version of the file (the settings validate twice)."""
    full = Path(path) if Path(path).is_absolute() else PROJECT_ROOT / path
    try:
        info = full.stat()
        key = (str(full), info.st_mtime_ns, info.st_size)
    except OSError:
        key = None
    if key is not None and key in _PARSED:
        return _PARSED[key]
    try:
        dist = parse_lengths_text(read_text(full, MAX_LENGTHS_FILE_BYTES, "CSV or JSONL lengths file"), path)
    except (InputError, LengthsError) as exc:
        raise ValueError(str(exc)) from None
    if key is not None:
        _PARSED.clear()          # keep one: a stack names one file
        _PARSED[key] = dist
    return dist


_PARSED: dict[tuple, LengthDistribution] = {}
MAX_TRAFFIC_FILE_BYTES = 8 * 2**20      # 8 MiB: sizing.load_curve.MAX_POINTS lines of t_s,qps


def read_traffic(value) -> LoadCurve:
    """`workload.traffic`: 24 hourly rates, {hour: rate}, or {file: PATH} of a CSV of t_s,qps (made
    absolute from the stack file's folder by the loader, settings.load.files_resolved)."""
    # On use: a stack without traffic never builds the curve's types.
    from sizing.load_curve import LoadCurveError, from_setting as curve_from_setting, parse_curve_csv
    if isinstance(value, dict) and "file" in value:
        path = value["file"]
        if set(value) != {"file"} or not isinstance(path, str) or not path:
            raise ValueError("traffic.file: give {file: PATH} alone, PATH a CSV of t_s,qps")
        full = Path(path) if Path(path).is_absolute() else PROJECT_ROOT / path
        try:
            return parse_curve_csv(read_text(full, MAX_TRAFFIC_FILE_BYTES, "CSV traffic file"), path)
        except (InputError, LoadCurveError) as exc:
            raise ValueError(f"traffic.file: {exc}") from None
    try:
        return curve_from_setting(value, "traffic")
    except LoadCurveError as exc:
        raise ValueError(str(exc)) from None


def _check_peak(qps: float | None, concurrency: int | None, curve: LoadCurve) -> None:
    if concurrency is not None:
        raise ValueError("traffic: a load over time is a request rate; give it with qps (or alone), not concurrency")
    if qps is not None and qps < curve.peak_qps:
        raise ValueError(f"qps: {qps:g} is below the traffic's peak of {curve.peak_qps:g}; the plan is the fleet for "
                         "the peak: raise qps or leave it unset (then it is the peak)")


class ModelSettings(_Strict):
    config: str | None = None          # a local config.json to size instead of the catalog's entry
    id: str = "llama-3-70b"            # a catalog key or HF id; with `config`, the served model's name
    # None: the checkpoint's own precision when it is pre-quantized, else fp8 (sizing.catalog.default_weights)
    weights: Literal["fp8", "bf16", "fp16", "fp4", "int4"] | None = None
    kvCacheDtype: Literal["fp8", "bf16", "fp16"] = "bf16"
    tensorParallel: int | None = Field(None, ge=1)   # GPUs per replica (with layout dp-ep: the DP size)
    layout: Literal["tp", "dp-ep", "tp-ep"] | None = None     # sizing.parallel; None: the planner picks
    checkpoint: str | None = None      # overrides the catalog's prequantized checkpoint (a hub id or /models/...)

    @field_validator("config")
    @classmethod
    def _readable(cls, v: str | None) -> str | None:
        if v is not None:
            from sizing.catalog import model_from_config
            model_from_config(v)         # ConfigError (a ValueError) names the config.json field
        return v

    @field_validator("id")
    @classmethod
    def _known(cls, v: str, info: ValidationInfo) -> str:
        v = nfkc_ascii(v) or v           # one spelling per name (a Kelvin sign is K); not ASCII: refused below
        if not info.data.get("config"):  # with a config.json, id is only the served model's name
            load_catalog().model(v)
        return valid_served_name(v)

    @field_validator("checkpoint")
    @classmethod
    def _checkpoint(cls, v: str | None) -> str | None:
        return None if v is None else valid_checkpoint(v)

    @model_validator(mode="after")
    def _default_weights(self) -> "ModelSettings":
        """No precision given: the served checkpoint's own (gpt-oss plans at MXFP4, not at FP8)."""
        if self.weights is None:
            from sizing.catalog import default_weights, model_from_config
            model = model_from_config(self.config) if self.config else load_catalog().model(self.id)
            object.__setattr__(self, "weights", default_weights(model))
        return self


class CapacityBlock(_Strict):
    id: ReservationId | None = None         # an existing capacity block reservation (cr-...)
    purchase: bool = False                  # buy one (non-refundable): needs allowPurchase too
    allowPurchase: bool = False
    offeringId: OfferingId | None = None
    durationHours: BlockHours | None = None   # the offering's length: whole days to 14, whole weeks to 182


class GpuPoolSettings(_Strict):
    zone: str
    instanceType: str = "p5.48xlarge"
    nodes: int = Field(1, ge=1, le=64)
    name: str | None = Field(None, pattern=r"^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$")
    capacityReservationId: ReservationId | None = None    # an On-Demand Capacity Reservation
    capacityBlock: CapacityBlock | None = None
    efa: bool = False

    @field_validator("instanceType")
    @classmethod
    def _known(cls, v: str) -> str:
        load_catalog().instance(v)
        return v


class SizingSettings(_Strict):
    profile: str = "measured"
    # On-demand p5/p5en list prices are $55-64 per instance-hour, $7-8 per GPU-hour
    # (../shared/reference/hardware.md, 2026): over 100x that is a typo, not a price.
    gpuHourPrice: float | None = Field(None, gt=0, le=1000)
    instancePrice: float | None = Field(None, gt=0, le=10_000)

    @field_validator("profile")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in load_profiles():
            raise CatalogError(unknown_profile(v))
        return v


class NetworkSettings(_Strict):
    vpcCidr: str = "10.40.0.0/16"
    natPerZone: bool | None = None          # default: per zone in prod, one NAT elsewhere

    @field_validator("vpcCidr")
    @classmethod
    def _cidr(cls, v: str) -> str:
        net = ipaddress.ip_network(v, strict=True)
        private_cidr(v)
        if not 16 <= net.prefixlen <= 20:
            # AWS allows /16 at most; below /20 each zone's private subnet (an eighth of the VPC)
            # has too few addresses for the VPC CNI, which gives every pod a VPC address.
            raise ValueError(f"a /{net.prefixlen} VPC does not work here; use a /16 to /20, e.g. 10.40.0.0/16")
        return v


class SystemNodeSettings(_Strict):
    instanceType: Annotated[str, AfterValidator(system_instance_type)] = "m7i.2xlarge"
    nodesPerZone: int = Field(1, ge=1, le=10)


class GatewaySettings(_Strict):
    hostname: Hostname = "llm.example.com"
    # acme: cert-manager issues the certificate over Route 53 DNS-01 and external-dns publishes
    # the name, both in `hostedZoneId`; provided: the tlsCertificate/tlsPrivateKey secrets.
    certificate: Literal["acme", "provided"] = "acme"
    hostedZoneId: str | None = Field(None, pattern=r"^Z[A-Z0-9]{1,31}$")
    acmeEmail: str | None = Field(None, pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
    acmeServer: Annotated[str, AfterValidator(acme_server)] = LETS_ENCRYPT
    tlsSecretName: str = Field("llm-gateway-tls", pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    inferenceExtension: bool = True
    # one rate-limit share per key; values are secrets
    apiKeyNames: tuple[ApiKeyName, ...] = Field(("default",), min_length=1, max_length=MAX_API_KEYS)
    rateLimitShare: float = Field(0.9, gt=0, le=1)  # of the capacity after a zone loss

    @field_validator("apiKeyNames")
    @classmethod
    def _unique(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        repeated = sorted({k for k in v if v.count(k) > 1})
        if GATE_KEY_NAME in v:
            raise ValueError(f"{GATE_KEY_NAME} is the accuracy gate's own key; name the tenant's key otherwise")
        if repeated:
            raise ValueError(f"{', '.join(repeated)} named more than once; give each key its own name")
        return v

    @model_validator(mode="after")
    def _certificate_source(self):
        if self.certificate == "acme" and not (self.hostedZoneId and self.acmeEmail):
            raise ValueError("certificate: acme needs hostedZoneId (the Route 53 zone holding hostname) and "
                             "acmeEmail; or set certificate: provided and the tlsCertificate and tlsPrivateKey secrets")
        unused = [k for k in ("acmeEmail", "acmeServer") if k in self.model_fields_set]
        if self.certificate == "provided" and unused:
            # __main__.py installs cert-manager (which reads them) only for certificate: acme.
            raise ValueError(f"certificate: provided serves the tlsCertificate and tlsPrivateKey secrets and installs "
                             f"no ACME issuer, so {' and '.join(unused)} would be ignored; drop "
                             f"{'them' if len(unused) > 1 else 'it'}, or set certificate: acme")
        return self

    @property
    def manages_dns(self) -> bool:
        """external-dns publishes the hostname when the stack knows its hosted zone."""
        return self.hostedZoneId is not None


# How to measure a speculative method's per-token acceptance, named by every error about it.
ACCEPTANCE_HOW = ("measure it on this workload with the method and k you plan: vLLM exports "
                  "vllm:spec_decode_num_accepted_tokens and vllm:spec_decode_num_draft_tokens, and their ratio "
                  "over a window (rate of the first / rate of the second) is the per-token acceptance "
                  "(docs/speculative-deploy.md)")


class SpeculativeSettings(_Strict):
    """`serving.speculative`: what the user states about speculative decoding (sizing.roles.SpeculativeRequest)."""
    method: Literal[SPECULATIVE_METHODS]
    draftTokens: int | None = Field(None, ge=1, le=16)     # k; None: the plan chooses it per expected batch
    # Workload-specific, so never defaulted: a plan without it is refused (validate_default: None is checked).
    acceptanceRate: float | None = Field(None, gt=0, lt=1, validate_default=True)
    draftModel: str | None = None      # method draft / eagle3: the drafter (a hub id or /models/..., as model.checkpoint)

    @field_validator("draftModel")
    @classmethod
    def _drafter_name(cls, v: str | None) -> str | None:
        return None if v is None else valid_checkpoint(v)

    @field_validator("acceptanceRate")
    @classmethod
    def _stated(cls, v: float | None) -> float:
        if v is None:
            raise ValueError(f"required when serving.speculative is set (the per-token acceptance, between 0 and "
                             f"1; it depends on the workload, so no default is assumed): {ACCEPTANCE_HOW}")
        return v

    @model_validator(mode="after")
    def _drafter(self):
        if self.method == "draft" and self.draftModel is None:
            raise ValueError("method draft needs draftModel: the drafter's checkpoint (a hub id or a path in the "
                             "model cache)")
        if self.method == "ngram" and self.draftModel is not None:
            raise ValueError("method ngram drafts from the prompt and needs no draftModel; drop it")
        return self

    def request(self) -> SpeculativeRequest:
        from sizing.roles import SpeculativeRequest
        return SpeculativeRequest(self.method, self.draftTokens, self.acceptanceRate, self.draftModel)


class ServingPlanSettings(_Strict):
    """The serving keys a plan reads (`serving.mode`, `serving.speculative`, `serving.mig`): part of the sizing request,
    so a stack file and `llmserve size` meet the same rule. StackSettings' `serving` extends it."""
    mode: Literal[SERVING_MODES] = "aggregated"
    speculative: SpeculativeSettings | None = None
    mig: str | None = Field(None, max_length=20)   # a MIG profile per replica, e.g. 3g.40gb (sizing.mig)


class AutoscalingSettings(_Strict):
    enabled: bool = False                    # KEDA ScaledObjects and the cluster autoscaler from plan.autoscale


class ServingSettings(ServingPlanSettings):
    burstScaling: bool = False               # KEDA into the nodes' idle GPUs
    autoscaling: AutoscalingSettings = AutoscalingSettings()   # docs/autoscaling-deploy.md
    namespace: K8sLabelName = SERVING_NAMESPACE

    @field_validator("namespace")
    @classmethod
    def _own_namespace(cls, v: str) -> str:
        if v in RESERVED_NAMESPACES or v.startswith("kube-"):
            raise ValueError(f"'{v}' belongs to the cluster or another component; use a namespace of its own, "
                             f"e.g. {SERVING_NAMESPACE}")
        return v


class AccuracyGateSettings(_Strict):
    enabled: bool | None = None              # default: on in staging and prod
    tasks: tuple[str, ...] = Field(("gsm8k", "mmlu_pro"), min_length=1)
    baseline: dict[str, Baseline] = Field(default_factory=lambda: {"gsm8k": 0.93, "mmlu_pro": 0.69})
    maxDrop: float = Field(0.01, gt=0)       # in score points: 0.01 is one point of accuracy

    @field_validator("maxDrop")
    @classmethod
    def _a_gate(cls, v: float) -> float:
        if v >= MAX_GATE_DROP:
            raise ValueError(f"{v:g} would pass a score that fell by half the scale or more: a gate that lets half "
                             f"the accuracy go is no gate; use less than {MAX_GATE_DROP:g}, e.g. 0.01 (one point, "
                             "the default)")
        return v

    @field_validator("tasks")
    @classmethod
    def _known_tasks(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [t for t in v if t not in ACCURACY_TASK_METRICS]
        if unknown:
            raise ValueError(f"no known metric for {', '.join(unknown)}; supported: {', '.join(ACCURACY_TASK_METRICS)}")
        if len(set(v)) != len(v):
            raise ValueError("a task is listed twice; list each once")
        return v

    @model_validator(mode="after")
    def _baselines(self):
        missing = [t for t in self.tasks if t not in self.baseline]
        if missing:
            raise ValueError(f"tasks {', '.join(missing)} have no BF16 baseline; add them to baseline")
        low = [t for t in self.tasks if self.maxDrop >= self.baseline[t]]
        if low:
            t = min(low, key=lambda task: self.baseline[task])
            raise ValueError(f"maxDrop {self.maxDrop:g} is not below the {t} baseline {self.baseline[t]:g}, so a "
                             f"score of 0 would pass; use a maxDrop below {self.baseline[t]:g}")
        return self


class LoadTestSettings(_Strict):
    enabled: bool = False                    # off by default: it sends real traffic, up to the sized capacity
    stepSeconds: int = Field(300, ge=30, le=3600)   # each rate step of the load test
    sweepSteps: int = Field(5, ge=1, le=20)         # evenly spaced rates up to the sized capacity
    arrivals: Literal["poisson", "constant"] = "poisson"   # poisson: what the plan assumes
    storageGi: int = Field(5, ge=1, le=1000)        # the results volume


class PlanRequestSettings(_Strict):
    """What a sizing plan needs, and nothing else: the one door for both a stack file (whose
    `StackSettings` extends it) and `llmserve size`'s flags (which fill the same fields, see
    llmserve/size_flags.py), so a bad value meets the same rule and the same message either way.
    Composed of the sub-models others extend (workload, model, pools, sizing), fields unrenamed."""
    region: str
    workload: WorkloadSettings
    model: ModelSettings = ModelSettings()
    gpuPools: tuple[GpuPoolSettings, ...] = Field(min_length=1)
    replicas: int | Literal["auto"] = "auto"
    sizing: SizingSettings = SizingSettings()
    serving: ServingPlanSettings = ServingPlanSettings()    # mode and speculation (StackSettings: ServingSettings)

    @field_validator("replicas")
    @classmethod
    def _replicas(cls, v):
        if isinstance(v, int) and v < 1:
            raise ValueError(f"must be 'auto' or an integer of at least 1 (got {v})")
        return v

    @property
    def zones(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p.zone for p in self.gpuPools))

    def request_body(self) -> dict:
        """This request as settings keys again (what `llmserve size` applies its flags to)."""
        # exclude_unset: a key the stack left to its default stays unset (lengthsFile refuses an
        # inputTokens given beside it, and a dump would otherwise give every default).
        include: dict = {name: True for name in PlanRequestSettings.model_fields}
        include["serving"] = set(ServingPlanSettings.model_fields)     # a stack's burstScaling is no request key
        return self.model_dump(include=include, exclude_unset=True)

    def plan_request(self) -> PlanRequest:
        """The sizing request, every field read through REQUEST_TABLE (pools and replicas converted)."""
        converted = {
            "pools": tuple(Pool(p.zone, p.instanceType, p.nodes, p.name or "") for p in self.gpuPools),
            "replicas": None if self.replicas == "auto" else self.replicas,
            "speculative": self.serving.speculative.request() if self.serving.speculative else None,
            "traffic": self.workload._curve,
        }
        fields = {row.field: converted[row.field] if row.field in converted else self._setting(row.key)
                  for row in REQUEST_TABLE if not row.field.startswith("workload.")}
        return PlanRequest(workload=self.workload.sizing_workload(), **fields)

    def _setting(self, key: str):
        value = self
        for part in key.split("."):
            value = getattr(value, part)
        return value


# The reference design (no stack file): the reference workload (10 QPS, 1000 in / 300 out, the
# sizing reference's SLOs at p95) on one p5.48xlarge in each of two zones; every other key its default.
REFERENCE_REQUEST = {"region": "us-east-1", "workload": {"qps": 10.0},
                     "gpuPools": [{"zone": "us-east-1a"}, {"zone": "us-east-1b"}]}

@dataclass(frozen=True)
class RequestKey:
    """One field of the sizing request: where a stack file sets it and which `llmserve size` flag
    sets it (None: none does). The one table behind `plan_request()`, `REQUEST_KEYS` (a sizing
    error names the key to change) and the CLI's flags (llmserve/size_flags.py)."""
    field: str              # a PlanRequest field, or `workload.<Workload field>`
    key: str                # the llm-serving: key
    flag: str | None = None


REQUEST_TABLE: tuple[RequestKey, ...] = (
    RequestKey("model_config", "model.config", "--model-config"),
    RequestKey("model", "model.id", "--model"),
    RequestKey("layout", "model.layout", "--layout"),
    RequestKey("weights", "model.weights", "--weights"),
    RequestKey("kv_dtype", "model.kvCacheDtype", "--kv-dtype"),
    RequestKey("tp", "model.tensorParallel", "--tp"),
    RequestKey("workload.qps", "workload.qps", "--qps"),
    RequestKey("workload.concurrency", "workload.concurrency", "--concurrency"),
    RequestKey("workload.lengths", "workload.lengthsFile", "--lengths"),
    RequestKey("workload.input_tokens", "workload.inputTokens", "--input-tokens"),
    RequestKey("workload.output_tokens", "workload.outputTokens", "--output-tokens"),
    RequestKey("workload.stated_max_model_len", "workload.maxModelLen", "--max-model-len"),
    RequestKey("workload.shared_prefix_tokens", "workload.sharedPrefixTokens", "--shared-prefix-tokens"),
    RequestKey("workload.prefix_hit_fraction", "workload.prefixHitFraction", "--prefix-hit-fraction"),
    RequestKey("workload.ttft_slo_s", "workload.ttftSeconds", "--ttft-slo"),
    RequestKey("workload.tpot_slo_s", "workload.tpotSeconds", "--tpot-slo"),
    RequestKey("workload.slo_statistic", "workload.sloStatistic", "--slo-statistic"),
    RequestKey("replicas", "replicas", "--replicas"),
    RequestKey("profile", "sizing.profile", "--profile"),
    RequestKey("gpu_hour_price", "sizing.gpuHourPrice", "--gpu-hour-price"),
    RequestKey("instance_price", "sizing.instancePrice"),
    RequestKey("pools", "gpuPools"),      # the CLI's pool flags (--zones, --gpu, ...) lay out pools
    RequestKey("serving_mode", "serving.mode"),
    RequestKey("speculative", "serving.speculative"),   # converted: sizing.roles.SpeculativeRequest
    RequestKey("traffic", "workload.traffic"),   # a load over time (sizing.load_curve, sizing.autoscale)
    RequestKey("mig_profile", "serving.mig", "--mig"),
)
# The settings key (under llm-serving:) each `PlanRequest` field comes from, as plan_request()
# fills it: a `SizingError(field=...)` names the key the user can change.
REQUEST_KEYS = {row.field: row.key for row in REQUEST_TABLE}


class StackSettings(PlanRequestSettings):
    stack: str
    environment: Literal["dev", "staging", "prod"]
    kubernetesVersion: Literal[KUBERNETES_VERSIONS] = "1.35"
    # The EKS-optimized AMI release every node group runs (`aws eks describe-nodegroup ...
    # releaseVersion`, e.g. 1.35.0-20251120); None: the newest for kubernetesVersion when a group is
    # created, then left where it is. Setting it moves the nodes (docs/operations.md).
    nodeAmiReleaseVersion: str | None = Field(None, pattern=r"^[0-9]+\.[0-9]+\.[0-9]+-[0-9]{8}$")   # ASCII: \d takes any digit
    apiAllowedCidrs: tuple[str, ...] = Field(min_length=1)
    # Who may reach the gateway's load balancer. Open to all only when said so: ["0.0.0.0/0"];
    # an empty list would render an empty loadBalancerSourceRanges, which Kubernetes reads as open.
    gatewayAllowedCidrs: tuple[str, ...] = Field(("0.0.0.0/0",), min_length=1)
    tags: dict[str, str] = Field(default_factory=dict)
    network: NetworkSettings = NetworkSettings()
    systemNodes: SystemNodeSettings = SystemNodeSettings()
    gateway: GatewaySettings
    serving: ServingSettings = ServingSettings()
    accuracyGate: AccuracyGateSettings = AccuracyGateSettings()
    loadTest: LoadTestSettings = LoadTestSettings()
    adminRoleArns: tuple[RoleArn, ...] = ()
    previewRoleArns: tuple[RoleArn, ...] = ()   # read-only access entries (AmazonEKSViewPolicy): the CI preview role

    @field_validator("apiAllowedCidrs", "gatewayAllowedCidrs")
    @classmethod
    def _cidrs(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for c in v:
            if ipaddress.ip_network(c, strict=True).version != 4:
                raise ValueError(f"{c}: use IPv4 CIDRs (the cluster and its load balancer are IPv4)")
        return v

    @field_validator("tags")
    @classmethod
    def _tags(cls, v: dict[str, str]) -> dict[str, str]:
        return valid_tags(v)

    @field_validator("adminRoleArns", "previewRoleArns")
    @classmethod
    def _one_entry_each(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        """Each role once: "An IAM principal can't be included in more than one access entry" (EKS
        User Guide, "Create access entries"), and two ARNs differing in path or case name one role."""
        seen: dict[tuple, int] = {}
        for i, arn in enumerate(v):
            first = v[seen.setdefault(role_key(arn), i)]
            if seen[role_key(arn)] != i:
                what = (f"{ascii(arn)} is listed twice" if first == arn else
                        f"{ascii(first)} and {ascii(arn)} name one role (IAM role names are unique in an account, "
                        "whatever their path or case)")
                raise ValueError(f"{what}; EKS takes an IAM principal in one access entry only, so list it once")
        return v

    # -- derived ----------------------------------------------------------------------------
    @property
    def nat_per_zone(self) -> bool:
        return self.network.natPerZone if self.network.natPerZone is not None else self.environment == "prod"

    @property
    def required_secrets(self) -> tuple[str, ...]:
        """The secret keys this stack's program reads."""
        return SECRET_KEYS + (TLS_SECRET_KEYS if self.gateway.certificate == "provided" else ())

    @property
    def accuracy_gate_enabled(self) -> bool:
        e = self.accuracyGate.enabled
        return e if e is not None else self.environment in ("staging", "prod")
