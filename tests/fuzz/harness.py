"""One fuzz case: write the input, import it as `perfdiff` does (perfdiff.inputs.open_run), and
classify what happened.

- "same": accepted, and the tables equal the plain reference reader's (json.loads / SQL);
  for Kineto the fast scanner, when it reads the file, also equals the general reader;
- "refused": a PerfdiffError with one line (what a user sees, exit 2);
- "tolerated": accepted although the reference cannot read the file: the fast Kineto scanner
  reads past invalid JSON (or UTF-8) outside the fields it reads, the nsys page reader past
  B-tree damage SQLite reports (rowid order, free space) in rows it decodes whole;
- "mismatch": accepted, but the tables differ from the reference's;
- "bad-message": a PerfdiffError whose message is not one line;
- "traceback": any other exception (a bug), also from the multi-rank readers of an nsys
  export (its processes as ranks, their communicators), which read it apart from the importer;
- "hang": the case ran past its time limit (SIGALRM here; tools/fuzz.py also kills a worker
  that does not answer).
"""
from __future__ import annotations

import random
import signal
import traceback
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from fuzz.kineto_gen import kineto_trace
from fuzz.mutate import kineto_excerpt, mutate_kineto, mutate_nsys, nsys_excerpt, real_traces
from fuzz.nsys_gen import nsys_export
from perfdiff.errors import PerfdiffError

KINDS = ("kineto-gen", "nsys-gen", "kineto-mut", "nsys-mut")
# Share of each kind in a run of many cases (generated, then mutated real traces).
MIX = {"kineto-gen": 0.35, "nsys-gen": 0.25, "kineto-mut": 0.25, "nsys-mut": 0.15}
FAILURES = ("mismatch", "bad-message", "traceback", "hang")


@dataclass(frozen=True)
class Outcome:
    kind: str  # one of KINDS
    seed: int
    result: str  # same, refused, tolerated, or one of FAILURES
    detail: str = ""


class CaseTimeout(Exception):
    """The case ran past its time limit."""


class Cases:
    """Builds and runs cases in `workdir`; the real traces' excerpts are made once, on demand."""

    def __init__(self, workdir: Path, real: Path | None):
        self.workdir = workdir
        self.real = real
        self._kineto: list[bytes] | None = None
        self._nsys: list[Path] | None = None

    def kineto_excerpts(self) -> list[bytes]:
        if self._kineto is None:
            traces = real_traces(self.real)[0] if self.real and self.real.is_dir() else []
            self._kineto = [kineto_excerpt(p) for p in traces]
        return self._kineto

    def nsys_excerpts(self) -> list[Path]:
        if self._nsys is None:
            exports = real_traces(self.real)[1] if self.real and self.real.is_dir() else []
            self._nsys = [nsys_excerpt(p, self.workdir / f"excerpt{i}.sqlite") for i, p in enumerate(exports)]
        return self._nsys

    def write(self, kind: str, seed: int) -> tuple[Path, str] | None:
        """The input of case (`kind`, `seed`) and its format, or None when no real trace is at hand."""
        r = random.Random(f"{kind}:{seed}")
        if kind == "kineto-gen":
            data, suffix = kineto_trace(r)
        elif kind == "kineto-mut":
            docs = self.kineto_excerpts()
            if not docs:
                return None
            data, suffix = mutate_kineto(r, r.choice(docs))
        else:
            path = self.workdir / "case.sqlite"
            path.unlink(missing_ok=True)
            if kind == "nsys-gen":
                nsys_export(r, path)
            else:
                srcs = self.nsys_excerpts()
                if not srcs:
                    return None
                mutate_nsys(r, r.choice(srcs), path)
            return path, "nsys"
        path = self.workdir / f"case{suffix}"
        path.write_bytes(data)
        return path, "kineto"

    def run(self, kind: str, seed: int, limit_s: int = 30) -> Outcome | None:
        """Build and check one case under a time limit (SIGALRM); None when it cannot be built."""
        made = self.write(kind, seed)
        if made is None:
            return None
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(limit_s)
        try:
            result, detail = check(*made)
        except CaseTimeout:
            result, detail = "hang", f"over {limit_s} s"
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
        return Outcome(kind, seed, result, detail)


def _alarm(signum: int, frame: object) -> None:
    raise CaseTimeout


