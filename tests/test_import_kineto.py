"""Kineto/PyTorch-profiler import: real traces checked against an independent JSON count,
the fast scanner against the general JSON parser, literal layouts and bad input."""
from __future__ import annotations

import gzip
import hashlib
import json
import pickle
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from conftest import activity_kinds as kinds
from conftest import assert_contract

from perfdiff.bundle import MISSING
from perfdiff.errors import InputError
from perfdiff.importers.common import UNNAMED, ClockDomain, canonical
from perfdiff.importers.kineto import blocks, general, scan, tables
from perfdiff.importers.kineto.reference import reference_tables
from perfdiff.importers.kineto import import_kineto, short_kernel_name

REAL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real"
SAMPLES = REAL / "pytorch" / "kineto" / "tb_plugin" / "samples"
NW0 = SAMPLES / "resnet50_num_workers_0" / "worker0.1623143089861.pt.trace.json.gz"
NW4 = SAMPLES / "resnet50_num_workers_4" / "worker0.1623212756351.pt.trace.json.gz"
NW4B = SAMPLES / "resnet50_num_workers_4" / "worker0.1623213129365.pt.trace.json.gz"
HTA = REAL / "facebookresearch" / "HolisticTraceAnalysis" / "tests" / "data" / "trace_diff"
TRACELENS = REAL / "AMD-AGI" / "TraceLens" / "tests" / "traces" / "h100" / "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
REAL_TRACES = [NW0, NW4, NW4B, HTA / "control" / "control.json.gz", HTA / "test" / "test.json.gz", TRACELENS]
needs_real = pytest.mark.skipif(not REAL.is_dir(), reason=f"real traces not found at {REAL}")

GPU = {"kernel": ("kernel", "Kernel"), "memcpy": ("gpu_memcpy", "Memcpy"), "memset": ("gpu_memset", "Memset")}
API = ("cuda_runtime", "cuda_driver", "Runtime")
CPU = ("cpu_op", "user_annotation", "Operator")


def load_events(path: Path) -> list[dict]:
    doc = json.loads(gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes())
    return doc["traceEvents"] if isinstance(doc, dict) else doc


# ------------------------------------------------------------------------------ real traces

@needs_real
@pytest.mark.real
@pytest.mark.parametrize("path", REAL_TRACES, ids=lambda p: p.parent.name + "/" + p.name[:24])
def test_real_trace_counts_match_json(path: Path) -> None:
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    run = import_kineto(path)
    assert_contract(run)
    assert run.manifest["source"]["reader"] == "fast"
    events = load_events(path)
    x = [e for e in events if e.get("ph") == "X"]
    cats = Counter(e.get("cat") for e in x)
    is_step = [e for e in x if e.get("cat") in CPU and str(e.get("name", "")).startswith("ProfilerStep#")]
    want = {kind: sum(cats[c] for c in names) for kind, names in GPU.items()}
    want["api"] = sum(cats[c] for c in API)
    want["cpu"] = sum(cats[c] for c in CPU) - len(is_step)
    got = kinds(run)
    assert {k: got.get(k, 0) for k in want} == want
    m = run.markers
    assert int((m["source"] == "profiler_step").sum()) == len(is_step)
    assert int((m["source"] == "annotation").sum()) == cats["user_annotation"] - sum(
        1 for e in is_step if e["cat"] == "user_annotation")
    # launches: kernels whose args.correlation matches a runtime/driver call's
    launched = {e["args"]["correlation"] for e in x if e.get("cat") in API and "correlation" in e.get("args", {})}
    kern = [e for e in x if e.get("cat") in GPU["kernel"]]
    joined = sum(1 for e in kern if e.get("args", {}).get("correlation") in launched)
    k = run.activity[run.activity["kind"] == "kernel"]
    assert int((k["launch_ns"] != MISSING).sum()) == joined > 0
    hit = k[k["launch_ns"] != MISSING]
    assert (hit["launch_ns"] <= hit["start_ns"]).all() and (hit["tid"] != MISSING).all()
    # kernel time: the JSON durations, to the ns
    want_us = sum(float(e["dur"]) for e in kern)
    assert int(k["busy_ns"].sum()) == pytest.approx(want_us * 1000, abs=len(kern))
    gpus = {g["name"] for g in run.manifest["gpus"]}
    assert gpus and all("V100" in g or "A100" in g or "H100" in g for g in gpus)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


