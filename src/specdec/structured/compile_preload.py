"""Imported by the compile forkserver only: pay lark's one-time set-up (~150 ms) and
build the terminal DFAs most JSON-schema grammars share (strings, property names,
numbers, formats, punctuation; memoised in
:func:`~specdec.structured.cfg.byte_dfa.regex_to_byte_dfa`) once there, so each compile
child forked from it starts warm."""

from specdec.structured.compile import grammar_tables
from specdec.structured.json_schema import FORMATS, schema_to_lark

_COMMON = {"type": "object", "properties": {
    "string": {"type": "string"}, "number": {"type": "number"}, "integer": {"type": "integer"},
    "flag": {"type": "boolean"}, "none": {"type": "null"}, "counted": {"maxLength": 8},
    "list": {"type": "array"}, "any": {}, "object": {"type": "object"},
    **{f"format_{name}": {"type": "string", "format": name} for name in FORMATS}}}
COMMON_GRAMMARS = [schema_to_lark(_COMMON, strict=strict) for strict in (False, True)]

grammar_tables('start: "a"', use_disk_cache=False)
for _text in COMMON_GRAMMARS:
    grammar_tables(_text, use_disk_cache=False)
