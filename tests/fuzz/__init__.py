"""Fuzzing of the trace importers (docs/TESTING.md, fuzzing).

`kineto_gen` and `nsys_gen` write random but valid traces (Kineto JSON, nsys SQLite exports)
from a `random.Random`; `mutate` damages excerpts of the real traces; `harness` runs one case
(import it, compare with the plain reference reader) under a time limit and classifies the
outcome.  tests/test_fuzz.py runs a few hundred seeded cases; `make fuzz` (tools/fuzz.py) runs
ten thousand in worker processes.
"""
