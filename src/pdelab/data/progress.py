"""Progress of a long data job on stderr: a bar on a terminal, a line every few seconds in a log.

The workflow's data jobs write to a log file (``results/logs/data/<profile>/<task>.log``),
where a tqdm bar is one growing line of carriage returns that ``tail`` does not show until the
job ends. There each report is a line of its own, with the count, the rate and the time left,
so a generation of several minutes never leaves an empty log.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TextIO

from tqdm import tqdm

EVERY_S = 10.0  # seconds between two lines in a log


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}:{secs:02d}"


class Progress:
    """Count ``total`` items named ``what`` as they are made (``action``); a line on start and
    at the end. ``stream`` defaults to stderr; a terminal gets a tqdm bar between the two."""

    def __init__(
        self,
        name: str,
        total: int,
        what: str,
        *,
        action: str = "making",
        stream: TextIO | None = None,
        every_s: float | None = None,
    ) -> None:
        self.name, self.total, self.what = name, total, what
        self.task = f"{name}: {action} {total:,} {what}"
        self.stream = stream if stream is not None else sys.stderr
        self.every_s = EVERY_S if every_s is None else every_s
        self.done = 0
        self.started = self.last = time.monotonic()
        self.bar: tqdm | None = None

    def __enter__(self) -> Progress:
        self._say(self.task)
        if self.stream.isatty():
            self.bar = tqdm(
                total=self.total, desc=self.name, unit=" items", file=self.stream, mininterval=1
            )
        return self

    def update(self, n: int = 1, note: str = "") -> None:
        """``n`` more items made; ``note`` is added to the next line (e.g. attempts so far)."""
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
            return
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self.last = now
            elapsed = now - self.started
            rate = self.done / elapsed if elapsed else 0.0
            left = (self.total - self.done) / rate if rate else 0.0
            share = self.done / max(self.total, 1)
            self._say(
                f"{self.name}: {self.done:,} of {self.total:,} ({share:.0%}) "
                f"in {_clock(elapsed)}, {rate:,.0f}/s, about {_clock(left)} left"
                + (f" ({note})" if note else "")
            )

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self.bar is not None:
            self.bar.close()
        if kind is None:
            elapsed = time.monotonic() - self.started
            rate = f" ({self.done / elapsed:,.0f}/s)" if elapsed > 0 else ""
            self._say(f"{self.task}: done in {_clock(elapsed)}{rate}")

    def _say(self, line: str) -> None:
        print(line, file=self.stream, flush=True)
