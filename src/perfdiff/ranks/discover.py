"""Find the ranks of a run: a directory of rank traces or bundles, or one nsys export holding
several processes; give each its rank number, and pair the two runs' ranks.

A rank's number comes from the trace when it says (Kineto `distributedInfo`, the launcher
variables nsys recorded, a bundle's manifest), read from the file's head or metadata without
importing it; else from the file name (`rank-3.json`, `report.3.sqlite`); else from the
sorted order.  The processes of one export holding several are numbered by
perfdiff.ranks.identity (launcher variables, NCCL's rank, GPU, else pid order).  Nothing here
reads a trace's events.
"""
from __future__ import annotations

import functools
import gzip
import json
import re
import zlib
from collections import Counter
from pathlib import Path

from perfdiff.bundle import is_bundle
from perfdiff.bundle.manifest import read_manifest
from perfdiff.errors import InputError
from perfdiff.inputs import trace_kind
from perfdiff.ranks.identity import NotRanks, process_ranks, why_not_ranks
from perfdiff.ranks.records import MAX_RANK, IdentitySource, RankInput, RankNotice, RankNoticeCode, RankPair

__all__ = ["any_multi_rank", "export_processes", "is_job_export", "is_multi_rank", "is_rank_directory", "not_ranks",
           "pair_ranks", "parse_rank_spec", "rank_inputs"]

HEAD_BYTES = 1 << 16  # a Kineto trace's header (distributedInfo) precedes its events
_DIST = re.compile(rb'"distributedInfo"\s*:\s*(\{[^{}]*\})')
_NAME_RANK = (re.compile(r"rank[-_.]?(\d+)", re.I), re.compile(r"\.(\d+)\.(?:sqlite|nsys-rep|json|json\.gz)$"),
              re.compile(r"(\d+)(?:\.pt\.trace)?\.(?:sqlite|nsys-rep|json|json\.gz)$"))


def _members(path: Path) -> list[Path]:
    """The traces and bundles directly inside a directory that is not a bundle itself."""
    if not path.is_dir() or is_bundle(path):
        return []
    return sorted(p for p in path.iterdir() if (p.is_file() and trace_kind(p)) or (p.is_dir() and is_bundle(p)))


def is_multi_rank(path: str | Path) -> bool:
    """Whether `path` is a multi-rank run: a directory of two or more traces or bundles, or
    one nsys export (or a directory holding only one) whose processes are the ranks of one
    job (`is_job_export`)."""
    p = Path(path)
    inside = _members(p)
    if len(inside) == 1 and inside[0].is_file():
        p = inside[0]
    return len(inside) >= 2 or is_job_export(p)


def is_rank_directory(path: str | Path) -> bool:
    """Whether `path` is a directory of two or more traces or bundles (a multi-rank run that
    a listing tells, without reading an export: is_multi_rank)."""
    return len(_members(Path(path))) >= 2


def any_multi_rank(paths: list[str | Path]) -> bool:
    """Whether any of `paths` is a multi-rank run (is_multi_rank), the inputs read at once, one
    thread each: telling an nsys export's processes apart scans its kernel table, and SQLite
    lets go of the GIL while it does (`compare` asks it of both runs before it loads either).
    The answer of `any(is_multi_rank(p) for p in paths)`: the first input's error is raised
    before the second's, and none after a true answer."""
    if len(paths) < 2:
        return any(is_multi_rank(p) for p in paths)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(paths)) as pool:
        futures = [pool.submit(is_multi_rank, p) for p in paths]
        return any(f.result() for f in futures)


def is_job_export(path: str | Path) -> bool:
    """Whether `path` is an nsys export holding several processes that are the ranks of one
    job (perfdiff.ranks.identity.why_not_ranks: each drives a GPU of its own and they share NCCL
    communicators, or the launcher variables number them).  Reads a few rows, never the
    events; False for anything else, a damaged export included (its import says why)."""
    facts = export_processes(path)
    return facts is not None and facts[1]


def export_processes(path: str | Path) -> tuple[tuple[int, ...], bool] | None:
    """(the pids that launched kernels, whether they are the ranks of one job) of the nsys
    export at `path`; None for anything else, a damaged export included."""
    facts = _facts(path)
    return None if facts is None else (facts[0], facts[1] is None)