@needs_real
@pytest.mark.real
def test_dataloader_steps_and_names() -> None:
    expect = {NW0: "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
              NW4: "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"}
    incl = {}
    for path, loader in expect.items():
        run = import_kineto(path)
        steps = run.markers[run.markers["source"] == "profiler_step"]
        assert steps["name"].astype(str).tolist() == [f"ProfilerStep#{i}" for i in range(5, 11)]
        a = run.activity
        assert not a["function"].astype(str).str.startswith("ProfilerStep#").any()  # cycles, not functions
        dl = a[(a["kind"] == "cpu") & (a["function"] == loader)]
        assert len(dl) == 6
        incl[path] = float((dl["end_ns"] - dl["start_ns"]).mean()) / 1e6
        assert (dl["busy_ns"] <= dl["end_ns"] - dl["start_ns"]).all()  # busy is self time
    assert incl[NW0] == pytest.approx(69.3, rel=0.02)  # ms per step, inclusive
    assert incl[NW4] == pytest.approx(1.42, rel=0.02)


@needs_real
@pytest.mark.real
def test_modern_trace_wall_clock_and_skips() -> None:
    run = import_kineto(TRACELENS)
    base = 1751410836000000000  # its baseTimeNanoseconds
    assert run.manifest["clock"]["anchors"] == [{"source": "baseTimeNanoseconds", "base_ns": base}]
    first_kernel = min(float(e["ts"]) for e in load_events(TRACELENS) if e.get("cat") == "kernel")
    k = run.activity[run.activity["kind"] == "kernel"]
    assert int(k["start_ns"].min()) == base + round(first_kernel * 1000)
    assert run.manifest["dropped"]["category python_function (not imported)"] == 4262
    assert run.markers["name"].astype(str).tolist() == ["ProfilerStep#6"]
    assert run.manifest["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3" and run.manifest["gpus"][0]["used"]


@needs_real
@pytest.mark.real
@pytest.mark.parametrize("path", [NW4, HTA / "control" / "control.json.gz", TRACELENS],
                         ids=["legacy-2021", "hta-2022", "modern-2025"])
def test_fast_scanner_equals_general_parser(path: Path) -> None:
    fast = tables.build(path, scan.FastScan(path).run(), "full")
    slow = tables.build(path, general.general_events(path), "full")
    for table in ("activity", "markers", "gpu_ranges"):
        a, b = getattr(fast, table), getattr(slow, table)
        cols = list(a.columns)
        a = a.astype(str).sort_values(cols).reset_index(drop=True)
        b = b.astype(str).sort_values(cols).reset_index(drop=True)
        pd.testing.assert_frame_equal(a, b)
    pd.testing.assert_frame_equal(nccl_groups(fast.activity, fast.process_groups),
                                  nccl_groups(slow.activity, slow.process_groups))
    assert fast.manifest["dropped"] == slow.manifest["dropped"]


@needs_real
@pytest.mark.real
def test_small_blocks_give_the_same_result(monkeypatch: pytest.MonkeyPatch) -> None:
    """Events cut at block boundaries (the carry) decode exactly as in one block."""
    path = HTA / "control" / "control.json.gz"
    whole = import_kineto(path)
    monkeypatch.setattr(blocks, "BLOCK", 50_000)
    pieces = import_kineto(path)
    for table in ("activity", "markers"):
        pd.testing.assert_frame_equal(getattr(whole, table).astype(str), getattr(pieces, table).astype(str))


@needs_real
@pytest.mark.real
def test_one_thread_decodes_smaller_blocks_to_the_same_result(monkeypatch: pytest.MonkeyPatch) -> None:
    """A decoder on one core reads blocks of BLOCK_ONE_THREAD (cache-sized, beside another
    process loading), two threads blocks of BLOCK; both give the same tables."""
    path = HTA / "control" / "control.json.gz"
    monkeypatch.setattr(blocks, "BLOCK", 60_000)
    monkeypatch.setattr(blocks, "BLOCK_ONE_THREAD", 20_000)
    asked: list[int | None] = []
    real = blocks.blocks

    def spy(p: Path, size: int | None = None):
        asked.append(size)
        return real(p, size)

    monkeypatch.setattr(scan, "blocks", spy)
    one, two = import_kineto(path, cores=1), import_kineto(path, cores=2)
    assert asked == [20_000, 60_000]
    # A gzip file inflates to blocks of the size asked, not to whatever one read inflates to.
    sizes = [sum(map(len, pieces)) for pieces in real(path, 20_000)]
    assert len(sizes) > 100 and set(sizes[:-1]) == {20_000} and 0 < sizes[-1] <= 20_000
    for table in ("activity", "markers"):
        pd.testing.assert_frame_equal(getattr(one, table).astype(str), getattr(two, table).astype(str))


# ------------------------------------------------------------------------------ literal traces

EVENTS = [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 10, "tid": 11, "ts": 1000, "dur": 100},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm \"q\" \\ é", "pid": 10, "tid": 11, "ts": 1010, "dur": 50,
     "args": {"External id": 5}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 11, "ts": 1020, "dur": 5,
     "args": {"correlation": 77}},
    {"ph": "X", "cat": "kernel", "name": "void foo<int>(int*)", "pid": 0, "tid": 7, "ts": 1030.5, "dur": 20.25,
     "args": {"correlation": 77, "stream": 7, "device": 0}},
    {"ph": "s", "id": 77, "pid": 10, "tid": 11, "ts": 1020, "cat": "ac2g", "name": "ac2g"},
    {"name": "thread_name", "ph": "M", "pid": 10, "tid": 11, "args": {"name": "main"}},
    {"ph": "X", "cat": "user_annotation", "name": "forward", "pid": 10, "tid": 11, "ts": 1005, "dur": 90},
    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0, "tid": 7, "ts": 1060,
     "dur": 3, "args": {"correlation": 78, "bytes": 4096}},
    {"ph": "X", "cat": "python_function", "name": "model.py(1): forward", "pid": 10, "tid": 11, "ts": 1000,
     "dur": 100},
]


