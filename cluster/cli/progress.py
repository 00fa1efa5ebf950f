"""Progress bars (rich) for long work started from a terminal: on stderr, so what a
command prints on stdout stays as it is, and left out when stderr is not a terminal
(scripts and logs get no bar codes)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)


def progress_bar() -> Progress:
    """A progress display of counted steps (`12,000/50,000`), on stderr, shown only on a
    terminal and removed when done."""
    console = Console(stderr=True)
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not sys.stderr.isatty(),
    )


@contextmanager
def counting(description: str, total: int) -> Iterator[Callable[[int], None]]:
    """One bar of `total` steps; yields the function that advances it by n."""
    with progress_bar() as bar:
        task = bar.add_task(description, total=total)
        yield lambda steps: bar.advance(task, steps)
