"""Calibration: the fitted profile is what the fit produces, and its error per row is bounded."""
from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from sizing.calibration import errors, fit, load_measurements, predict
from sizing.profiles import get_profile


REFERENCE = Path(__file__).resolve().parent.parent / "sizing" / "data" / "reference_measurements.csv"


def test_every_reference_measurement_is_accounted_for():
    """Every row of the reference measurements (../shared/reference/calibration_measurements.csv,
    copied unedited into sizing/data so a clone without ../shared runs this) is read or says why not."""
    with REFERENCE.open() as fh:
        shared_ids = {int(r["id"]) for r in csv.DictReader(fh)}
    ours = {m.id for m in load_measurements(used_only=False)}
    assert ours == shared_ids


def test_unused_rows_say_why():
    unused = [m for m in load_measurements(used_only=False) if not m.used]
    assert unused                   # the file keeps rows it does not fit (variable lengths, static batching)
    for m in unused:
        if not m.used:
            assert m.note, f"row {m.id} is not used and does not say why"


def test_stored_calibrated_profile_is_the_fit():
    fitted, rms = fit()
    stored = get_profile("calibrated")
    assert (stored.mfu, stored.decode_bw_fraction) == (fitted.mfu, fitted.decode_bw_fraction)
    assert rms < 0.10


def test_efficiencies_stay_within_what_an_h200_measures():
    from sizing.calibration import DECODE_BW_BOUNDS, MFU_BOUNDS, fit_prefill_mfu
    stored = get_profile("calibrated")
    assert MFU_BOUNDS[0] <= stored.mfu <= MFU_BOUNDS[1] == 0.74
    assert DECODE_BW_BOUNDS[0] <= stored.decode_bw_fraction <= DECODE_BW_BOUNDS[1] == 0.89
    mfu, rms = fit_prefill_mfu(stored)          # one H200 layer's prefill, 512-8,192 tokens
    assert 0.58 <= mfu <= 0.67 and rms < 0.08


def test_the_step_model_reproduces_the_h200_mixed_steps():
    """At the H200's measured figures (prefill MFU, 89% of HBM bandwidth), within 25% per row and
    15% RMS (log): one roofline over all tokens, weights read once, each part's attention."""
    from dataclasses import replace

    from sizing.calibration import fit_prefill_mfu, layer_step_ms, load_layer_measurements
    stored = get_profile("calibrated")
    h200 = replace(stored, mfu=fit_prefill_mfu(stored)[0], decode_bw_fraction=0.89)
    rows = [r for r in load_layer_measurements() if r.kind == "mixed" and r.decodes and r.prompt_tokens]
    errs = [math.log(layer_step_ms(r, h200) / r.ms) for r in rows]
    assert len(rows) == 32 and max(abs(math.exp(e) - 1) for e in errs) < 0.25
    assert (sum(e * e for e in errs) / len(errs)) ** 0.5 < 0.15


def test_calibrated_profile_is_no_worse_than_the_reference():
    def rms(profile):   # the fit's own measure: RMS of the log error
        errs = [math.log(p / m.output_tok_s) for m, p, _ in errors(profile)]
        return (sum(e * e for e in errs) / len(errs)) ** 0.5
    assert rms(get_profile("calibrated")) <= rms(get_profile("seed")) + 1e-9


@pytest.mark.parametrize("row", [m.id for m in load_measurements()])
def test_calibrated_error_per_row_within_30_percent(row):
    (m, predicted, err), = [t for t in errors(get_profile("calibrated")) if t[0].id == row]
    assert abs(err) < 0.30, f"row {row}: predicted {predicted:.0f} tok/s, measured {m.output_tok_s:.0f}"


def test_the_accuracy_benchmark_expresses_every_fixed_length_row_of_the_shared_file():
    """bench/bench_accuracy.py reads the shared file's columns (held-out files use them too): the 13
    offline rows are expressed, per-GPU figures scaled to the TP group; the rest say why not."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "bench" / "bench_accuracy.py"
    spec = importlib.util.spec_from_file_location("bench_accuracy", path)
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench         # dataclasses look their module up there
    spec.loader.exec_module(bench)
    rows, skipped = bench.read_shared_format(REFERENCE)      # the shared file, copied into sizing/data
    ours = {str(m.id): m.output_tok_s for m in load_measurements()}
    assert {r.id: r.measured["output_tok_s"] for r in rows} == pytest.approx(ours)
    assert len(skipped) == 9 and all(": " in why for why in skipped)
    report, _ = bench.report(rows, "calibrated")
    assert "Median absolute error (profile calibrated):" in report and "output_tok_s" in report
    # the benchmark's own rows (the calibration's) read as the engine they ran: the calibration's predictions
    profile = get_profile("calibrated")
    assert {r.id: bench.predict(r, "calibrated")["output_tok_s"] for r in bench.read_project_rows()} == pytest.approx(
        {str(m.id): predict(m, profile) for m in load_measurements()}, rel=1e-9)
