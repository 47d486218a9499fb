"""The lowest layer: what every other part of perfdiff agrees on.

`schema` (tables, columns, MISSING, kinds, cycle sources), `durations` (the duration syntax
of the command line), `intervals` (nesting and self time of ranges), `tables` (building the
in-memory tables from numpy columns), `waits` (which calls are waits: symptoms, not causes).
Collectors, the bundle format, importers and the analysis all sit on it; it imports nothing
of perfdiff but `errors`.  `schema` and `durations` need only the standard library, so
`perfdiff collect` starts without numpy or pandas.
"""
