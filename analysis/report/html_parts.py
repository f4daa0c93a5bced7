"""The report page's small parts: a value formatted, a summary row shown with cells of its own, a table."""
from __future__ import annotations

import html
from collections.abc import Collection

from tailrace.contract.summary import (
    Estimate,
    LatencyRow,
    Row,
)


def _fmt(v, digits: int = 2) -> str:
    """A table cell's value: a float to `digits` places (one that rounds to zero without its sign: a leg that is
    a tiny negative of rounding shows 0.00, not -0.00), None as a dash."""
    if v is None:
        return "–"
    if isinstance(v, float):
        text = f"{v:,.{digits}f}"
        return text[1:] if text.startswith("-") and not text.strip("-0.,") else text
    return html.escape(str(v))


class Shown:
    """A row of the summary shown with some cells of its own (formatted, or computed from the row)."""

    def __init__(self, row: Row | None, **cells) -> None:
        self.row, self.cells = row, cells

    def get(self, column: str):
        return self.cells[column] if column in self.cells else getattr(self.row, column, None)


def _cell(row: Row | Shown | dict, column: str):
    """The value a table shows in `column` of `row` (a summary row's field of that name)."""
    if isinstance(row, (Shown, dict)):
        return row.get(column)
    return getattr(row, column, None)


def _table(rows: list, columns: list[tuple[str, str]], left: Collection[str] = frozenset(), css: dict | None = None
           ) -> str:
    if not rows:
        return "<p class='note'>none</p>"
    head = "".join(f"<th class='{'l' if k in left else ''}'>{html.escape(label)}</th>" for k, label in columns)
    body = []
    for r in rows:
        cells = []
        for k, _ in columns:
            cls = ("l " if k in left else "") + ((css or {}).get(k, lambda _r: "")(r))
            cells.append(f"<td class='{cls.strip()}'>{_fmt(_cell(r, k))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<div class='scroll'><table><tr>{head}</tr>{''.join(body)}</table></div>"


def _pct(row: LatencyRow, name: str) -> str:
    est = row.percentiles[name]
    if est.value is None:
        worth = est.effective_n
        extra = f" independent; worth {worth:,}" if worth is not None and est.n is not None and worth < est.n else ""
        return f"<span class='note'>needs ≥ {est.min_samples:,}{extra}</span>"
    if est.ci_low is None:
        return (f"{est.value:.2f} <span class='note'>[no interval: worth {est.effective_n:,} independent, "
                f"needs ≥ {est.min_samples:,}]</span>")
    return f"{est.value:.2f} <span class='note'>[{est.ci_low:.2f}, {est.ci_high:.2f}]</span>"


def _p(value) -> str | None:
    """A p-value as read: two significant digits, '< 0.0001' below that."""
    if value is None:
        return None
    return "< 0.0001" if value < 1e-4 else f"{value:.2g}"


def _ci(pair) -> str:
    return "" if not pair or pair[0] is None else f"[{pair[0]:.2f}, {pair[1]:.2f}]"


def _token_cell(e: Estimate | None) -> str | None:
    """A token percentile as text: the value and its interval, or why there is no interval / no value."""
    if e is None:
        return None
    if e.value is None:
        return f"needs ≥ {e.min_samples:,}"
    if e.ci_low is None:
        return f"{e.value:.2f} (no interval: worth {e.effective_n:,}, needs ≥ {e.min_samples:,})"
    return f"{e.value:.2f} [{e.ci_low:.2f}, {e.ci_high:.2f}]"


def _iso(ns) -> str | None:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC" \
        if ns else None
