"""The one entry point: read a results directory, write figures, ``report.md`` and ``index.html``."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from cirbench.report.analysis.loading.load import load_results
from cirbench.report.analysis.verdicts.published import load_published
from cirbench.report.render.cells_csv import write_final_metrics, write_selected_metrics, write_table
from cirbench.report.render.content import assemble
from cirbench.report.render.html import render_html
from cirbench.report.render.leaderboard_render import (
    LEADERBOARD_FILES, TUNED_LEADERBOARD_FILE, leaderboard_frame, leaderboard_tex, tuned_frame,
)
from cirbench.report.render.markdown import render_markdown
from cirbench.results.atomic import atomic_write


def build_report(results_dir: Path | str, output_dir: Path | str, published: Sequence[Path | str] = ()) -> Path:
    """Build the report of ``results_dir`` into ``output_dir`` and return the HTML page's path.

    Writes ``<output>/<dataset>_<backbone>_<protocol>/*.png``, the setting's tables of cells
    (``final_metrics.csv`` and ``selected_metrics.csv``, :mod:`cirbench.report.render.cells_csv`)
    and its leaderboard (``leaderboard.csv`` and ``leaderboard.tex``,
    :mod:`cirbench.report.render.leaderboard_render`; ``tuned_leaderboard.csv`` where it has a
    tuned leaderboard) per setting, ``report.md``
    (linking those PNGs) and a self-contained ``index.html`` (embedding them). Figure folders
    of settings no longer in the results are left alone; a setting's folder is rewritten
    whole, so figures that no longer apply do not linger. FashionIQ and CIRR settings get the
    papers' published numbers beside them, plus the rows of the ``published`` CSV files
    (see :mod:`cirbench.report.analysis.verdicts.published`). Raises
    :class:`~cirbench.report.analysis.loading.load.ReportError` when ``results_dir`` holds no runs, and
    :class:`~cirbench.report.analysis.verdicts.published.PublishedFileError` for a bad file of published numbers.
    """
    output = Path(output_dir)
    numbers = load_published(published)
    data = load_results(results_dir)
    output.mkdir(parents=True, exist_ok=True)
    for setting in data.settings:
        folder = output / setting.slug
        if folder.is_dir():
            for stale in [*folder.glob("*.png"), *(folder / name for name in (*LEADERBOARD_FILES, TUNED_LEADERBOARD_FILE))]:
                stale.unlink(missing_ok=True)
    content = assemble(data, output, numbers)
    for section in content.sections:
        folder = output / section.setting.slug
        write_final_metrics(section.setting, folder)
        write_selected_metrics(section.setting, folder)
        if section.leaderboard is not None:
            csv, tex = LEADERBOARD_FILES
            write_table(leaderboard_frame(section.leaderboard), folder / csv)
            _write_text(folder / tex, leaderboard_tex(section.leaderboard))
        if section.tuned is not None:
            write_table(tuned_frame(section.tuned), folder / TUNED_LEADERBOARD_FILE)
    markdown = render_markdown(content, output)
    page = render_html(content)
    _write_text(output / "report.md", markdown)
    _write_text(output / "index.html", page)
    return output / "index.html"


def _write_text(path: Path, text: str) -> None:
    def write(tmp: Path) -> None:
        tmp.write_text(text, encoding="utf-8")
        tmp.chmod(0o644)  # mkstemp creates 0600; a report is meant to be read by others

    atomic_write(path, write)

