"""Stopping long work cooperatively: a loop that may run for seconds takes `should_stop`, a callable of no
arguments, asks it now and then (the simulator every `CHECK_EVERY` events, the planners per candidate), and gives up
when it answers true. The caller decides what stopping means (a deadline, a cancelled request) and may do a little
work of its own in the call (yield the processor); the core reads no clock."""

from __future__ import annotations

from collections.abc import Callable

StopCheck = Callable[[], bool]

# Events (or iterations) between two questions: an event costs ~5-60 µs, so a stop is noticed within a few
# milliseconds and the question's own cost (a call, a clock read) stays under 1 % of the loop.
CHECK_EVERY = 64


class Stopped(Exception):
    """Raised by a loop whose `should_stop` answered true: the work was abandoned and has no result."""


def never() -> bool:
    """The default `should_stop`: run to the end."""
    return False
