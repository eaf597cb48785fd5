"""Imported by the compile forkserver only: pay lark's one-time set-up (~150 ms) once
there, so each compile child forked from it starts warm."""

from specdec.structured.compile import grammar_tables

grammar_tables('start: "a"', use_disk_cache=False)
