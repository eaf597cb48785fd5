"""Grammar-constrained decoding: regex, JSON schema, choice lists and Lark grammars.

Two levels, usable without the engine::

    compiled = compile_constraint(tokenizer, grammar="json.lark")  # once, cached
    matcher = compiled.matcher()                                   # per request
    matcher.fill_bitmask(bitmask, row); matcher.accept_token(tok); matcher.rollback(1)

The engine plugin (:mod:`specdec.structured.plugin`) drives the same objects.
"""

from specdec.structured.bitmask import allocate_token_bitmask, apply_token_bitmask_
from specdec.structured.compile import CompiledConstraint, compile_constraint
from specdec.structured.errors import CompileTimeoutError, ConstraintError, UnsupportedSchemaError
from specdec.structured.matcher import Matcher
from specdec.structured.spec import available_grammars, grammars_dir

__all__ = [
    "CompileTimeoutError",
    "CompiledConstraint",
    "ConstraintError",
    "Matcher",
    "UnsupportedSchemaError",
    "allocate_token_bitmask",
    "apply_token_bitmask_",
    "available_grammars",
    "compile_constraint",
    "grammars_dir",
]
