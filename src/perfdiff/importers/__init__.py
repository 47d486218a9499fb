"""Trace importers: an Nsight Systems SQLite export (`nsys`) or a PyTorch-profiler/Kineto JSON
trace (`kineto`) into a RunData, times in ns; `common` holds what they share."""
