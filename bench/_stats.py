"""The statistics every case reports with: medians, ratios and memory deltas from raw samples.

One definition each, so two figures of one name never disagree: a median of nothing is NaN (JSON
null, "n/a" in a table), never an exception and never a made-up 0.
"""

import math
import statistics
from typing import Any, Dict, Iterable, Sequence

__all__ = ["MIB", "median", "median_of_medians", "mib_delta", "ratio"]

MIB = 1024.0 * 1024.0


def median(values: Iterable[float]) -> float:
    """The median of values as a float; NaN when there are none.

    Args:
      values: samples (any iterable; consumed once).

    Returns:
      Their median, or NaN for no samples.
    """
    samples = list(values)
    return float(statistics.median(samples)) if samples else float("nan")


def median_of_medians(reports: Sequence[Dict[str, Any]], key: str) -> float:
    """The median over reports of each report's median of its `key` list (one per fresh process).

    Args:
      reports: measuring processes' reports.
      key: a list-valued key of each (e.g. "latency_ms").

    Returns:
      The median of the per-process medians; NaN when no report has a sample.
    """
    return median(median(r[key]) for r in reports if r[key])


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator; NaN when either is NaN or the denominator is 0."""
    if math.isnan(numerator) or math.isnan(denominator) or not denominator:
        return float("nan")
    return numerator / denominator


def mib_delta(report: Dict[str, Any], key: str, since: str = "rss_before_kib") -> float:
    """report[key] - report[since], KiB figures, in MiB (what loading or running grew)."""
    return (report[key] - report[since]) / 1024.0
