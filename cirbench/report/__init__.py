"""``cirbench report``: figures, ConeSep-style tables, a Markdown summary and a
self-contained HTML page from a results directory."""

from cirbench.report.analysis.load import ReportError, load_results
from cirbench.report.render.build import build_report

__all__ = ["ReportError", "build_report", "load_results"]
