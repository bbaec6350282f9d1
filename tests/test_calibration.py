"""Calibration: the fitted profile is what the fit produces, and its error per row is bounded."""
from __future__ import annotations

import csv
import math

import pytest

from sizing.calibration import errors, fit, load_measurements
from sizing.profiles import get_profile


def test_every_shared_measurement_is_accounted_for(shared_dir):
    with (shared_dir / "reference" / "calibration_measurements.csv").open() as fh:
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
    assert (stored.mfu, stored.real_factor) == (fitted.mfu, fitted.real_factor)
    assert rms < 0.15


def test_calibrated_profile_is_no_worse_than_the_reference():
    def rms(profile):   # the fit's own measure: RMS of the log error
        errs = [math.log(p / m.output_tok_s) for m, p, _ in errors(profile)]
        return (sum(e * e for e in errs) / len(errs)) ** 0.5
    assert rms(get_profile("calibrated")) <= rms(get_profile("reference")) + 1e-9


@pytest.mark.parametrize("row", [m.id for m in load_measurements()])
def test_calibrated_error_per_row_within_30_percent(row):
    (m, predicted, err), = [t for t in errors(get_profile("calibrated")) if t[0].id == row]
    assert abs(err) < 0.30, f"row {row}: predicted {predicted:.0f} tok/s, measured {m.output_tok_s:.0f}"
