"""Load over time: the request rate a day (or any span) brings, as points joined by straight lines.

Not request lengths (that is `sizing.traffic`): this is how many requests per second arrive at
each moment, which the autoscaling policy (`sizing.autoscale`) plans the trough and the peak
from and the simulator replays (`simulate --traffic FILE`).

Forms, all pure (text or values in, a `LoadCurve` out; reading a file is the caller's):
- hourly: 24 rates, one at the start of each hour of a day; the rate moves in a straight line
  to the next hour's, and from 23:00 back to the first hour's at 24:00 (a day repeats);
- by hour: {hour: rate} for some hours of 0-23, straight lines between them, wrapping midnight;
- a CSV file `t_s,qps`: a header, then one point per line, times from 0 s strictly rising; the
  curve ends at its last point (a day compressed into 6 h is a file whose last time is 21,600).

Every rate is finite and above 0: the floor is planned for the trough, and a plan needs a rate.
Errors name the key or the file and line, and say what kind of value was found, never the value.
"""
from __future__ import annotations

import bisect
import csv
import io
import math
from dataclasses import dataclass

from inputs.untrusted import described

DAY_S = 86_400
MAX_POINTS = 100_000              # a week at one point each 6 s
MAX_SPAN_S = 7 * DAY_S            # the simulator's longest run (simulator.workload.MAX_DURATION_S)
MAX_QPS = 1_000_000.0             # a rate above this is a unit error, not a service's load
MAX_FIELD_CHARS = 32              # a number's text read at most
CSV_COLUMNS = ("t_s", "qps")


