#!/usr/bin/env python3
"""Held-out check of the config parser: every `*_config.json` under a folder (AIConfigurator's
wheel: aiconfigurator_core/model_configs) either parses with total parameters within 3% of the
size in its name ("30B-A3B": 30 B) or is refused with a ConfigError naming a field; none is
misread. `hf_quant_config.json` files (quantization only, no architecture) are skipped.

    .venv/bin/python scripts/heldout_configs.py /work/aic/wheel/aiconfigurator_core/model_configs
"""
from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sizing.architecture import ConfigError  # noqa: E402
from sizing.config_parse import parse_config  # noqa: E402

SIZE = re.compile(r"(?<![\d.x])(\d+(?:\.\d+)?)B(?:-A\d+(?:\.\d+)?B)?(?![a-z])", re.I)
TOLERANCE = 0.03


def named_size_b(name: str) -> float | None:
    """The total size in a checkpoint's name (billions), when it has one."""
    m = SIZE.search(name.replace("_config.json", ""))
    return float(m.group(1)) if m else None


def _stem(name: str) -> str:
    return re.sub(r"-(bf16|fp8|nvfp4|fp4)$", "", name.lower().replace("_config.json", ""))


def card_sizes() -> dict[str, float]:
    """The catalog's model-card totals by checkpoint stem (org--name, precision suffix dropped):
    names round (gpt-oss-20b is 21 B, Nemotron 3 Nano 30B-A3B 31.6 B), the card does not."""
    from sizing.catalog import MODELS_DIR
    import yaml
    index = yaml.safe_load((MODELS_DIR / "index.yaml").read_text())["models"]
    return {_stem(hf.replace("/", "--")): e["card"]["total_b"] for e in index.values()
            for hf in [e["hf_id"], *e.get("also", [])]}


def judge(path: Path, cards: dict[str, float] | None = None) -> tuple[str, str]:
    """('planned', figures) | ('refused', field) | ('misread', why)."""
    try:
        arch = parse_config(json.loads(path.read_text()))
    except ConfigError as exc:
        return "refused", exc.field
    total = arch.total_params / 1e9
    size = named_size_b(path.name)
    card = (cards or {}).get(_stem(path.name))
    if card is not None and abs(total / card - 1) <= TOLERANCE:
        return "planned", f"{total:.1f} B (card {card:g} B)"
    if size is not None and abs(total / size - 1) > TOLERANCE:
        return "misread", f"{total:.1f} B parsed against {size:g} B in its name"
    return "planned", f"{total:.1f} B" + (f" (name {size:g} B)" if size else " (no size in the name)")


def main(folder: str) -> int:
    files = sorted(p for p in Path(folder).glob("*_config.json") if not p.name.endswith("hf_quant_config.json"))
    cards = card_sizes()
    verdicts = {p.name: judge(p, cards) for p in files}
    for name, (kind, detail) in verdicts.items():
        print(f"{kind:8} {detail:40} {name}")
    kinds = Counter(k for k, _ in verdicts.values())
    fields = Counter(d for k, d in verdicts.values() if k == "refused")
    print(f"\n{len(files)} configs: {kinds['planned']} planned, {kinds['refused']} refused, {kinds['misread']} misread")
    print("refused by field: " + ", ".join(f"{f} {n}" for f, n in fields.most_common()))
    return 1 if kinds["misread"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "/work/aic/wheel/aiconfigurator_core/model_configs"))