def write(path: Path, obj, **dump) -> Path:
    data = json.dumps(obj, **dump).encode()
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def table_of(run) -> pd.DataFrame:
    return run.activity.astype(str).sort_values(["start_ns", "function"]).reset_index(drop=True)


def test_literal_trace(tmp_path: Path) -> None:
    run = import_kineto(write(tmp_path / "t.json", {"traceEvents": EVENTS}, indent=1))
    assert_contract(run)
    a = run.activity.set_index(run.activity["function"].astype(str))
    assert set(a.index) == {"aten::mm \"q\" \\ é", "cudaLaunchKernel", "void foo<int>(int*)",
                            "Memcpy HtoD (Pinned -> Device)", "forward"}
    k = a.loc["void foo<int>(int*)"]
    assert (k["start_ns"], k["end_ns"], k["busy_ns"]) == (1_030_500, 1_050_750, 20_250)  # float µs, exact
    assert (k["launch_ns"], k["tid"], k["stream"], k["correlation"], k["device"]) == (1_020_000, 11, 7, 77, "GPU 0")
    mc = a.loc["Memcpy HtoD (Pinned -> Device)"]
    assert mc["bytes"] == 4096 and mc["launch_ns"] == MISSING and mc["kind"] == "memcpy"
    # self time on thread 11: forward [1005,1095] ⊃ mm [1010,1060] ⊃ cudaLaunchKernel [1020,1025]
    assert a.loc["forward", "busy_ns"] == 40_000 and a.loc["aten::mm \"q\" \\ é", "busy_ns"] == 45_000
    assert a.loc["cudaLaunchKernel", "busy_ns"] == 5_000 and a.loc["cudaLaunchKernel", "kind"] == "api"
    m = run.markers.set_index(run.markers["name"].astype(str))
    assert m.loc["ProfilerStep#3", "source"] == "profiler_step" and m.loc["forward", "source"] == "annotation"
    assert run.manifest["dropped"] == {"category python_function (not imported)": 1}
    assert any("relative" in n for n in run.manifest["import"]["notes"])
    assert run.manifest["clock"]["domain"] == ClockDomain.TRACE_RELATIVE.value
    assert [n.code for n in run.notes] == ["clock-relative"]
    assert pickle.loads(pickle.dumps(run.notes))[0].code == "clock-relative"  # pair's workers pickle runs


