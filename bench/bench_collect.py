"""Collection overhead: collector CPU, tick jitter and marker cost.

    .venv/bin/python bench/bench_collect.py [--quick] [--seconds 10] [--repeat 3]

Runs `perfdiff collect --pid T --interval 100ms|10ms` (10 Hz and 100 Hz) for --seconds against
a 64-thread Python target and prints Markdown tables:

* collector CPU: the collect loop's own CPU time (user + system, every thread of the
  collector, from its first tick to its last) per second of collection, as % of one core;
  the whole process (imports and start-up included) is in its own column;
* tick jitter: how late each tick started against its schedule (p50 / p99 / max);
* where the floor is (not with --quick): a bare sleeping Python loop, one flat loop making the
  same reads as the collector's tick (FLOOR), and `perfdiff collect`, alternated at 10 Hz;
* the host sampler's host-wide part at 10 Hz on fake /proc and /sys trees of 2, 32 and 128
  CPUs (this VM has 2: the per-CPU readings are what grows on a GPU server);
* the cost of one mark (`with perfdiff.cycle("step")`), with nobody listening and with a
  collector's marks file open (least of 5 batches, and their median).

Two targets: "pool": 60 threads blocked on an event and 4 threads that compute 1 ms every
10 ms (a server's worker pool); "busy pool": all 64 threads compute 0.1 ms every 10 ms (every
thread has run at every tick, the sampler's worst case).  Budgets (docs/PERFORMANCE.md): under 1 % of
a core at 10 Hz, under 5 % at 100 Hz, jitter p99 under 5 ms, a mark under 5 µs (20 µs with a
collector listening).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable

TARGET = """
import sys, threading, time
busy = sys.argv[1] == "busy"
def idle(ev):
    ev.wait()
def periodic(work_s, period_s):
    while True:
        t = time.perf_counter()
        while time.perf_counter() - t < work_s:
            pass
        time.sleep(period_s)
ev = threading.Event()
for i in range(63):
    if busy:
        threading.Thread(target=periodic, args=(0.0001, 0.01), daemon=True).start()
    elif i < 4:
        threading.Thread(target=periodic, args=(0.001, 0.01), daemon=True).start()
    else:
        threading.Thread(target=idle, args=(ev,), daemon=True).start()
