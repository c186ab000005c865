"""What the command line shows: the progress of a running grid (the runner's events,
:mod:`cirbench.engine.running.runner`) and the tables it prints (run summary, calibration checks,
submitted jobs, a dataset's warnings). Every function prints to the console it is given."""

from __future__ import annotations

import math
import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from cirbench.engine.running.runner import Event
from cirbench.results.headline import headline_recall
from cirbench.results.metrics import format_number
from cirbench.results.summary import RunSummary

SKIPPED = "already complete (skipped)"


def _fmt(x: float | None) -> str:
    return format_number(x, 3)


def damaged(console: Console, event: Event) -> None:
    """A finished cell redone because its record is damaged: its problems and where its files go."""
    console.print(
        f"[yellow]warning:[/] {escape(event.cell.key.run_id)} is redone, its files moved to "
        f"{escape(str(event.info['quarantine']))}/: " + "; ".join(escape(p) for p in event.info["problems"]),
        soft_wrap=True)


class GridProgress:
    """A rich progress display of a running grid: a line for the reference rows, then one
    per cell (live while the cell trains here, updated when it ends in a worker process).
    Where the console is not a terminal (a log file of a long study), where rich draws the
    bars only once at the end, each cell that runs and ends also prints one line: how many
    have ended of the ``pending`` cells, its outcome and the time since the grid began."""

    def __init__(self, console: Console, pending: int | None = None) -> None:
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[status]}"), console=console,
        )
        self.tasks: dict[str, Any] = {}
        self.live: dict[str, dict[str, float]] = {}  # run id -> last loss and R@10 of a cell training here
        self.began, self.ended, self.pending = time.monotonic(), 0, pending

    def __enter__(self) -> "GridProgress":
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)

    def __call__(self, event: Event) -> None:
        """Show one runner event."""
        getattr(self, f"_{event.kind}")(event)
        if event.kind == "done" and event.outcome.status != "skipped" and not self.progress.console.is_terminal:
            self._log_done(event)

    def _log_done(self, event: Event) -> None:
        k, outcome = event.cell.key, event.outcome
        self.ended += 1
        minutes = (time.monotonic() - self.began) / 60
        status = (f"completed, R@10 {format_number(headline_recall(outcome.final), 3)}" if outcome.status == "completed"
                  else f"{outcome.status}: {outcome.error}")
        of = self.pending if self.pending is not None else "?"
        self._print(escape(f"[{self.ended}/{of}] {k.method} noise={k.noise_rate:g} seed={k.seed}: {status} "
                           f"({int(minutes // 60)} h {int(minutes % 60):02d} min since the grid began)"))

    def _print(self, text: str) -> None:
        self.progress.console.print(text)

    def _add(self, event: Event, total: int | None, status: str) -> Any:
        k = event.cell.key
        task = self.progress.add_task(f"{k.method:>8} noise={k.noise_rate:<4g} seed={k.seed}", total=total, status=status)
        self.tasks[k.run_id] = task
        return task

    def _announce(self, event: Event) -> None:
        self._print(f"[dim]{escape(event.message)}[/]")

    def _damaged(self, event: Event) -> None:
        damaged(self.progress.console, event)

    def _references(self, event: Event) -> None:
        self.references = event.info["cells"]
        self.reference_task = self.progress.add_task(f"{'reference rows':>8}", total=len(self.references), status="")
        self.references_left = len(self.references)

    def _reference(self, event: Event) -> None:
        outcome, method = event.outcome, event.cell.key.method
        self.progress.advance(self.reference_task)
        if outcome.status == "failed":
            self._print(f"[red]reference row {method} failed: {outcome.error}[/]")
        elif outcome.status == "locked":
            self._print(f"[yellow]reference row {method} skipped: {escape(outcome.error)}[/]")
        self.references_left -= 1
        if not self.references_left:
            self.progress.update(self.reference_task, status=", ".join(sorted({c.key.method for c in self.references})))

    def _queued(self, event: Event) -> None:
        self._add(event, 1, f"queued ({event.info['jobs']} at a time)")

    def _start(self, event: Event) -> None:
        self._add(event, None, "")
        self.live[event.cell.key.run_id] = {"loss": math.nan, "r10": math.nan}

    def _step(self, event: Event) -> None:
        info, state = event.info, self.live[event.cell.key.run_id]
        if "loss" in info:
            state["loss"] = info["loss"]
        if "recall" in info:
            state["r10"] = headline_recall(info["recall"])
        self.progress.update(
            self.tasks[event.cell.key.run_id], total=info["total_steps"], completed=info["step"] + ("recall" not in info),
            status=f"epoch {info['epoch'] + 1}  loss {format_number(state['loss'], 3)}  R@10 {format_number(state['r10'], 3)}",
        )

    def _done(self, event: Event) -> None:
        outcome, run_id = event.outcome, event.cell.key.run_id
        if run_id in self.live:  # trained here: the line already shows its last epoch
            task = self.tasks[run_id]
            if outcome.status == "skipped":
                self.progress.update(task, total=1, completed=1, status=SKIPPED)
            elif outcome.status == "locked":
                self.progress.update(task, total=1, completed=1, status=f"[yellow]skipped: {escape(outcome.error)}[/]")
            elif outcome.status == "failed":
                self.progress.update(task, status=f"[red]failed: {outcome.error}[/]")
            return
        task = self.tasks.get(run_id)
        if task is None:
            task = self._add(event, 1, "")
        status = (f"completed  R@10 {format_number(headline_recall(outcome.final), 3)}" if outcome.status == "completed"
                  else SKIPPED if outcome.status == "skipped"
                  else f"[yellow]skipped: {escape(outcome.error)}[/]" if outcome.status == "locked"
                  else f"[red]{outcome.status}: {escape(outcome.error)}[/]")
        self.progress.update(task, completed=1, status=status)