def check(path: Path, fmt: str) -> tuple[str, str]:
    """(result, detail) of importing `path` (see the module docstring)."""
    from perfdiff.inputs import open_run

    if fmt == "nsys":
        failed = _rank_readers(path)
        if failed:
            return failed
    try:
        run = open_run(path)
    except CaseTimeout:
        raise
    except PerfdiffError as exc:
        text = str(exc)
        if not _one_line(text):
            return "bad-message", text[:300]
        return "refused", text
    except Exception:  # noqa: BLE001 - what the fuzzer looks for
        return "traceback", traceback.format_exc(limit=-6)
    try:
        ref = _reference(path, fmt)
    except CaseTimeout:
        raise
    except Exception as exc:  # noqa: BLE001 - the importer accepted what the reference cannot read
        why = f"{type(exc).__name__}: {exc}"[:300]
        if fmt == "kineto" and isinstance(exc, (ValueError, RecursionError)) \
                and run.manifest.get("source", {}).get("reader") == "fast":
            # The fast scanner checks the fields it reads and the document's ends, not every
            # byte between (docs/FORMATS.md): damage there is read past, by design.
            return "tolerated", why
        if fmt == "nsys" and type(exc).__name__ == "DatabaseError":
            # SQLite checks B-tree invariants the page reader does not need (rowid order, free
            # space): a damaged page elsewhere stops the reference, not the importer.
            return "tolerated", why
        return "mismatch", f"accepted, but the reference reader fails: {why}"
    for table in ("activity", "markers", "samples") + (("gpu_ranges",) if fmt == "kineto" else ()):
        diff = _differ(getattr(run, table), ref[table])
        if diff:
            return "mismatch", f"{table}: {diff}"
    if fmt == "kineto":
        diff = _differ(_nccl_groups(run.activity, run.process_groups),
                       _nccl_groups(ref["activity"], ref["process_groups"]))
        if diff:
            return "mismatch", f"process groups: {diff}"
    if fmt == "kineto" and run.manifest.get("source", {}).get("reader") == "fast":
        try:
            diff = _fast_against_general(path)
        except CaseTimeout:
            raise
        except Exception:  # noqa: BLE001 - the general reader crashed where the scanner did not
            return "traceback", traceback.format_exc(limit=-6)
        if diff:
            return "mismatch", diff
    return "same", ""


def _one_line(message: str) -> bool:
    """Whether a refusal reads as one clear line: not empty, no line break, at most 600 characters."""
    return bool(message) and "\n" not in message and len(message) <= 600


def _rank_readers(path: Path) -> tuple[str, str] | None:
    """(result, detail) when the multi-rank readers of an export (its processes as ranks,
    their communicators), which read it apart from the importer, fail: a traceback, or an
    input error of more than one line; None when they answer or refuse in one line."""
    from perfdiff.ranks.discover import rank_inputs
    from perfdiff.ranks.groups import nsys_groups

    for read in (lambda: rank_inputs(path, split_processes=True), lambda: nsys_groups(path)):
        try:
            read()
        except CaseTimeout:
            raise
        except PerfdiffError as exc:
            text = str(exc)
            if not _one_line(text):
                return "bad-message", "multi-rank reader: " + text[:300]
        except Exception:  # noqa: BLE001 - what the fuzzer looks for
            return "traceback", traceback.format_exc(limit=-6)
    return None


def _reference(path: Path, fmt: str) -> dict[str, pd.DataFrame]:
    if fmt == "kineto":
        from perfdiff.importers.kineto.reference import reference_tables

        return reference_tables(path)
    from perfdiff.importers.nsys.reference import reference_tables as nsys_reference

    return nsys_reference(path)


def _fast_against_general(path: Path) -> str:
    """Where the fast scanner reads the file, its tables must equal the general reader's."""
    from perfdiff.importers.kineto import general, scan, tables
    from perfdiff.importers.kineto.events import NeedSlowPath

    try:
        fast = tables.build(path, scan.FastScan(path).run(), "full")
    except (NeedSlowPath, PerfdiffError):
        return ""
    try:
        slow = tables.build(path, general.general_events(path), "full")
    except PerfdiffError:  # damage the scanner reads past (see "tolerated")
        return ""
    for table in ("activity", "markers", "gpu_ranges"):
        diff = _differ(getattr(fast, table), getattr(slow, table))
        if diff:
            return f"fast scanner vs general reader, {table}: {diff}"
    diff = _differ(_nccl_groups(fast.activity, fast.process_groups), _nccl_groups(slow.activity, slow.process_groups))
    if diff:
        return f"fast scanner vs general reader, process groups: {diff}"
    if fast.manifest["dropped"] != slow.manifest["dropped"]:
        return f"fast scanner vs general reader, dropped: {fast.manifest['dropped']} != {slow.manifest['dropped']}"
    return ""


def _nccl_groups(activity: pd.DataFrame, process_groups: pd.DataFrame) -> pd.DataFrame:
    """Each NCCL kernel's activity row with its process group (readers order rows differently)."""
    rows = activity.iloc[process_groups["row"].to_numpy()].reset_index(drop=True)
    return rows.assign(group=process_groups["group"].to_numpy(), ranks=process_groups["ranks"].to_numpy())


def _differ(a: pd.DataFrame, b: pd.DataFrame) -> str:
    """'' when the tables hold the same rows (values and types) in any order, else what differs."""
    if list(a.columns) != list(b.columns):
        return f"columns {list(a.columns)} != {list(b.columns)}"
    ra, rb = _rows(a), _rows(b)
    if ra == rb:
        return ""
    only_a, only_b = sorted(set(ra) - set(rb))[:2], sorted(set(rb) - set(ra))[:2]
    return f"{len(ra)} vs {len(rb)} rows; only in the importer's: {only_a}; only in the reference's: {only_b}"[:600]


def _rows(df: pd.DataFrame) -> list[str]:
    """The rows of `df` as sorted text (categories as their labels, numbers with their type)."""
    cols = [df[c].astype(str).tolist() if isinstance(df[c].dtype, pd.CategoricalDtype) or df[c].dtype == object
            else df[c].tolist() for c in df.columns]
    return sorted(repr(row) for row in zip(*cols, strict=True))