class LoadCurveError(ValueError):
    """A load curve that cannot be used; `field` names what to fix (a key, a file's line)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field


@dataclass(frozen=True)
class LoadCurve:
    times_s: tuple[float, ...]     # strictly rising, from 0
    qps: tuple[float, ...]         # the rate at each time; straight lines between
    source: str = "hourly"         # hourly | by-hour | file

    @property
    def span_s(self) -> float:
        return self.times_s[-1]

    def at(self, t: float) -> float:
        """The rate at `t` seconds (the first rate before 0, the last after the end)."""
        ts, qs = self.times_s, self.qps
        if t <= ts[0]:
            return qs[0]
        if t >= ts[-1]:
            return qs[-1]
        i = bisect.bisect_right(ts, t)
        t0, t1, q0, q1 = ts[i - 1], ts[i], qs[i - 1], qs[i]
        return q0 + (q1 - q0) * (t - t0) / (t1 - t0)

    @property
    def peak_qps(self) -> float:
        return max(self.qps)      # a straight line peaks at one of its ends

    @property
    def peak_at_s(self) -> float:
        return self.times_s[self.qps.index(self.peak_qps)]

    @property
    def trough_qps(self) -> float:
        return min(self.qps)

    @property
    def trough_at_s(self) -> float:
        return self.times_s[self.qps.index(self.trough_qps)]

    @property
    def mean_qps(self) -> float:
        """The mean rate over the span (the area under the lines over the span)."""
        ts, qs = self.times_s, self.qps
        if len(ts) == 1 or self.span_s <= 0:
            return qs[0]
        area = sum((ts[i + 1] - ts[i]) * (qs[i] + qs[i + 1]) / 2 for i in range(len(ts) - 1))
        return area / self.span_s

    def max_between(self, t0: float, t1: float) -> float:
        """The highest rate from t0 to t1 (at an end or at a point between)."""
        inner = [q for t, q in zip(self.times_s, self.qps) if t0 < t < t1]
        return max([self.at(t0), self.at(t1)] + inner)

    def describe(self) -> str:
        return (f"{self.source} curve over {self.span_s / 3600:g} h: trough {self.trough_qps:g} QPS at "
                f"{self.trough_at_s:g} s, peak {self.peak_qps:g} QPS at {self.peak_at_s:g} s")


def _rate(value, where: str) -> float:
    """A rate from a stack value or a CSV field: a finite number above 0 and at most MAX_QPS."""
    if isinstance(value, str):
        text = value.strip()
        if len(text) <= MAX_FIELD_CHARS and text.isascii():
            try:
                value = float(text)
            except ValueError:
                pass
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LoadCurveError(where, f"expected a rate in requests per second (got {described(value)})")
    if not math.isfinite(value) or value <= 0:
        got = "not a finite number" if not math.isfinite(value) else "0" if value == 0 else "a negative number"
        raise LoadCurveError(where, f"must be a finite rate above 0; the floor is planned for the trough (got {got})")
    if value > MAX_QPS:
        raise LoadCurveError(where, f"is above {MAX_QPS:,.0f} requests per second; check the unit")
    return float(value)


def hourly(values, field: str = "traffic") -> LoadCurve:
    """24 rates, one at the start of each hour; back to the first at 24:00."""
    if not isinstance(values, (list, tuple)) or len(values) != 24:
        raise LoadCurveError(field, f"an hourly curve has 24 rates, one per hour from 0:00 (got {described(values)})")
    qps = tuple(_rate(v, f"{field}[{i}]") for i, v in enumerate(values))
    return LoadCurve(tuple(3600.0 * h for h in range(25)), qps + (qps[0],), "hourly")


def by_hour(mapping: dict, field: str = "traffic") -> LoadCurve:
    """{hour: rate} for some hours of 0-23: straight lines between them, wrapping midnight."""
    if not isinstance(mapping, dict) or not mapping:
        raise LoadCurveError(field, f"expected {{hour: rate}} with hours 0-23 (got {described(mapping)})")
    if len(mapping) > 24:
        raise LoadCurveError(field, f"has {len(mapping)} hours; a day has 24 (0-23)")
    points: dict[int, float] = {}
    for key, value in mapping.items():
        hour = key if isinstance(key, int) and not isinstance(key, bool) else None
        if isinstance(key, str) and key.strip().isascii() and key.strip().isdigit() and len(key.strip()) <= 2:
            hour = int(key.strip())
        if hour is None or not 0 <= hour <= 23:
            raise LoadCurveError(field, f"an hour is a whole number from 0 to 23 (got {described(key)})")
        if hour in points:
            raise LoadCurveError(f"{field}.{hour}", "is given twice; give each hour once")
        points[hour] = _rate(value, f"{field}.{hour}")
    hours = sorted(points)
    # The day wraps: the last given hour runs on to the first given hour of the next day.
    ext = ([(hours[-1] - 24, points[hours[-1]])] + [(h, points[h]) for h in hours] +
           [(hours[0] + 24, points[hours[0]])])
    wrapped = LoadCurve(tuple(3600.0 * h for h, _ in ext), tuple(q for _, q in ext), "by-hour")
    start = wrapped.at(0.0)
    inner = [(3600.0 * h, points[h]) for h in hours if h > 0]
    times = (0.0,) + tuple(t for t, _ in inner) + (float(DAY_S),)
    return LoadCurve(times, (start,) + tuple(q for _, q in inner) + (start,), "by-hour")


def parse_curve_csv(text: str, source: str) -> LoadCurve:
    """A CSV of `t_s,qps` (the header first): times from 0 s strictly rising, at most a week."""
    if not text.strip():
        raise LoadCurveError(source, "is empty; give a header t_s,qps and one point per line")
    rows = csv.reader(io.StringIO(text))
    try:
        header = [h.strip() for h in next(rows)]
    except csv.Error:
        raise LoadCurveError(f"{source}: line 1", "is not CSV; give a header t_s,qps") from None
    if tuple(header) != CSV_COLUMNS:
        raise LoadCurveError(f"{source}: line 1", "the header must be exactly t_s,qps "
                                                  f"(got {len(header)} column{'s' if len(header) != 1 else ''})")
    times: list[float] = []
    qps: list[float] = []
    try:
        for row in rows:
            line = rows.line_num
            if not any(f.strip() for f in row):
                continue
            if len(row) != 2:
                raise LoadCurveError(f"{source}: line {line}", f"expected 2 fields, t_s and qps (got {len(row)})")
            if len(times) >= MAX_POINTS:
                raise LoadCurveError(source, f"has more than {MAX_POINTS:,} points")
            times.append(_time(row[0], f"{source}: line {line}: t_s", times))
            qps.append(_rate(row[1], f"{source}: line {line}: qps"))
    except csv.Error:
        raise LoadCurveError(f"{source}: line {rows.line_num}", "is not valid CSV") from None
    if len(times) < 2:
        raise LoadCurveError(source, "needs at least 2 points (a start at t_s 0 and an end)")
    return LoadCurve(tuple(times), tuple(qps), "file")


def _time(text: str, where: str, before: list[float]) -> float:
    value: object = text
    stripped = text.strip()
    if len(stripped) <= MAX_FIELD_CHARS and stripped.isascii():
        try:
            value = float(stripped)
        except ValueError:
            pass
    if not isinstance(value, float) or not math.isfinite(value) or value < 0:
        raise LoadCurveError(where, f"expected seconds from 0 (got {described(value)})")
    if not before and value != 0:
        raise LoadCurveError(where, "the first point must be at 0 s")
    if before and value <= before[-1]:
        raise LoadCurveError(where, "times must rise strictly from one line to the next")
    if value > MAX_SPAN_S:
        raise LoadCurveError(where, f"is past {MAX_SPAN_S:,} s (a week), the longest curve planned")
    return value


def from_setting(value, field: str = "traffic") -> LoadCurve:
    """A stack's `workload.traffic` that is not a file: 24 hourly rates, or {hour: rate}."""
    if isinstance(value, dict):
        return by_hour(value, field)
    return hourly(value, field)
