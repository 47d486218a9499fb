"""Host-wide readings: CPU usage, CPU clocks, memory and disks of the whole machine.

`HostWideReader` (a part of `HostSampler`, which holds its state) reads /proc/stat, meminfo,
diskstats and the CPU clocks (cpufreq in /sys, else /proc/cpuinfo) at the host cadence and
keeps their bytes; at the flush (`take`) it parses them into sample rows: host_cpu_usage (%),
cpu_frequency_mhz (MHz), cpu_frequency (% of max), host_mem_used (bytes), and per disk
disk_usage (busy %), disk_read and disk_write (bytes/s).
"""
from __future__ import annotations

import os

from perfdiff.collectors.procfs import field, pread_file, read_all

from .taskstate import HOST

# Host-wide counters (/proc/stat CPU time, a process's utime+stime) move in clock ticks
# (USER_HZ, 10 ms): over 100 ms a CPU's busy share already moves in steps of 10 %, and read
# faster they are mostly quantisation noise, so the host metrics are read at most this often whatever --interval is (the target's threads
# follow --interval).
HOST_MIN_NS = 100_000_000
CPUINFO_EVERY_NS = 1_000_000_000  # /proc/cpuinfo clock readings (no cpufreq) at most this often
# Per-CPU readings (each CPU's cpufreq file read, its /proc/stat line parsed, and their rows)
# cost in proportion to the CPUs, so on a server with many CPUs they are taken every max(HOST_MIN_NS, CPUs × PER_CPU_NS): every host tick up to 10 CPUs,
# every 1.28 s on 128, at the first host tick (a short run has them too) and at the end
# (`stop`: the rows cover the run to its end).  /proc/stat is read whole at every host tick all
# the same (the total is its first line); the host totals and the clocks of the CPUs the
# target ran on (its frequency mean) stay at every host tick.
PER_CPU_NS = 10_000_000
_PER_CPU_ONLY = 2  # a host_ticks entry's per-CPU field: the last per-CPU reading, no host rows
SECTOR = 512  # /proc/diskstats counts 512-byte sectors whatever the device's block size


def parse_cpu_times(raw: bytes) -> dict[str, tuple[int, int]]:
    """/proc/stat cpu lines → {"cpu": (busy, total), "cpu0": ...} in USER_HZ ticks.

    busy excludes idle and iowait; guest time is already inside user and nice.
    """
    out: dict[str, tuple[int, int]] = {}
    for line in raw.split(b"\n"):
        if not line.startswith(b"cpu"):
            if out:
                break  # the cpu lines come first
            continue
        f = line.split()
        v = [int(x) for x in f[1:9]]  # user nice system idle iowait irq softirq steal
        total = sum(v)
        out[f[0].decode()] = (total - v[3] - v[4], total)
    return out



def parse_meminfo(raw: bytes, keys: tuple[str, ...] = ("MemTotal", "MemAvailable")) -> dict[str, int]:
    """/proc/meminfo → {key: bytes} for `keys` (kB values scaled); absent keys are left out."""
    out: dict[str, int] = {}
    for name in keys:
        text = field(raw, name.encode())
        if text is not None:
            f = text.split()
            out[name] = int(f[0]) * (1024 if len(f) > 1 and f[1] == b"kB" else 1)
    return out


def parse_diskstats(raw: bytes, want: frozenset[bytes] | None = None) -> dict[str, tuple[int, int, int]]:
    """/proc/diskstats → {disk: (sectors read, sectors written, ms busy)} for the disk names in
    `want` (encoded, as the lines hold them; all when None).  A wanted disk's line is found by
    its name (the file also lists every partition and loop device)."""
    if want is None:
        lines = raw.split(b"\n")
    else:
        lines = []
        for name in want:
            k = raw.find(b" " + name + b" ")  # "major minor name fields": the name between spaces
            if k >= 0:
                lines.append(raw[raw.rfind(b"\n", 0, k) + 1:raw.find(b"\n", k) % (len(raw) + 1)])
    out = {}
    for line in lines:
        head = line.split(None, 3)  # major minor name rest
        if len(head) < 4 or (want is not None and head[2] not in want):
            continue
        f = head[3].split()
        if len(f) >= 10:
            out[head[2].decode()] = (int(f[2]), int(f[6]), int(f[9]))
    return out


def parse_cpuinfo_mhz(raw: bytes) -> dict[int, float]:
    """/proc/cpuinfo → {cpu: MHz} from each block's "processor" and "cpu MHz" lines.

    Block by block with `find`, not line by line: a many-CPU machine's cpuinfo has thousands
    of lines, and it is parsed once a second where there is no cpufreq."""
    out: dict[int, float] = {}
    for block in (b"\n" + raw).split(b"\nprocessor")[1:]:
        k = block.find(b"\ncpu MHz")
        if k < 0:
            continue
        end = block.find(b"\n", k + 1)
        try:
            cpu = int(block[block.find(b":") + 1:block.find(b"\n")])
            out[cpu] = float(block[block.find(b":", k) + 1:end if end >= 0 else None])
        except ValueError:
            continue  # a torn block
    return out



