"""Waste reports: the ledger of a period as HTML pages with inline SVG charts, per cluster and team."""

from gpusteward.report.figures import Advice, ReportData, Waster, gather
from gpusteward.report.render import (
    PERIOD_DAYS,
    Period,
    Written,
    period_bounds,
    render,
    write_reports,
)

__all__ = [
    "PERIOD_DAYS",
    "Advice",
    "Period",
    "ReportData",
    "Waster",
    "Written",
    "gather",
    "period_bounds",
    "render",
    "write_reports",
]
