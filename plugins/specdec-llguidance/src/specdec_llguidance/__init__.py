"""specdec plugin: llguidance (guidance-ai) as a structured-output backend.

Registers the backend ``"llguidance"`` at engine start; select it for the engine with
``LLM(structured_backend="llguidance")`` or per request with the option
``structured_backend="llguidance"`` (the server: the body field of that name). The
request options are the built-in ones (``json_schema``, ``regex``, ``choice``,
``grammar``, ``whitespace_pattern``, ``strict``); the structured plugin keeps driving
the request (compile pool, masks, speculation), this package only compiles.
"""

from __future__ import annotations

from specdec_llguidance.backend import LLGuidanceBackend
from specdec_llguidance.matcher import LLGuidanceMatcher
from specdec_llguidance.plugin import NAME, LLGuidancePlugin

plugin = LLGuidancePlugin()

__all__ = ["NAME", "LLGuidanceBackend", "LLGuidanceMatcher", "LLGuidancePlugin", "plugin"]
