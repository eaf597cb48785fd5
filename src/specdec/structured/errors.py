"""Errors of structured decoding; all are ``ValueError`` so the engine rejects the request."""

from __future__ import annotations


class ConstraintError(ValueError):
    """A grammar, regex, JSON schema or choice list cannot be compiled."""


class UnsupportedSchemaError(ConstraintError):
    """A JSON schema uses a keyword this backend cannot enforce (never silently ignored)."""


class CompileTimeoutError(ConstraintError):
    """Compiling a constraint took longer than the configured limit."""
