"""Compatibility name: :class:`LogitsRow` lives in :mod:`specdec.core.messages`."""

from specdec.core.messages import LogitsRow

__all__ = ["LogitsRow"]
