"""Imported by the compile forkserver only: pay lark's one-time set-up (~150 ms) and
build the terminal DFAs most JSON-schema grammars share (strings, numbers, formats,
punctuation; memoised in :func:`~specdec.structured.cfg.byte_dfa.regex_to_byte_dfa`)
once there, so each compile child forked from it starts warm."""

from specdec.structured.compile import grammar_tables
from specdec.structured.json_schema import FORMATS, schema_to_lark

_COMMON = {"type": "object", "properties": {
    "string": {"type": "string"}, "number": {"type": "number"}, "integer": {"type": "integer"},
    "flag": {"type": "boolean"}, "none": {"type": "null"}, "counted": {"maxLength": 8},
    "list": {"type": "array"}, "any": {},
    **{f"format_{name}": {"type": "string", "format": name} for name in FORMATS}}}

grammar_tables('start: "a"', use_disk_cache=False)
for _strict in (False, True):
    grammar_tables(schema_to_lark(_COMMON, strict=_strict), use_disk_cache=False)
