"""The order of a report, whatever its format: the leaderboards first, then a linked table of
contents, then per setting its figures that answer the claims (the gain over the baseline with
the perfect filter's cap, recall against noise, purity, the claims' forest plot), the claims
table, and the words, tables and remaining figures; every titled part with an anchor."""

from __future__ import annotations

import re
from dataclasses import dataclass

from cirbench.report.analysis.verdicts.claims import CLAIMS_TITLE
from cirbench.report.analysis.loading.collapsed import flag_lists
from cirbench.report.analysis.rankings.kept_worth import WORTH_TITLE
from cirbench.report.analysis.verdicts.room import ROOM_TITLE
from cirbench.report.figures.figure_file import FigureFile
from cirbench.report.tables.model import heading
from cirbench.report.render.content import ReportContent, Section

FIGURE, CLAIMS, GLANCE, ROOM, FLAGS, TABLE = "figure", "claims", "glance", "room", "flags", "table"
NOTE = "note"
"""A part that is one line of prose (what a kept set is worth, where it is not measured)."""
CONTENTS_ANCHOR, PROBLEMS_ANCHOR, PROVENANCE_ANCHOR = "contents", "failed-and-missing-cells", "provenance"
CONTENTS_TITLE, PROBLEMS_TITLE, PROVENANCE_TITLE = "Contents", "Failed and missing cells", "Provenance"
GLANCE_TITLE = "At a glance"


@dataclass(frozen=True)
class Part:
    """One titled part of a setting's section: its anchor, its heading, what it is and holds."""

    anchor: str
    title: str
    kind: str
    item: object


def slug(text: str) -> str:
    """``text`` as an anchor: lower case, runs of other characters as one ``-``."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def setting_anchor(section: Section) -> str:
    """The anchor of a setting's section."""
    return slug(section.setting.slug)


def leaderboard_anchor(section: Section) -> str:
    """The anchor of a setting's leaderboard."""
    return f"{setting_anchor(section)}-leaderboard"


def leaderboard_title(section: Section) -> str:
    """The heading of a setting's leaderboard."""
    return f"Leaderboard: {section.setting.describe()}"


def tuned_anchor(section: Section) -> str:
    """The anchor of a setting's tuned leaderboard."""
    return f"{setting_anchor(section)}-tuned-leaderboard"


def tuned_title(section: Section) -> str:
    """The heading of a setting's tuned leaderboard."""
    return f"Tuned leaderboard: {section.setting.describe(section.tuned.board.seeds)}"


def parts(section: Section) -> list[Part]:
    """A setting's titled parts in reading order (figures first, then the claims, then words)."""
    base = setting_anchor(section)
    found = [Part(f"{base}-{slug(f.path.stem)}", f.title, FIGURE, f) for f in section.lead_figures]
    if section.claims_figure is not None:
        found.append(Part(f"{base}-claims-forest", section.claims_figure.title, FIGURE, section.claims_figure))
    if section.claims:
        found.append(Part(f"{base}-claims", CLAIMS_TITLE, CLAIMS, section))
    if section.glance:
        found.append(Part(f"{base}-at-a-glance", GLANCE_TITLE, GLANCE, section.glance))
    if section.room:
        found.append(Part(f"{base}-room", ROOM_TITLE, ROOM, section.room))
    found += [_kept_part(base, item) for item in section.kept_worth]
    found += [Part(f"{base}-{slug(flags.title)}", flags.title, FLAGS, flags) for flags in flag_lists(section.setting)]
    found += [Part(f"{base}-table-{slug(t.title)}", heading(t), TABLE, t) for t in section.tables]
    found += [Part(f"{base}-{slug(f.path.stem)}", f.title, FIGURE, f) for f in section.figures]
    return found


def _kept_part(base: str, item: object) -> Part:
    """A part of what a kept set is worth: its chart, one of its tables, or the line saying it is not measured."""
    if isinstance(item, FigureFile):
        return Part(f"{base}-{slug(item.path.stem)}", item.title, FIGURE, item)
    if isinstance(item, str):
        return Part(f"{base}-kept-set-worth", WORTH_TITLE, NOTE, item)
    return Part(f"{base}-table-{slug(item.title)}", heading(item), TABLE, item)


@dataclass(frozen=True)
class Entry:
    """One line of the table of contents, and the lines under it."""

    anchor: str
    title: str
    children: tuple["Entry", ...] = ()


def contents(content: ReportContent) -> list[Entry]:
    """The table of contents: per setting its leaderboard and parts, then the failed cells
    and the provenance."""
    entries = []
    for section in content.sections:
        children = [Entry(leaderboard_anchor(section), "Leaderboard")] if section.leaderboard is not None else []
        children += [Entry(tuned_anchor(section), "Tuned leaderboard")] if section.tuned is not None else []
        children += [Entry(p.anchor, p.title) for p in parts(section)]
        entries.append(Entry(setting_anchor(section), section.setting.describe(), tuple(children)))
    return entries + [Entry(PROBLEMS_ANCHOR, PROBLEMS_TITLE), Entry(PROVENANCE_ANCHOR, PROVENANCE_TITLE)]
