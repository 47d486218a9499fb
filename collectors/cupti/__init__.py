"""Kernel traces from inside the target: the perfdiff CUPTI agent and its collector side.

In the target (standard library only; the bootstrap loads these by path where perfdiff is
not importable): ``agent`` (CUPTI activity tracing, handed over as files), ``binding``
(cupti-python and libcupti), ``control`` (the agent's control socket) and ``sitecustomize``
(the bootstrap `collect -- CMD` puts on the command's PYTHONPATH).  Shared: ``wire`` (the
hand-off files, record layout, socket requests).  In the collector: ``reader``
(AgentTraceSource: the files into bundle rows).  See docs/COLLECTORS.md, Kernel traces.

Nothing is imported here: a target loading the agent gets the agent's modules only.
"""
