"""Benchmark-table comparison: `perfdiff bench` (docs/BENCH_TABLES.md)."""
