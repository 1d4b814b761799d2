"""The sweep's progress bar (rich): done / failed / rate / ETA, on stderr, only on a terminal."""

from __future__ import annotations

from typing import Any


class RichReporter:
    """A :class:`~simulator.sweep.runner.Reporter` drawing a rich progress bar.

    It draws nothing when stderr is not a terminal or ``enabled`` is False (``--quiet``).
    """

    def __init__(self, label: str, enabled: bool = True, console: Any = None) -> None:
        # deferred (start-up): only this output needs rich
        from rich.console import Console

        self.label = label
        self.console = console or Console(stderr=True)
        self.enabled = enabled and self.console.is_terminal
        self._progress: Any = None
        self._task: Any = None
        self._status: Any = None
        self.failed = 0

    def waiting(self, what: str) -> None:
        """A spinner saying what the sweep waits for before its first point (a local cluster
        starting, a remote one being reached: up to --connect-timeout)."""
        if not self.enabled:
            return
        # deferred (start-up): only this output needs rich
        from rich.markup import escape

        self._stop_waiting()
        self._status = self.console.status(escape(what))
        self._status.start()

    def _stop_waiting(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def start(self, total: int, already: int, workers: int, executor: str) -> None:
        self._stop_waiting()
        if not self.enabled:
            return
        # deferred (start-up): only this output needs rich
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn,
                                   TextColumn, TimeRemainingColumn)
        # deferred (start-up): only this output needs rich
        from rich.markup import escape
        from rich.text import Text

        class Rate(ProgressColumn):
            def render(self, task: Any) -> Text:
                speed = task.finished_speed or task.speed
                return Text(f"{speed:.1f} pts/s" if speed else "- pts/s", style="cyan")

        resumed = f", {already} done before" if already else ""
        self._progress = Progress(
            TextColumn(f"[bold]{escape(self.label)}[/] ({workers} {executor}{resumed})"),
            BarColumn(bar_width=None), MofNCompleteColumn(),
            TextColumn("[red]{task.fields[failed]} failed"), Rate(),
            TextColumn("ETA"), TimeRemainingColumn(),
            console=self.console, transient=False, expand=True)
        self._progress.start()
        self._task = self._progress.add_task("sweep", total=total, failed=0)

    def advance(self, ok: bool) -> None:
        if not ok:
            self.failed += 1
        if self._progress is not None:
            self._progress.update(self._task, advance=1, failed=self.failed)

    def close(self) -> None:
        self._stop_waiting()
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