def test_negative_duration_is_dropped(tmp_path: Path) -> None:
    bad = dict(EVENTS[3], dur=-5, name="backwards")
    run = import_kineto(write(tmp_path / "neg.json", {"traceEvents": EVENTS + [bad]}))
    assert "backwards" not in set(run.activity["function"].astype(str))
    assert run.manifest["dropped"]["events with a negative duration"] == 1


def test_layouts_give_the_same_tables(tmp_path: Path) -> None:
    ref = table_of(import_kineto(write(tmp_path / "ref.json", {"traceEvents": EVENTS})))
    cases = {
        "compact.json": ({"traceEvents": EVENTS}, {"separators": (",", ":")}),
        "indented.json": ({"schemaVersion": 1, "traceEvents": EVENTS, "deviceProperties": []}, {"indent": 4}),
        "bare_list.json.gz": (EVENTS, {}),
        "sorted_keys.json": ({"traceEvents": EVENTS}, {"sort_keys": True}),  # "ph" not first: general parser
    }
    for name, (obj, dump) in cases.items():
        run = import_kineto(write(tmp_path / name, obj, **dump))
        pd.testing.assert_frame_equal(table_of(run), ref, obj=name)
        assert run.manifest["source"]["reader"] == ("json" if name.startswith("sorted") else "fast")


LEGACY = [
    {"ph": "X", "cat": "Operator", "name": "ProfilerStep#5", "pid": 7, "tid": "7", "ts": 100, "dur": 50},
    {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": "7", "ts": 110, "dur": 4,
     "args": {"correlation": 3, "external id": 1}},
    {"ph": "X", "cat": "Kernel", "name": "volta_sgemm", "pid": 0, "tid": "stream 7", "ts": 120, "dur": 9,
     "args": {"device": 0, "stream": 7, "correlation": 3}},
    {"ph": "X", "cat": "Memset", "name": "Memset (Device)", "pid": 1, "tid": "stream 9", "ts": 130, "dur": 1,
     "args": {"device": 1, "stream": 9, "correlation": 4, "bytes": 64}},
    {"ph": "f", "id": 3, "pid": 0, "tid": "stream 7", "ts": 120, "cat": "async", "name": "launch", "bp": "e"},
]
LEGACY_DOC = {"schemaVersion": 1, "traceEvents": LEGACY, "baseTimeNanoseconds": 1_600_000_000_000_000_000,
              "deviceProperties": [{"id": 0, "name": "Tesla V100", "numSms": 80, "computeMajor": 7, "computeMinor": 0}]}


