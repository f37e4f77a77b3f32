"""A clock the test steps by hand (the real one is time.monotonic): code that takes a `clock`
reads `now`, so its arithmetic over time is checked without waiting."""

from __future__ import annotations


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now
