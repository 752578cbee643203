"""The report every case prints: figures as text tables (one column per model, or one column of
labelled rows) and as JSON. A table is a tuple of (label, key) rows, a key of None being a heading;
a value is formatted one way everywhere: "-" when not measured, "n/a" for NaN, yes/NO for checks."""

import json
import math
from typing import Any, Dict, Optional, Sequence, Tuple

__all__ = ["Rows", "format_columns", "format_rows", "format_value", "present", "to_json"]

Rows = Tuple[Tuple[str, Optional[str]], ...]


def format_value(value: Any) -> str:
    """One figure as a table cell."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, int):
        return str(value)
    if not isinstance(value, float):
        return str(value)
    if math.isnan(value):
        return "n/a"
    if 0 < abs(value) < 1e-3:
        return f"{value:.2e}"  # Small errors and overheads keep their magnitude.
    return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"


def present(rows: Rows, results: Sequence[Dict[str, Any]]) -> Rows:
    """rows whose key some result has, under the first row if it is a heading and any row is left."""
    shown = [row for row in rows if row[1] is not None and any(row[1] in r for r in results)]
    return (rows[0],) + tuple(shown) if shown and rows[0][1] is None else tuple(shown)


def format_columns(rows: Rows, results: Dict[str, Dict[str, Any]]) -> str:
    """The rows as a table with one column per result (by name)."""
    names = list(results)
    width = max(len(label) for label, _ in rows) + 2
    lines = [" " * width + "".join(f"{n:>14}" for n in names)]
    for label, key in rows:
        if key is None:
            lines.append(label)
            continue
        lines.append(f"{label:<{width}}" + "".join(f"{format_value(results[n].get(key)):>14}" for n in names))
    return "\n".join(lines)


def format_rows(title: str, rows: Rows, result: Dict[str, Any]) -> str:
    """The rows of one result under title, then what was not measured and why."""
    lines = [title]
    for label, key in rows:
        lines.append(label if key is None else f"{label:58s} {format_value(result.get(key)):>10}")
    for what, why in result.get("not_measured", {}).items():
        lines.append(f"not measured: {what}: {why}")
    return "\n".join(lines)


def _finite(value: Any) -> Any:
    """value with every NaN replaced by None (JSON has no NaN)."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def to_json(results: Dict[str, Dict[str, Any]]) -> str:
    """The figures of every model as indented JSON with sorted keys (NaN written as null)."""
    return json.dumps(_finite(results), indent=2, sort_keys=True)