def test_legacy_layout_and_base_time(tmp_path: Path) -> None:
    doc = LEGACY_DOC
    run = import_kineto(write(tmp_path / "legacy.pt.trace.json", doc, indent=2))
    a = run.activity.set_index(run.activity["function"].astype(str))
    base = 1_600_000_000_000_000_000
    assert a.loc["volta_sgemm", "start_ns"] == base + 120_000 and a.loc["volta_sgemm", "stream"] == 7
    assert a.loc["volta_sgemm", "launch_ns"] == base + 110_000 and a.loc["volta_sgemm", "tid"] == 7
    assert a.loc["Memset (Device)", "device"] == "GPU 1" and a.loc["Memset (Device)", "bytes"] == 64
    assert run.markers["name"].astype(str).tolist() == ["ProfilerStep#5"]
    assert run.manifest["gpus"] == [{"index": 0, "name": "Tesla V100", "sm_count": 80, "compute_capability": "7.0",
                                     "used": True}]
    assert run.manifest["run_name"] == "legacy"
    assert run.manifest["clock"] == {"domain": ClockDomain.REALTIME.value,
                                     "anchors": [{"source": "baseTimeNanoseconds", "base_ns": base}]}
    assert run.notes == []


def test_group_short(tmp_path: Path) -> None:
    run = import_kineto(write(tmp_path / "t.json", {"traceEvents": EVENTS}), group="short")
    k = run.activity[run.activity["kind"] == "kernel"]
    assert k["function"].astype(str).tolist() == ["foo"]
    assert short_kernel_name("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
                             "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>)") == \
        "vectorized_elementwise_kernel"
    assert short_kernel_name("volta_sgemm_128x64_nn") == "volta_sgemm_128x64_nn"


# ------------------------------------------------------------------------------ bad input

@pytest.mark.parametrize("name, data, message", [
    ("trunc.json", b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, '
                   b'"dur": 2}, {"ph": "X", "cat": "ke', "invalid JSON"),
    ("garbage.json", b"this is not json", "invalid JSON"),
    ("other.json", b'{"foo": 1}', "not a Chrome/Kineto trace"),
    ("empty.json", b"", "empty file"),
    ("no_events.json", b'{"traceEvents": []}', "no events"),
    ("list.json", b'[{"a": 1}]', "not a Chrome/Kineto trace"),
    ("python_only.json", json.dumps({"traceEvents": [EVENTS[-1]]}).encode(), "no GPU kernels"),
    ("trunc.json.gz", gzip.compress(json.dumps({"traceEvents": EVENTS}).encode())[:-30], "truncated gzip"),
    ("broken.json.gz", b"\x1f\x8b\x08\x00" + b"\xff" * 64, "gzip"),
])
def test_bad_input(tmp_path: Path, name: str, data: bytes, message: str) -> None:
    p = tmp_path / name
    p.write_bytes(data)
    with pytest.raises(InputError, match=message) as err:
        import_kineto(p)
    assert str(err.value).startswith(str(p)) and "\n" not in str(err.value)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"nope\.json: no such file"):
        import_kineto(tmp_path / "nope.json")
    with pytest.raises(InputError, match="not a file"):
        import_kineto(tmp_path)


# ------------------------------------------------------------------------------ the plain reference

def nccl_groups(activity: pd.DataFrame, process_groups: pd.DataFrame) -> pd.DataFrame:
    """Each NCCL kernel's activity row with its process group and members (readers order the
    activity rows differently: the groups are compared through the rows they refer to)."""
    rows = activity.iloc[process_groups["row"].to_numpy()].reset_index(drop=True)
    return canonical(rows.assign(group=process_groups["group"].to_numpy(), ranks=process_groups["ranks"].to_numpy()))


def assert_same_tables(run, ref: dict[str, pd.DataFrame], name: str) -> None:
    for table in ("activity", "markers", "samples", "gpu_ranges"):
        pd.testing.assert_frame_equal(canonical(getattr(run, table)), canonical(ref[table]), obj=f"{name} {table}")
    pd.testing.assert_frame_equal(nccl_groups(run.activity, run.process_groups),
                                  nccl_groups(ref["activity"], ref["process_groups"]), obj=f"{name} process groups")


