"""``cirbench report``: figures, ConeSep-style tables, a Markdown summary and a
self-contained HTML page from a results directory."""

from cirbench.report.build import build_report
from cirbench.report.load import ReportError, load_results

__all__ = ["ReportError", "build_report", "load_results"]
