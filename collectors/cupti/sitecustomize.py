"""Bootstrap copied by `perfdiff collect -- CMD` into a directory put first on the command's
PYTHONPATH: start the perfdiff CUPTI agent in this Python process, then run the sitecustomize
module this one shadows, if any.  Never raises into the program.

The agent is the installed perfdiff's when its wire version is the collector's
($PERFDIFF_AGENT_WIRE); otherwise (perfdiff not importable here, or another version of it)
the collector's own agent package, loaded by path ($PERFDIFF_AGENT_FILE names its agent
module) under the name ``_perfdiff_cupti_agent``.  Standard library only.
"""


def _perfdiff_agent_boot():
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    try:
        mod = None
        try:
            from perfdiff.collectors.cupti import agent as mod
            if str(getattr(mod, "WIRE_VERSION", "")) != os.environ.get("PERFDIFF_AGENT_WIRE"):
                mod = None  # another perfdiff version in this environment: use the collector's files
        except Exception:
            mod = None
        if mod is None:
            import importlib
            import importlib.util
            package = os.path.dirname(os.path.abspath(os.environ["PERFDIFF_AGENT_FILE"]))
            spec = importlib.util.spec_from_file_location(
                "_perfdiff_cupti_agent", os.path.join(package, "__init__.py"), submodule_search_locations=[package])
            sys.modules[spec.name] = pkg = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(pkg)
            mod = importlib.import_module("_perfdiff_cupti_agent.agent")
        mod.start_from_env()
    except Exception as exc:
        try:
            sys.stderr.write("perfdiff agent: not started (%s: %s)\n" % (type(exc).__name__, exc))
        except Exception:
            pass
    try:
        import importlib.machinery
        import importlib.util
        path = [p for p in sys.path if os.path.abspath(p or ".") != here]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
        if spec is not None and spec.loader is not None:
            mod = importlib.util.module_from_spec(spec)
            sys.modules["sitecustomize"] = mod
            spec.loader.exec_module(mod)
    except Exception as exc:
        sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n%s: %s\n"
                         % (type(exc).__name__, exc))


if __name__ == "sitecustomize":  # run by site at start-up; imported from the package it does nothing
    _perfdiff_agent_boot()