def whole(console: Console, renderable: Any) -> None:
    """Print ``renderable`` (a table) whole: in a terminal at its width, elsewhere (a log, a
    pipe, where rich assumes 80 columns) at the renderable's own width, so no column is cut."""
    natural = console.measure(renderable, options=console.options.update_width(10_000)).maximum
    if console.is_terminal or natural <= console.width:
        console.print(renderable)
        return
    Console(file=console.file, width=natural, quiet=console.quiet, color_system=None).print(renderable)


def failures(console: Console, failed: list[tuple[Any, str]], results: str) -> None:
    """The error of each failed cell (key, one-line error) whole, and the command that prints
    its whole record (the traceback in ``runs.error``)."""
    for key, error in failed:
        noise = "ref" if math.isnan(key.noise_rate) else f"{key.noise_rate:g}"
        console.print(f"[red]failed:[/] {escape(f'{key.method} noise={noise} seed={key.seed}: {error}')}", soft_wrap=True)
    if failed:
        console.print(f"the whole error of a failed cell (its traceback) is in its runs row (runs.error): "
                      f"cirbench results errors --results {escape(results)}", soft_wrap=True)


def summary(console: Console, run: RunSummary, title: str) -> None:
    """The run summary table after a grid (whole: :func:`whole`), its warnings first and its
    flags (collapsed, kept set below chance) after."""
    for run_id, count in run.nonfinite:
        console.print(f"[yellow]warning:[/] {escape(run_id)}: {count} validation queries had a NaN or "
                      "infinite score (counted as misses where the target's score is one)")
    table = Table(title=escape(title))
    for column in ("method", "noise", "seed", "status", "R@1", "R@10", "R@50", "purity", "AUROC"):
        table.add_column(column, justify="right" if column not in ("method", "status") else "left",
                         min_width={"method": 10, "status": 9}.get(column), overflow="fold")
    flagged = []
    for row in run.rows:
        k = row.key
        flags = [(name, reason) for name, reason in (("[red]collapsed[/]", row.collapse_reason),
                                                     ("[yellow]below chance[/]", row.below_chance_reason)) if reason]
        flagged += [f"{name} {escape(f'{k.method} noise={k.noise_rate:g} seed={k.seed}: {reason}')}" for name, reason in flags]
        table.add_row(
            k.method + (f" ({row.privileged})" if row.privileged else ""), "ref" if math.isnan(k.noise_rate) else f"{k.noise_rate:g}", str(k.seed),
            " ".join([row.status, *(name for name, _ in flags)]),
            *(_fmt(v) for v in row.recall.values()), _fmt(row.purity), _fmt(row.auroc),
        )
    whole(console, table)
    for line in flagged:  # flags, not failures: the numbers above stay (docs/report.md)
        console.print(line)


def calibration(console: Console, checks: list, title: str) -> None:
    """The calibration checks, each figure beside its target and verdict."""
    table = Table(title=escape(title))
    for column in ("check", "figure", "value", "target", "verdict", "detail"):
        table.add_column(column, justify="right" if column in ("value", "target") else "left", overflow="fold")
    for c in checks:
        colour = {"pass": "green", "FAIL": "red"}.get(c.verdict, "yellow")
        table.add_row(c.name, c.figure, format_number(c.value, 3), c.target, f"[{colour}]{c.verdict}[/]", escape(c.detail))
    console.print(table)


def submission(console: Console, launcher: str, submitted: Any, outcomes: list) -> None:
    """The jobs of a ``--launcher`` submission: cell, job id and (when waited for) status."""
    table = Table(title=f"cirbench run --launcher {launcher}: {len(submitted.jobs)} submitted, "
                        f"{len(submitted.skipped)} already complete (logs: {submitted.folder})")
    for column in ("method", "noise", "seed", "job", "status"):
        table.add_column(column)
    rows = {cell.key.run_id: [cell.key.method, f"{cell.key.noise_rate:g}", str(cell.key.seed), job.job_id, "submitted"]
            for cell, job in submitted.jobs}
    for outcome in outcomes:
        rows[outcome.cell.key.run_id][-1] = outcome.status + (f": {outcome.error}" if outcome.error else "")
    for row in rows.values():
        table.add_row(*row)
    console.print(table)


def preflight(console: Console, checked: Any) -> None:
    """The warnings of a dataset read from the user's files: warnings in its files, samples dropped."""
    if checked.n_warnings:
        console.print(f"[yellow]warning:[/] {checked.n_warnings} warning(s) in the dataset's files (e.g. exact "
                      f"repeats; kept, counted in the runs table; `cirbench data check` lists them)")
    if checked.dropped:
        console.print(f"[yellow]warning:[/] --allow-missing: {len(checked.dropped)} samples or gallery images dropped "
                      f"(full list in {checked.dropped_path}, recorded in the runs table):")
        for d in checked.dropped[:20]:
            console.print(escape(f"  {d['split']} {d['sample']}: {d['reason']}"))
        if len(checked.dropped) > 20:
            console.print(f"  ... and {len(checked.dropped) - 20} more")
