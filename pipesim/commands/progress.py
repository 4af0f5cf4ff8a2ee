"""Progress display on stderr with rich: a bar for counted work, a spinner for the rest.

Both stay silent when stderr is not a terminal (logs, pipes, tests), so output files and
captured stdout are the same with or without them.
"""
from __future__ import annotations

import contextlib


def _console():
    from rich.console import Console
    return Console(stderr=True)


class Bar:
    """A callable `bar(done, total)` (the sweep/search/validate progress hook) drawing a rich bar."""

    def __init__(self, label: str):
        self.label = label
        self._progress = None
        self._task = None

    def __call__(self, done: int, total: int) -> None:
        if self._progress is None:
            console = _console()
            if not console.is_terminal:
                return
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                       TimeElapsedColumn, TimeRemainingColumn)
            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                                      console=console, transient=False)
            self._progress.start()
            self._task = self._progress.add_task(self.label, total=total)
        self._progress.update(self._task, completed=done, total=total)
        if done >= total:
            self.close()

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


@contextlib.contextmanager
def bar(label: str):
    b = Bar(label)
    try:
        yield b
    finally:
        b.close()


@contextlib.contextmanager
def status(message: str):
    """A spinner with `message` while the block runs (for work that cannot be counted)."""
    console = _console()
    if not console.is_terminal:
        yield
        return
    with console.status(message):
        yield


@contextlib.contextmanager
def counting(message: str, unit: str):
    """A spinner with `message` and a running count (`update(n)` -> "message (n unit)"), for work
    whose total is unknown; silent when stderr is not a terminal."""
    console = _console()
    if not console.is_terminal:
        yield lambda n: None
        return
    with console.status(message) as spinner:
        yield lambda n: spinner.update(f"{message} ({n} {unit})")
