"""Benchmarks behind ``specdec bench NAME``.

Each module listed in ``BENCHMARKS`` defines ``add_arguments(parser)`` and
``main(args) -> dict`` (prints a report; returns the figures).
"""

BENCHMARKS = {
    "throughput": "specdec.bench.throughput",
    "latency": "specdec.bench.latency",
    "prefix": "specdec.bench.prefix",
    "structured": "specdec.bench.structured",
    "serve": "specdec.bench.serve",
    "schema-suite": "specdec.bench.schema_suite",
    "real-schemas": "specdec.bench.real_schemas",
}
