"""`llmserve size`'s serving-mode flags: `--serving-mode` and an explicit prefill/decode layout
(`--prefill-replicas N --prefill-tp T --decode-replicas M --decode-tp U`, fleet totals), as the
`PlanRequest` fields they set (`serving_mode`, `pool_layout`; sizing.disagg plans them). A stack's
`serving.mode` reaches the request through the settings; these flags override it."""
from __future__ import annotations

from typing import Optional

import typer

from .errors import fail

MODES = ("aggregated", "disaggregated", "auto")
LAYOUT_FLAGS = {"--prefill-replicas": "prefill_replicas", "--prefill-tp": "prefill_tp",
                "--decode-replicas": "decode_replicas", "--decode-tp": "decode_tp"}
# A sizing error's field -> the flag that fixes it
FIELD_FLAGS = {"serving_mode": "--serving-mode", **{f"pool_layout.{v}": k for k, v in LAYOUT_FLAGS.items()}}

SERVING_MODE = typer.Option(None, "--serving-mode",
                            help="aggregated, disaggregated (prefill and decode pools) or auto (the cheaper at the SLOs).")
PREFILL_REPLICAS = typer.Option(None, "--prefill-replicas", help="Evaluate this many prefill replicas (fleet total; with the other three).")
PREFILL_TP = typer.Option(None, "--prefill-tp", help="GPUs per prefill replica (with --prefill-replicas).")
DECODE_REPLICAS = typer.Option(None, "--decode-replicas", help="Evaluate this many decode replicas (fleet total).")
DECODE_TP = typer.Option(None, "--decode-tp", help="GPUs per decode replica (with --decode-replicas).")


def serving_fields(mode: Optional[str], layout: dict[str, Optional[int]]) -> dict:
    """The PlanRequest fields the flags set ({} when none is given); a bad combination exits 2
    naming the option."""
    from sizing.roles import PoolLayout

    if mode is not None and mode not in MODES:
        fail(f"--serving-mode: unknown mode '{mode[:40]}'; choose one of: {', '.join(MODES)}")
    given = {flag: v for flag, v in layout.items() if v is not None}
    out: dict = {} if mode is None else {"serving_mode": mode}
    if not given:
        return out
    missing = [flag for flag in LAYOUT_FLAGS if flag not in given]
    if missing:
        fail(f"{missing[0]}: an explicit layout needs --prefill-replicas, --prefill-tp, --decode-replicas and "
             f"--decode-tp together (missing: {', '.join(missing)})")
    for flag, v in given.items():
        if v < 1:
            fail(f"{flag}: must be an integer of at least 1 (got {v})")
    if mode == "aggregated":
        fail("--serving-mode: an explicit prefill/decode layout is disaggregated; give --serving-mode "
             "disaggregated or auto, or drop the layout")
    out["pool_layout"] = PoolLayout(**{LAYOUT_FLAGS[f]: v for f, v in given.items()})
    out.setdefault("serving_mode", "disaggregated")
    return out