def not_ranks(path: str | Path) -> NotRanks | None:
    """Why the processes of the nsys export at `path` that launched kernels are not the ranks
    of one job (perfdiff.ranks.identity.why_not_ranks); None where they are, or for anything
    but a readable export."""
    facts = _facts(path)
    return None if facts is None else facts[1]


def _facts(path: str | Path) -> tuple[tuple[int, ...], NotRanks | None] | None:
    """Kept for the file as it is (path, size, modification time): compare asks it of each
    input more than once, and each answer reads the whole kernel table."""
    p = Path(path)
    if not p.is_file() or trace_kind(p) != "nsys":
        return None
    try:
        st = p.stat()
    except OSError:
        return None
    return _export_processes(str(p.resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _export_processes(path: str, size: int, mtime_ns: int) -> tuple[tuple[int, ...], NotRanks | None] | None:
    from perfdiff.importers.nsys import query

    try:
        con = query.open_export(Path(path))
        try:
            pids = query.kernel_pids(con) if query.has_kernel_table(con) else []
            return tuple(pids), why_not_ranks(con, pids)
        finally:
            con.close()
    except query.EXPORT_ERRORS:
        return None


def _kineto_head(p: Path) -> dict:
    """distributedInfo from the first HEAD_BYTES of a Kineto trace (decompressed), else {}."""
    try:
        with open(p, "rb") as fh:
            raw = fh.read(HEAD_BYTES)
        if raw[:2] == b"\x1f\x8b":
            raw = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, HEAD_BYTES)
        m = _DIST.search(raw)
        return json.loads(m.group(1)) if m else {}
    except (OSError, ValueError, zlib.error, gzip.BadGzipFile):
        return {}


def _nsys_env(p: Path) -> dict:
    """rank / world_size from the launcher variables an nsys export recorded, else {}."""
    from perfdiff.importers.nsys import query  # pandas: not imported to tell inputs apart
    from perfdiff.importers.nsys.manifest import launcher_vars, rank_and_size

    try:
        con = query.open_export(p)
        try:
            values = query.launcher_environment(con)
        finally:
            con.close()
    except query.EXPORT_ERRORS:
        return {}
    return rank_and_size(launcher_vars(values))


def _declared(p: Path) -> tuple[dict, IdentitySource]:
    if p.is_dir():
        # A damaged manifest stops the comparison here, naming it, as loading the bundle would:
        # read as "no rank declared" it would take a rank by order and clash with another.
        target = read_manifest(p).get("target")
        dist = target.get("distributed") if isinstance(target, dict) else None
        return (dist if isinstance(dist, dict) else {}), IdentitySource.MANIFEST
    kind = trace_kind(p)
    if kind == "kineto":
        return _kineto_head(p), IdentitySource.TRACE
    if kind == "nsys":
        return _nsys_env(p), IdentitySource.ENVIRONMENT
    return {}, IdentitySource.TRACE


def _int(v: object) -> int | None:
    """A declared rank or world size, None where it is not one (a damaged header can say
    anything: a world of 10^12 ranks would be listed, rank by rank, as not compared)."""
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_RANK else None


def _name_rank(p: Path, explicit: bool = False) -> int | None:
    """The rank a file name numbers (rank-3.json, report.3.sqlite), up to MAX_RANK (beyond:
    a timestamp, say, not a rank); `explicit`: only a name that says "rank" (a lone file's
    "report3.sqlite" is nsys's third report, not rank 3)."""
    for rx in _NAME_RANK[:1] if explicit else _NAME_RANK:
        m = rx.search(p.name)
        if m:
            rank = int(m.group(1))
            return rank if rank <= MAX_RANK else None
    return None


# torch.profiler's trace handler names a file WORKER.TIMESTAMP_MS.pt.trace.json(.gz), one per
# profiling window.
_WINDOW_FILE = re.compile(r"(.+)\.\d{10,}\.pt\.trace\.json(?:\.gz)?")


def _refuse_windows(members: list[Path], ranks: list[int | None], folder: Path) -> None:
    """InputError when two traces that declare no rank are windows of one worker (the trace
    handler's names): a folder of one process's profiling windows is no run of many ranks."""
    workers: dict[str, list[str]] = {}
    for m, r in zip(members, ranks, strict=True):
        w = _WINDOW_FILE.fullmatch(m.name)
        if w and r is None:
            workers.setdefault(w.group(1), []).append(m.name)
    for worker, names in workers.items():
        if len(names) > 1:
            shown = ", ".join(names[:2]) + ("…" if len(names) > 2 else "")
            raise InputError(f"{len(names)} traces of one worker, {worker} ({shown}): profiling "
                             "windows of one process, not ranks; compare one window of each run", path=folder)


def _export_ranks(p: Path) -> list[RankInput]:
    """One RankInput per process that launched GPU kernels in an nsys export, numbered from
    the best source the export has (perfdiff.ranks.identity); [] with fewer than two."""
    from perfdiff.importers.nsys import query

    try:
        con = query.open_export(p)
        try:
            pids = query.kernel_pids(con)
            found = process_ranks(con, pids) if len(pids) >= 2 else None
        finally:
            con.close()
    except query.QueryError as exc:
        raise InputError(f"cannot list the processes of the export ({exc})", path=p) from None
    except UnicodeDecodeError:  # SQLite's own message quotes a damaged schema
        raise InputError("cannot list the processes of the export (its schema is damaged)", path=p) from None
    if found is None:
        return []
    world = found.world_size or len(pids)
    return [RankInput(found.ranks[pid], str(p), found.source, world, pid) for pid in pids]


def rank_inputs(path: str | Path, *, split_processes: bool = False) -> list[RankInput]:
    """The ranks of one run, sorted by rank.  `path`: a directory of rank traces or bundles,
    or one nsys export whose processes are the ranks (`is_job_export`, or any export holding
    several processes with `split_processes`), or a directory holding only that export.  A single input
    is one rank.  Raises InputError when two inputs claim one rank."""
    p = Path(path)
    if not p.exists():
        raise InputError("no such file or directory", path=p)
    if p.is_dir() and len(inside := _members(p)) == 1 and inside[0].is_file() \
            and (split_processes or is_job_export(inside[0])):
        p = inside[0]  # a directory holding the one export of the run
    if p.is_file() and trace_kind(p) == "nsys" and (split_processes or is_job_export(p)):
        found = _export_ranks(p)
        if found:
            return sorted(found, key=lambda r: r.rank)
    members = _members(p)
    if p.is_dir() and not is_bundle(p) and not members:
        raise InputError("no trace or run bundle in this directory", path=p)
    members = members or [p]
    found: list[RankInput] = []
    by_name = [_name_rank(m, explicit=p.is_file()) for m in members]
    declared = [(_declared(m), m) for m in members]
    ranks = [_int(dist.get("rank")) for (dist, _), _ in declared]
    sources = [source for (_, source), _ in declared]
    # An input that declares no rank takes the number its name gives when no other name gives
    # it (a clash with a declared rank is refused below, naming both); the rest take, in order,
    # the numbers nobody has: "rank 0" by position would clash with a trace that says it is
    # rank 0, and one stray file must not renumber the others.
    _refuse_windows(members, ranks, p)
    named = Counter(x for x in by_name if x is not None)
    for i, x in enumerate(by_name):
        if ranks[i] is None and x is not None and named[x] == 1:
            ranks[i], sources[i] = x, IdentitySource.FILE_NAME
    taken = set(ranks)
    free = (r for r in range(2 * len(members)) if r not in taken)
    for i, ((dist, _), m) in enumerate(declared):
        if ranks[i] is None:
            ranks[i], sources[i] = next(free), IdentitySource.ORDER
        found.append(RankInput(ranks[i], str(m), sources[i], _int(dist.get("world_size"))))
    seen: dict[int, str] = {}
    for r in found:
        if r.rank in seen:
            # The likeliest cause: a profiler's schedule wrote one trace per profiling window.
            raise InputError(f"two inputs claim rank {r.rank}: {Path(seen[r.rank]).name} and {Path(r.path).name} "
                             "(a folder holds one trace per rank: move the others, such as other profiling windows, "
                             "elsewhere)", path=p)
        seen[r.rank] = r.path
    return sorted(found, key=lambda r: r.rank)


def world_size(inputs: list[RankInput]) -> int:
    """The run's world size: the largest one its traces declare (up to MAX_RANK), else how
    many ranks it has."""
    declared = [r.world_size for r in inputs if r.world_size and r.world_size <= MAX_RANK]
    return max(declared) if declared else len(inputs)


_SPEC_ITEM = re.compile(r"^(\d+)(?:-(\d+))?(?::(\d+)(?:-(\d+))?)?$", re.ASCII)


def _shown(text: str) -> str:
    """--ranks as an error line quotes it: at most 60 characters."""
    return repr(text if len(text) <= 60 else text[:57] + "…")


def _span(text: str, first: int, last: int | None) -> range:
    last = first if last is None else last
    if last < first:
        raise InputError(f"--ranks {_shown(text)}: a range must go up, not {first}-{last}")
    if last >= MAX_RANK:
        raise InputError(f"--ranks {_shown(text)}: rank {last} is beyond any job's ranks")
    return range(first, last + 1)


def parse_rank_spec(text: str) -> tuple[tuple[int, int], ...] | None:
    """--ranks: "all" (None: pair by rank number), or comma-separated items "R", "R1-R2"
    (those ranks with themselves) and "N:A", "N1-N2:A1-A2" (normal rank N with abnormal A).
    InputError for anything else, a range that goes down, or a rank named twice on a side."""
    if text.strip().lower() == "all":
        return None
    pairs: list[tuple[int, int]] = []
    seen: tuple[set[int], set[int]] = (set(), set())
    for item in text.split(","):
        m = _SPEC_ITEM.match(item.strip())
        if not m:
            raise InputError(f"--ranks {_shown(text)}: expected all, or items like 3, 0-7, 0:4 or 0-3:4-7")
        n0, n1, a0, a1 = (int(g) if g is not None else None for g in m.groups())
        ns = _span(item.strip(), n0, n1)
        as_ = ns if a0 is None else _span(item.strip(), a0, a1)
        if len(as_) != len(ns):
            raise InputError(f"--ranks {item.strip()!r}: {len(ns)} normal rank{'s' if len(ns) != 1 else ''} "
                             f"against {len(as_)} abnormal")
        # Checked item by item, so a spec repeating a long range fails before it is expanded.
        for side, span, known in (("normal", ns, seen[0]), ("abnormal", as_, seen[1])):
            twice = next((r for r in span if r in known), None) if known else None
            if twice is not None:
                raise InputError(f"--ranks {_shown(text)}: {side} rank {twice} is paired twice")
            known.update(span)
        pairs += list(zip(ns, as_, strict=True))
    return tuple(pairs)


def pair_ranks(normal: list[RankInput], abnormal: list[RankInput], spec: str | None,
               labels: tuple[str, str]) -> tuple[list[RankPair], list[RankNotice]]:
    """Pair the runs' ranks: by number, unless --ranks (`spec`) says otherwise.  Different
    world sizes are refused (InputError) unless `spec` is given."""
    wn, wa = world_size(normal), world_size(abnormal)
    notices: list[RankNotice] = []
    if wn != wa and spec is None:
        raise InputError(f"{labels[0]} has world size {wn} and {labels[1]} {wa}: not compared; "
                         "--ranks says which ranks to pair (e.g. --ranks 0-3, or 0:4,1:5)")
    n_by, a_by = {r.rank: r for r in normal}, {r.rank: r for r in abnormal}
    wanted = parse_rank_spec(spec) if spec is not None else None
    if wanted is None:
        common = sorted(set(n_by) & set(a_by))
        only = sorted(set(n_by) ^ set(a_by))
        if only:
            notices.append(RankNotice(RankNoticeCode.UNPAIRED, tuple(only)))
        wanted = tuple((r, r) for r in common)
    else:
        notices.append(RankNotice(RankNoticeCode.PAIRED_BY_USER, tuple(n for n, _ in wanted)))
        missing = [f"{labels[0]} rank {n}" for n, _ in wanted if n not in n_by]
        missing += [f"{labels[1]} rank {a}" for _, a in wanted if a not in a_by]
        if missing:
            raise InputError(f"--ranks names ranks that are not there: {', '.join(missing[:4])}")
    if not wanted:
        raise InputError(f"{labels[0]} and {labels[1]} have no rank in common: not compared")
    return [RankPair(n, n_by[n], a_by[a]) for n, a in wanted], notices