@needs_real
@pytest.mark.real
@pytest.mark.parametrize("path", REAL_TRACES, ids=lambda p: p.parent.name + "/" + p.name[:24])
def test_real_trace_equals_the_plain_reference(path: Path) -> None:
    assert_same_tables(import_kineto(path), reference_tables(path), path.name)


def test_literal_traces_equal_the_plain_reference(tmp_path: Path) -> None:
    bad = dict(EVENTS[3], dur=-5, name="backwards")
    cases = {
        "events.json": ({"traceEvents": EVENTS}, {"indent": 1}),
        "compact.json.gz": ({"traceEvents": EVENTS + [bad]}, {"separators": (",", ":")}),
        "bare_list.json": (EVENTS, {}),
        "sorted_keys.json": ({"traceEvents": EVENTS}, {"sort_keys": True}),  # the general reader
        "legacy.json": (LEGACY_DOC, {"indent": 2}),
    }
    for name, (obj, dump) in cases.items():
        path = write(tmp_path / name, obj, **dump)
        for group in ("full", "short"):
            assert_same_tables(import_kineto(path, group=group), reference_tables(path, group), f"{name} {group}")


def test_null_absent_and_empty_names_read_unnamed_in_every_reader(tmp_path: Path) -> None:
    """A null name read "None" (as if a kernel were called so) and an empty one a blank row."""
    nameless = [dict(EVENTS[3], name=None, ts=1100), dict(EVENTS[3], name="", ts=1110),
                {k: v for k, v in EVENTS[3].items() if k != "name"} | {"ts": 1120},
                dict(EVENTS[3], name="None", ts=1130)]
    for name, dump in (("compact.json", {"separators": (",", ":")}), ("sorted_keys.json", {"sort_keys": True})):
        path = write(tmp_path / name, {"traceEvents": EVENTS + nameless}, **dump)
        run, ref = import_kineto(path), reference_tables(path)
        assert_same_tables(run, ref, name)
        names = Counter(run.activity["function"].astype(str))
        assert names[UNNAMED] == 3 and names["None"] == 1 and "" not in names


# ------------------------------------------------------------------------------ process groups

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def _nccl(ts: int, args, name: str = NCCL) -> dict:
    ev = {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 13, "ts": ts, "dur": 5}
    return ev if args is None else {**ev, "args": args}


PG_EVENTS = EVENTS + [
    _nccl(2000, {"correlation": 80, "Process Group Name": "2", "pg_name": "2", "Process Group Ranks": "[2, 0]",
                 "Group size": 2}),
    _nccl(2010, {"Process Group Name": "1", "Process Group Ranks": [1, 0]}, "void ncclKernel_AllGather_RING_LL()"),
    _nccl(2020, {"pg_name": "tp"}),  # older profilers: the name only
    _nccl(2030, {"device": 0}),  # names no group
    _nccl(2040, {"Process Group Name": 3, "Process Group Ranks": "not a list"}),
    _nccl(2050, {"Process Group Name": None, "pg_name": "x"}),  # the name key says null: no group
    _nccl(2060, {"Process Group Name": "é", "Process Group Ranks": "[5]"}, "ncclDevKernel_Broadcast_é"),
    _nccl(2070, None),  # no args at all
    _nccl(2080, [1]),  # args that are not an object
    _nccl(2090, {"Process Group Name": "dp", "Process Group Ranks": str(list(range(400, 0, -1)))}),  # long args
    {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 10, "tid": 11, "ts": 1999, "dur": 5,
     "args": {"Process Group Name": "1", "Process Group Ranks": "[0, 1]"}},  # names it too, but not a kernel
    _nccl(2100, {"Process Group Name": "1"}, "sgemm"),  # not an NCCL kernel
]
PG_WANT = {2000: ("2", "[0, 2]"), 2010: ("1", "[0, 1]"), 2020: ("tp", None), 2030: (None, None), 2040: ("3", None),
           2050: (None, None), 2060: ("é", "[5]"), 2070: (None, None), 2080: (None, None),
           2090: ("dp", str(list(range(1, 401))))}


