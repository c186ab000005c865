"""The harness from Python, with the objects the command line uses (it only parses, calls
these and shows what they return): a grid as ``cirbench run``, ``sweep`` or ``calibrate``
builds it (:mod:`cirbench.api.grids`), its pre-flight and run, a calibration's checks and
the report (:mod:`cirbench.api.reports`), and a study file (:mod:`cirbench.api.study`).

```python
from cirbench import api

grid = api.grid(["sprc"], [0.5], dataset="shapes-mini", epochs=1, output="results")
api.check(grid)
outcomes = api.run(grid)
api.write_report("results", "reports")
```
"""

from cirbench.api.grids import calibration, check, grid, kept_set_fields, resolved_holdout, run, sweep
from cirbench.api.reports import REPORT_ERRORS, Calibration, WrittenReport, check_calibration, write_report
from cirbench.api.study import StudyRunner, run_study, study_grid

__all__ = ["REPORT_ERRORS", "Calibration", "StudyRunner", "WrittenReport", "calibration", "check", "check_calibration",
           "grid", "kept_set_fields", "resolved_holdout", "run", "run_study", "study_grid", "sweep", "write_report"]
