"""Compatibility name: the scheduler's messages live in :mod:`specdec.core.messages`."""

from specdec.core.messages import ScheduledRequest, SchedulerOutput

__all__ = ["ScheduledRequest", "SchedulerOutput"]