print("ready", flush=True)
ev.wait()
"""

TARGETS = {
    "pool": "64 threads: 60 blocked, 4 compute 1 ms every 10 ms",
    "busy": "64 threads, each computes 0.1 ms every 10 ms",
}


def collect_pid(pid: int, interval: str, seconds: float) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """One `perfdiff collect --pid` run: (the manifest's collection entry, its host collector
    entry, the collector process's rusage)."""
    with tempfile.TemporaryDirectory(prefix="perfdiff-bench-collect-") as tmp:
        out = Path(tmp) / "run"
        c = subprocess.Popen([PY, "-m", "perfdiff", "collect", "--pid", str(pid), "--duration",
                              f"{seconds}s", "--interval", interval, "-o", str(out)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        _, status, usage = os.wait4(c.pid, 0)
        c.returncode = os.waitstatus_to_exitcode(status)
        err = c.stderr.read() if c.stderr else ""
        if c.returncode != 0:
            raise SystemExit(f"collect failed ({c.returncode}): {err}")
        m = json.loads((out / "manifest.json").read_text())
    return m["collection"], next(x for x in m["collectors"] if x["name"] == "host"), usage


def start_target(target: str) -> subprocess.Popen[str]:
    """The 64-thread target process (TARGETS), once it is ready."""
    t = subprocess.Popen([PY, "-c", TARGET, target], stdout=subprocess.PIPE, text=True)
    assert t.stdout is not None and t.stdout.readline().strip() == "ready"
    return t


def collect_once(target: str, interval: str, seconds: float) -> dict[str, float]:
    """One `perfdiff collect` run against a fresh target; returns the manifest's loop figures."""
    t = start_target(target)
    try:
        col, host, usage = collect_pid(t.pid, interval, seconds)
    finally:
        t.kill()
        t.wait()
    return {
        "cpu_pct": 100.0 * col["cpu_ns"] / col["wall_ns"],
        "process_cpu_s": usage.ru_utime + usage.ru_stime,
        "p50_ms": col["jitter_p50_ns"] / 1e6,
        "p99_ms": col["jitter_p99_ns"] / 1e6,
        "max_ms": col["jitter_max_ns"] / 1e6,
        "ticks": col["ticks"],
        "overruns": col["overruns"],
        "threads": host.get("max_threads", 0),
    }


def mark_cost_us(listening: str | None, n: int = 20_000) -> tuple[float, float]:
    """(least, median) µs per mark over 5 batches; `listening`: directory of a collector or None."""
    code = f"""
import os, time
from perfdiff import marker
from perfdiff.collectors.markers import MarkerReader
d = {listening!r}
reader = None
if d:
    os.environ[marker.ENV_DIR] = d
    reader = MarkerReader(d, announced=True)
with marker.cycle("warm"):
    pass
assert marker.listening() == bool(d)
res = []
for _ in range(5):
    t = time.perf_counter()
    for _ in range({n}):
        with marker.cycle("step"):
            pass
    res.append((time.perf_counter() - t) / {n} * 1e6)
if reader:
    reader.close()
print(min(res), sorted(res)[2])
"""
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), float(out[1])


MANY_CPUS = """
import os, pathlib, sys, tempfile, time
from perfdiff.bundle import open_writer
from perfdiff.collectors.host import HostSampler, ProcFS
n, seconds = int(sys.argv[1]), float(sys.argv[2])
root = pathlib.Path(tempfile.mkdtemp(prefix="perfdiff-bench-cpus-"))
(root / "proc").mkdir()
def stat(k):
    return ("cpu  " + " ".join([str(1000 * k)] * 10) + "\\n" + "".join(
        f"cpu{i} " + " ".join([str(10 * k + i)] * 10) + "\\n" for i in range(n))
        + "intr " + " ".join(["0"] * 500) + "\\nctxt 1\\nbtime 1\\nprocesses 5\\n")
for name in ("meminfo", "diskstats"):
    (root / "proc" / name).write_bytes(open("/proc/" + name, "rb").read())
(root / "sys/block/vda").mkdir(parents=True)
for i in range(n):
    d = root / f"sys/devices/system/cpu/cpu{i}/cpufreq"
    d.mkdir(parents=True)
    (d / "scaling_cur_freq").write_text("2400000\\n")
    (d / "cpuinfo_max_freq").write_text("3000000\\n")
(root / "proc/stat").write_text(stat(0))
s = HostSampler(lambda: set(), interval_ns=100_000_000, cpu_clock=None,
                procfs=ProcFS(proc=str(root / "proc"), sys=str(root / "sys")))
w = open_writer(root / "run", {})
s.start(time.time_ns())
cpu = rows = 0
ticks = int(seconds * 10)
for k in range(1, ticks + 1):
    time.sleep(0.1)
    with open(root / "proc/stat", "r+") as fh:
        fh.write(stat(k))
    t = time.thread_time_ns()
    s.tick(time.time_ns())
    if k % 8 == 0 or k == ticks:  # the collector's flush: rows into the journal
        for table, cols in s.take().items():
            rows += len(next(iter(cols.values())))
            w.journal(table, cols)
    cpu += time.thread_time_ns() - t
print(100 * cpu / (ticks * 1e8), rows / ticks)
"""


# The floor: what a tick costs from Python at all.  BARE sleeps to each 100 ms boundary and
# reads nothing; FLAT makes the collector's reads of a 10 Hz tick of the pool target in one
# flat loop (the leader's stat and io, the schedstat of the threads that ran at the last tick
# and of 3 others in turn, the syscall file of those whose schedstat moved, the process CPU
# clock twice, /proc/stat, meminfo, diskstats, loadavg every other tick, a pidfd poll) and
# appends one JSON line of numbers every 8 ticks.  Both print their CPU, % of a core.
FLOOR = """
import json, os, select, sys, tempfile, time
pid, mode, seconds = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
pread = os.pread
if mode == "flat":
    task = f"/proc/{pid}/task/"
    tids = sorted(int(t) for t in os.listdir(task))
    sched = [os.open(f"{task}{t}/schedstat", os.O_RDONLY) for t in tids]
    sysf = [os.open(f"{task}{t}/syscall", os.O_RDONLY) for t in tids]
    last = [pread(fd, 128, 0) for fd in sched]
    ran = list(range(len(tids)))
    lead = os.open(f"{task}{pid}/stat", os.O_RDONLY)
    io = os.open(f"/proc/{pid}/io", os.O_RDONLY)
    host = [os.open(f"/proc/{n}", os.O_RDONLY) for n in ("stat", "meminfo", "diskstats")]
    loadavg = os.open("/proc/loadavg", os.O_RDONLY)
    poller = select.poll()
    poller.register(os.pidfd_open(pid), select.POLLIN)
    clock = (~pid << 3) | 2
    out = tempfile.TemporaryFile("w")
r, w = os.pipe()
rows = []
cpu0, t0 = time.process_time_ns(), time.monotonic_ns()
next_tick, n = t0, 0
while time.monotonic_ns() - t0 < seconds * 1e9:
    next_tick += 100_000_000
    delay = next_tick - time.monotonic_ns()
    if delay > 0:
        select.select([r], [], [], delay / 1e9)
    if mode == "bare":
        continue
    n += 1
    c0 = time.clock_gettime_ns(clock)
    st = pread(lead, 4096, 0).rsplit(b")", 1)[1].split()
    moved = []
    for i in ran + [(3 * n + k) % len(tids) for k in range(3)]:
        raw = pread(sched[i], 128, 0)
        if raw != last[i]:
            last[i] = raw
            moved.append(i)
            pread(sysf[i], 128, 0)
    ran = moved
    c1 = time.clock_gettime_ns(clock)
    rows.append((time.time_ns(), c0, c1, int(st[17]), int(st[21]), len(pread(io, 4096, 0)),
                 *(len(pread(fd, 65536, 0)) for fd in host)))
    if n % 2 == 0:
        pread(loadavg, 256, 0)
    poller.poll(0)
    if n % 8 == 0:
        out.write(json.dumps(rows) + "\\n")
        out.flush()
        rows = []
print(100 * (time.process_time_ns() - cpu0) / (time.monotonic_ns() - t0))
"""


def floor_rows(repeat: int, seconds: float) -> list[str]:
    """Markdown rows: the bare loop, the flat reads and `perfdiff collect` at 10 Hz against the
    pool target, alternated `repeat` times."""
    t = start_target("pool")
    runs: dict[str, list[float]] = {"bare": [], "flat": [], "collect": []}
    try:
        for _ in range(repeat):
            for mode in ("bare", "flat"):
                out = subprocess.run([PY, "-c", FLOOR, str(t.pid), mode, str(seconds)], capture_output=True,
                                     text=True, check=True).stdout
                runs[mode].append(float(out))
            col, _, _ = collect_pid(t.pid, "100ms", seconds)
            runs["collect"].append(100.0 * col["cpu_ns"] / col["wall_ns"])
    finally:
        t.kill()
        t.wait()
    label = {"bare": "a bare Python loop: sleep to each 100 ms boundary, read nothing",
             "flat": "one flat Python loop making the collector's reads of a tick (bench_collect.FLOOR)",
             "collect": "`perfdiff collect --pid`"}
    return [f"| {label[m]} | {' / '.join(f'{v:.2f}' for v in vs)} |" for m, vs in runs.items()]


def many_cpus_cost(cpus: int, seconds: float) -> tuple[float, float]:
    """(% of a core, sample rows per tick) of the host sampler's host-wide part at 10 Hz, with its
    rows journaled, on a fake /proc and /sys of `cpus` CPUs (this VM has 2)."""
    out = subprocess.run([PY, "-c", MANY_CPUS, str(cpus), str(seconds)], capture_output=True, text=True,
                         check=True).stdout.split()
    return float(out[0]), float(out[1])


def machine() -> str:
    load = os.getloadavg()
    try:  # time runnable tasks waited for a CPU: on a shared VM, how noisy this minute is
        some = open("/proc/pressure/cpu").readline().split()[2].split("=")[1]
        pressure = f", CPU pressure (some, avg60) {some} %"
    except (OSError, IndexError):
        pressure = ""
    return (f"{platform.machine()}, {os.cpu_count()} CPUs, Linux {platform.release()}, "
            f"Python {platform.python_version()}, load average {load[0]:.2f} at start{pressure}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 s runs, the pool target only")
    ap.add_argument("--seconds", type=float, default=None, help="collection length per run (10)")
    ap.add_argument("--repeat", type=int, default=None,
                    help="runs per row, the median reported (3; 1 with --quick): this VM's speed "
                         "drifts by ±30 %% from minute to minute")
    args = ap.parse_args(argv)
    seconds = args.seconds or (3.0 if args.quick else 10.0)
    repeat = max(1, args.repeat or (1 if args.quick else 3))
    targets = ["pool"] if args.quick else ["pool", "busy"]
    print(f"Machine: {machine()}; `perfdiff collect --pid` for {seconds:g} s per run, "
          f"{repeat} run(s) per row (the rates alternate), the run of median collector CPU shown.")
    print()
    print("| target | rate | collector CPU, loop (% of a core): median (all runs) | budget | whole process CPU (s) "
          "| jitter p50 / p99 / max (ms) | ticks (skipped) | threads seen |")
    print("|---|---|---|---|---|---|---|---|")
    rates = (("100ms", 10, 1.0), ("10ms", 100, 5.0))
    for target in targets:
        runs: dict[str, list[dict[str, float]]] = {iv: [] for iv, _, _ in rates}
        for _ in range(repeat):  # alternated, so that a slow minute touches both rates
            for interval, _, _ in rates:
                runs[interval].append(collect_once(target, interval, seconds))
        for interval, hz, budget in rates:
            rs = sorted(runs[interval], key=lambda x: x["cpu_pct"])
            r = rs[len(rs) // 2]
            ok = "ok" if r["cpu_pct"] < budget and r["p99_ms"] < 5.0 else "**over**"
            every = " / ".join(f"{x['cpu_pct']:.2f}" for x in runs[interval])
            print(f"| {TARGETS[target]} | {hz} Hz | {r['cpu_pct']:.2f} ({every}) | < {budget:g} % ({ok}) | "
                  f"{r['process_cpu_s']:.2f} | {r['p50_ms']:.2f} / {r['p99_ms']:.2f} / {r['max_ms']:.1f} | "
                  f"{r['ticks']} ({r['overruns']}) | {r['threads']} |")
    if not args.quick:
        print()
        print("| 10 Hz against the pool target, alternated | CPU (% of a core), each run |")
        print("|---|---|")
        for row in floor_rows(2, seconds):
            print(row)
    print()
    print("| host-wide sampling at 10 Hz, fake /proc and /sys of | CPU of tick + flush (% of a core) | sample rows per tick |")
    print("|---|---|---|")
    for cpus in (2, 32, 128):
        pct, rows = many_cpus_cost(cpus, 2.0 if args.quick else 6.0)
        print(f"| {cpus} CPUs | {pct:.2f} | {rows:.0f} |")
    print()
    print("| mark (`with perfdiff.cycle(\"step\")`) | least of 5 batches (µs) | median batch (µs) | budget |")
    print("|---|---|---|---|")
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    cases = [("nobody listening", None, 5.0)]
    with tempfile.TemporaryDirectory(prefix="perfdiff-bench-marks-", dir=shm) as d1, \
            tempfile.TemporaryDirectory(prefix="perfdiff-bench-marks-") as d2:
        cases += [(f"collector listening (marks file in {'/dev/shm' if shm else '/tmp'})", d1, 20.0),
                  ("collector listening (marks file in the temp dir on disk)", d2, 20.0)]
        for label, d, budget in cases:
            least, med = mark_cost_us(d)
            print(f"| {label} | {least:.2f} | {med:.2f} | < {budget:g} µs ({'ok' if least < budget else '**over**'}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