class HostWideReader:
    """Reads and parses the host-wide files (the host-cadence part of HostSampler)."""

    def _start_cpu_frequency(self, t_ns: int, cpus: list[int]) -> None:
        base = os.path.join(self.fs.sys, "devices/system/cpu")
        for cpu in cpus:
            d = f"{base}/cpu{cpu}/cpufreq/"
            try:
                mhz = int(self.fs.read_sys(f"devices/system/cpu/cpu{cpu}/cpufreq/cpuinfo_max_freq")) / 1000.0
                if mhz > 0:  # a 0 (a broken driver) would divide by zero: no % of max for that CPU
                    self.max_mhz[cpu] = mhz
            except (OSError, ValueError):
                pass
            try:
                fd = self.fds.open(d + "scaling_cur_freq")
            except OSError:
                continue
            self.freq_fds[cpu] = (fd, d + "scaling_cur_freq")
        if self.freq_fds:
            self.freq_source = "/sys/devices/system/cpu/cpu*/cpufreq/scaling_cur_freq"
        else:
            try:
                if parse_cpuinfo_mhz(self.fs.read("cpuinfo")):
                    self.freq_source = "/proc/cpuinfo 'cpu MHz' (no cpufreq driver: may be the nominal clock)"
            except OSError:
                pass
        if not self.freq_source:
            for m in ("cpu_frequency_mhz", "cpu_frequency"):
                self.state.mark_unsupported(HOST, m, "no cpufreq in /sys and no 'cpu MHz' in /proc/cpuinfo", t_ns)
        elif not self.max_mhz:
            self.state.mark_unsupported(
                HOST, "cpu_frequency", "no cpufreq/cpuinfo_max_freq in /sys: the maximum clock is unknown", t_ns)

    def _start_disks(self, t_ns: int) -> None:
        try:
            names = os.listdir(os.path.join(self.fs.sys, "block"))
            self.disks = frozenset(n for n in names if not n.startswith(("loop", "ram")))
            self.disk_keys = frozenset(n.encode() for n in self.disks)
        except OSError:
            self.disks = None  # no /sys/block: every line of diskstats
        try:  # the baseline
            self.disk_prev = parse_diskstats(self._read_proc("diskstats"), self.disk_keys)
        except OSError as exc:
            for m in ("disk_usage", "disk_read", "disk_write"):
                self.state.mark_unsupported(HOST, m, f"cannot read /proc/diskstats: {exc.strerror}", t_ns)

    def _read_proc(self, name: str) -> bytes:
        """A host-wide /proc file through a kept descriptor (raises OSError)."""
        entry = self.host_fds.get(name)
        if entry is None:
            path = os.path.join(self.fs.proc, name)
            entry = self.host_fds[name] = (self.fds.open(path), path)
        return read_all(*entry)

    def _read_cpu_times(self) -> None:
        """The /proc/stat baseline (cpu_prev; empty when unreadable)."""
        try:
            self.cpu_prev = parse_cpu_times(self._read_proc("stat"))
        except OSError:
            self.cpu_prev = {}

    def _read_host_raw(self, name: str) -> bytes | None:
        try:
            return self._read_proc(name)
        except OSError:
            return None

    def _read_frequencies_raw(self, t_ns: int, every_cpu: bool) -> list[tuple[int, bytes]] | bytes | None:
        """The clock readings of this tick: (cpu, scaling_cur_freq bytes) per CPU (`every_cpu`:
        all, else those the target ran on), or /proc/cpuinfo's bytes (at most every
        CPUINFO_EVERY_NS), or None."""
        if self.freq_fds:
            out = []
            fds = self.freq_fds
            for cpu in fds if every_cpu else [c for c in self.target_cpus if c in fds]:
                fd, path = fds[cpu]
                try:
                    out.append((cpu, pread_file(fd, path)))
                except OSError:
                    pass
            return out
        if self.freq_source and t_ns >= self.cpuinfo_next_ns:
            # /proc/cpuinfo is slow (it may ask every CPU for its clock): at most once a second.
            self.cpuinfo_next_ns = t_ns + CPUINFO_EVERY_NS
            return self._read_host_raw("cpuinfo")
        return None

    def _expand_host(self) -> None:
        """Parse the buffered host-wide readings into sample rows, in tick order (each
        counter's delta against the reading before it)."""
        ticks, self.host_ticks = self.host_ticks, []
        rows: list[tuple[str, str, int, int, float]] = []
        for t0, t1, stat, mem, disks, freqs, cpus, cpu_s, rss, per_cpu in ticks:
            n = len(rows)
            try:
                self._host_rows(rows, t0, t1, stat, mem, disks, freqs, cpus, per_cpu)
            except Exception as exc:  # noqa: BLE001 - one odd reading must not lose the batch
                del rows[n:]
                self.host_row_errors += 1
                if self.host_row_errors <= 3:
                    self.state.event(t1, HOST, "host-rows-error", error=f"{type(exc).__name__}: {exc}")
            if cpu_s >= 0:  # a target was alive in the meantime
                rows.append(("process_cpu_usage", HOST, t0, t1, 100.0 * cpu_s / ((t1 - t0) / 1e9)))
                rows.append(("process_rss", HOST, t1, t1, float(rss * self.page_size)))
        self.buf.samples(rows)

    def _device(self, name: str) -> str:
        """Device label of a /proc/stat CPU name ("cpu" → "Host", "cpu3" → "CPU 3") or, prefixed
        with "/", of a disk ("/vda" → "Disk vda"); kept, as a flush names each many times."""
        dev = self.devices.get(name)
        if dev is None:
            dev = self.devices[name] = (f"Disk {name[1:]}" if name[0] == "/" else HOST if name == "cpu"
                                        else f"CPU {name[3:]}")
        return dev

    def _host_rows(self, rows: list[tuple[str, str, int, int, float]], t0: int, t1: int, stat: bytes | None,
                   mem: bytes | None, disks: bytes | None, freq_raw: list[tuple[int, bytes]] | bytes | None,
                   target_cpus: set[int], per_cpu: int = 1) -> None:
        """Append one host-cadence tick's sample rows over [t0, t1] to `rows`; `per_cpu`: 1 (or
        True) also the per-CPU rows (each over the time since the last per-CPU reading), 0 not,
        _PER_CPU_ONLY (the reading `stop` adds) only those."""
        device = self._device
        if stat is not None:
            try:
                now = parse_cpu_times(stat if per_cpu else stat[:stat.find(b"\n") % (len(stat) + 1)])
            except (ValueError, IndexError):
                now = {}
            total_now = now.get("cpu") if per_cpu != _PER_CPU_ONLY else None
            if total_now is not None:
                # Deltas span back to the last good reading (the tick before, unless its read failed).
                p = self.cpu_prev.get("cpu")
                self.cpu_prev["cpu"] = total_now
                c0, self.cpu_prev_ns = self.cpu_prev_ns, t1
                if p is not None and total_now[1] > p[1]:
                    rows.append(("host_cpu_usage", HOST, c0, t1, 100.0 * (total_now[0] - p[0]) / (total_now[1] - p[1])))
            if per_cpu and len(now) > 1:
                c0, prev = self.per_cpu_stat_ns, self.cpu_prev
                for name, (busy, total) in now.items():
                    p = prev.get(name)
                    if name != "cpu" and p is not None and total > p[1]:
                        rows.append(("host_cpu_usage", device(name), c0, t1, 100.0 * (busy - p[0]) / (total - p[1])))
                if "cpu" in self.cpu_prev:
                    now["cpu"] = self.cpu_prev["cpu"]
                self.cpu_prev, self.per_cpu_stat_ns = now, t1  # baseline and its time together
        if isinstance(freq_raw, bytes):
            try:
                freqs = parse_cpuinfo_mhz(freq_raw)
            except ValueError:
                freqs = {}
        else:
            freqs = {}
            for cpu, raw in freq_raw or ():
                try:
                    freqs[cpu] = int(raw) / 1000.0
                except ValueError:
                    pass
        max_mhz = self.max_mhz
        for cpu, mhz in freqs.items() if per_cpu or isinstance(freq_raw, bytes) else ():
            dev = device(f"cpu{cpu}")
            rows.append(("cpu_frequency_mhz", dev, t1, t1, mhz))
            if cpu in max_mhz:
                rows.append(("cpu_frequency", dev, t1, t1, 100.0 * mhz / max_mhz[cpu]))
        on = [c for c in target_cpus if c in freqs]  # none for `stop`'s reading: it passes no CPUs
        if on:
            rows.append(("cpu_frequency_mhz", HOST, t1, t1, sum(freqs[c] for c in on) / len(on)))
            pct = [100.0 * freqs[c] / max_mhz[c] for c in on if c in max_mhz]
            if pct:
                rows.append(("cpu_frequency", HOST, t1, t1, sum(pct) / len(pct)))
        if mem is not None:
            try:
                m = parse_meminfo(mem)
                rows.append(("host_mem_used", HOST, t1, t1, float(m["MemTotal"] - m["MemAvailable"])))
            except (KeyError, ValueError, IndexError):
                pass
        if disks is None:
            return
        try:
            dnow = parse_diskstats(disks, self.disk_keys)
        except (ValueError, IndexError):
            return
        dprev, self.disk_prev = self.disk_prev, dnow
        t0, self.disk_prev_ns = self.disk_prev_ns, t1
        dt = t1 - t0
        if dt <= 0:
            return
        per_s = SECTOR / (dt / 1e9)
        for name, (rd, wr, busy_ms) in dnow.items():
            p = dprev.get(name)
            if p is None:
                continue
            dev = device("/" + name)
            rows.append(("disk_usage", dev, t0, t1, min(100.0, 100.0 * (busy_ms - p[2]) * 1e6 / dt)))
            rows.append(("disk_read", dev, t0, t1, (rd - p[0]) * per_s))
            rows.append(("disk_write", dev, t0, t1, (wr - p[1]) * per_s))
