"""The harness from Python, with the objects the command line uses (it only parses, calls
these and shows what they return): a grid as ``cirbench run``, ``sweep`` or ``calibrate``
builds it (:mod:`cirbench.api.grids`), its pre-flight and run, a calibration's checks and
the report (:mod:`cirbench.api.reports`), a study file (:mod:`cirbench.api.study`) and a
report's cells re-run here (:mod:`cirbench.api.reproduce`).

docs/usage.md ("From Python") gives a tested example.
"""

from cirbench.api.grids import calibration, check, grid, kept_set_fields, resolved_holdout, run, sweep
from cirbench.api.reports import REPORT_ERRORS, Calibration, WrittenReport, check_calibration, write_report
from cirbench.api.reproduce import Reproduction, reproduce
from cirbench.api.study import StudyRunner, run_study, study_grid

__all__ = ["REPORT_ERRORS", "Calibration", "Reproduction", "StudyRunner", "WrittenReport", "calibration", "check",
           "check_calibration", "grid", "kept_set_fields", "reproduce", "resolved_holdout", "run", "run_study", "study_grid",
           "sweep", "write_report"]