def test_process_groups_of_nccl_kernels_agree_in_the_three_readers(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Each NCCL kernel keeps its own process group from its args (None where they name none),
    the same from the fast scanner (in one block or in many), the general reader and the plain
    reference; other kernels and CPU ops have none."""
    cases = {
        "events.json": ({"traceEvents": PG_EVENTS}, {"indent": 1}),
        "compact.json.gz": ({"traceEvents": PG_EVENTS}, {"separators": (",", ":")}),
        "bare_list.json": (PG_EVENTS, {}),
        "sorted_keys.json": ({"traceEvents": PG_EVENTS}, {"sort_keys": True}),  # the general reader
    }
    for name, (obj, dump) in cases.items():
        path = write(tmp_path / name, obj, **dump)
        run = import_kineto(path)
        assert_contract(run)
        assert run.manifest["source"]["reader"] == ("json" if name.startswith("sorted") else "fast")
        pg = run.process_groups
        kernels = run.activity.iloc[pg["row"].to_numpy()]
        got = {int(s) // 1000: (None if pd.isna(g) else g, None if pd.isna(r) else r)
               for s, g, r in zip(kernels["start_ns"], pg["group"], pg["ranks"], strict=True)}
        assert got == PG_WANT, name
        assert_same_tables(run, reference_tables(path), name)
        slow = tables.build(path, general.general_events(path), "full")
        pd.testing.assert_frame_equal(nccl_groups(run.activity, pg), nccl_groups(slow.activity, slow.process_groups))
    escaped = tmp_path / "escaped_key.json"  # a key written with an escape is the same key
    escaped.write_text((tmp_path / "events.json").read_text().replace('"pg_name": "tp"', '"pg\\u005fname": "tp"'))
    assert "\\u005f" in escaped.read_text()
    assert_same_tables(import_kineto(escaped), reference_tables(escaped), escaped.name)
    assert "tp" in set(import_kineto(escaped).process_groups["group"].dropna())
    path = tmp_path / "events.json"
    monkeypatch.setattr(blocks, "BLOCK", 400)  # events and args cut at block boundaries
    small = import_kineto(path)
    pd.testing.assert_frame_equal(nccl_groups(small.activity, small.process_groups),
                                  nccl_groups(reference_tables(path)["activity"],
                                              reference_tables(path)["process_groups"]))
    none = import_kineto(write(tmp_path / "none.json", {"traceEvents": EVENTS}))
    assert list(none.process_groups.columns) == ["row", "group", "ranks"] and len(none.process_groups) == 0


@pytest.mark.parametrize("pure", ["", "1"], ids=["compiled", "numpy"])
def test_a_thread_named_by_a_string_takes_its_first_number_wherever_it_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pure: str) -> None:
    """A pid/tid string is read as the number at its first digit, as the general and reference
    readers read it, also past its first 16 bytes; one without a digit is unknown."""
    monkeypatch.setenv("PERFDIFF_PURE", pure)
    tids = ["[" * 40 + "5555", "a thread name that is long 42", "Trace PyTorch Profiler", "stream 7", "x" * 15 + "9"]
    path = tmp_path / "tids.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": t, "ts": 10 + 10 * i, "dur": 5}
        for i, t in enumerate(tids)]}))
    run = import_kineto(path)
    assert run.manifest["source"]["reader"] == "fast"
    got = dict(zip(run.activity["function"].astype(str), run.activity["tid"].tolist(), strict=True))
    assert got == {"op0": 5555, "op1": 42, "op2": MISSING, "op3": 7, "op4": 9}
    ref = reference_tables(path)["activity"]
    assert dict(zip(ref["function"].astype(str), ref["tid"].tolist(), strict=True)) == got
