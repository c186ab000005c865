"""``cirbench report``: figures, ConeSep-style tables, a Markdown summary and a
self-contained HTML page from a results directory.

In four rooms that import one way, analysis -> tables, figures -> render
(``docs/architecture.md``, "The report's rooms"); this module holds only the public names."""

from cirbench.report.analysis.loading.load import ReportError, load_results
from cirbench.report.render.build import build_report

__all__ = ["ReportError", "build_report", "load_results"]
