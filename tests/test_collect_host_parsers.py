"""The host sampler's parsers of /proc files, and the /proc seam's NSpid reader."""
from __future__ import annotations

import os
from pathlib import Path

from fakes.fake_host import stat_line

from perfdiff.collectors import host as H
from perfdiff.collectors import procfs
from perfdiff.collectors.procfs import ProcFS


def test_parsers() -> None:
    st = H.parse_task_stat(stat_line(7, "D", comm="a (b) c", ppid=3, utime=4, stime=5, threads=6,
                                     start=8, rss=9, cpu=1).encode())
    assert (st.state, st.ppid, st.utime, st.stime, st.num_threads, st.starttime, st.rss_pages,
            st.processor) == ("D", 3, 4, 5, 6, 8, 9, 1)
    assert H.parse_schedstat(b"123 456 7\n") == (123, 456, 7)
    assert H.parse_syscall(b"running\n") == H.RUNNING
    assert H.parse_syscall(b"-1 0x7ffc 0x7f00\n") == -1
    assert H.parse_syscall(b"17 0x3 0x0 0x0\n") == 17
    assert H.parse_io(b"rchar: 5\nwchar: 6\n") == {"rchar": 5, "wchar": 6}
    # Only whole keys at a line start: /proc/PID/io has write_bytes and cancelled_write_bytes.
    io = b"rchar: 1\nwchar: 2\nsyscr: 3\ncancelled_write_bytes: 9\nwrite_bytes: 4\n"
    assert H.parse_io(io, ("wchar", "write_bytes", "read_bytes")) == {"wchar": 2, "write_bytes": 4}
    assert H.parse_io(b"wchar: 6") == {"wchar": 6}  # no final newline
    assert H.parse_diskstats(b"   8 0 sda 1 2 3 4 5 6 7 8 9 10 11\n   8 1 sda1 9 9 9 9 9 9 9 9 9 9 9\n"
                             b"   7 0 loop0 0 0 0 0 0 0 0 0 0 0 0", frozenset({b"sda", b"loop0"})) == {
        "sda": (3, 7, 10), "loop0": (0, 0, 0)}
    assert H.parse_diskstats(b"   8 1 sda1 9 9 9 9 9 9 9 9 9 9 9\n", frozenset({b"sda"})) == {}
    assert H.parse_cpu_times(b"cpu 1 2 3 4 5 6 7 8 9 10\ncpu0 1 0 0 1 0 0 0 0 0 0\nintr 5\n") == {
        "cpu": (1 + 2 + 3 + 6 + 7 + 8, 36), "cpu0": (1, 2)}
    assert H.parse_meminfo(b"MemTotal: 2 kB\nMemAvailable: 1 kB\n") == {"MemTotal": 2048, "MemAvailable": 1024}
    assert H.parse_cpuinfo_mhz(b"processor\t: 3\ncpu MHz\t\t: 1234.5\n") == {3: 1234.5}
    assert H.parse_cpuinfo_mhz(b"processor\t: 3\ncpu MHz\t\t: 1234.5") == {3: 1234.5}  # no final newline
    two = (b"processor\t: 0\nvendor_id\t: X\ncpu MHz\t\t: 1000.0\ncache size\t: 1 KB\n\n"
           b"processor\t: 1\nmodel name\t: processor Y\ncpu MHz\t\t: 2000.5\nflags\t\t: a b\n\n")
    assert H.parse_cpuinfo_mhz(two) == {0: 1000.0, 1: 2000.5}
    assert H.parse_cpuinfo_mhz(b"processor\t: 0\nBogoMIPS\t: 50.00\n\n") == {}  # aarch64: no clock


def test_procfs_nspid_is_the_one_reader_of_a_pid_in_each_namespace(tmp_path: Path) -> None:
    fs = ProcFS(proc=str(tmp_path))
    (tmp_path / "40").mkdir()
    (tmp_path / "40" / "status").write_bytes(b"Name:\tpython3\nPid:\t40\nNSpid:\t40\t7\t1\nNSgid:\t40\n")
    (tmp_path / "41").mkdir()
    (tmp_path / "41" / "status").write_bytes(b"Name:\told kernel\nPid:\t41\n")  # before Linux 4.1: no NSpid
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "status").write_bytes(b"NSpid:\t42\tx\n")  # torn
    assert fs.nspid(40) == (40, 7, 1) and fs.inner_pid(40) == 1
    assert fs.nspid(41) == (41,) and fs.inner_pid(41) == 41
    assert fs.nspid(42) is None and fs.inner_pid(42) == 42
    assert fs.nspid(43) is None and fs.inner_pid(43) == 43 and not fs.exists(43)
    assert procfs.as_procfs(str(tmp_path)) == fs and procfs.as_procfs(fs) is fs
    assert procfs.field(b"Uid:\t5\t5\nGid:\t6\n", b"Uid") == b"\t5\t5"
    assert procfs.field(b"Name:\tx\nUid:\t5\n", b"Uid") == b"\t5"
    assert procfs.field(b"Name:\tx\n", b"Uid") is None


def test_procfs_nspid_of_this_process() -> None:
    assert ProcFS().inner_pid(os.getpid()) == os.getpid()  # the tests run in one PID namespace


def test_host_info_reads_the_cpu_model_through_the_seam(tmp_path: Path) -> None:
    (tmp_path / "cpuinfo").write_bytes(b"processor\t: 0\nmodel name\t: Fake CPU 9000\ncpu MHz\t\t: 2000.000\n")
    info = H.host_info(ProcFS(proc=str(tmp_path)))
    assert info["cpu_model"] == "Fake CPU 9000" and info["cores"] == os.cpu_count()
    assert info["kernel"] == os.uname().release and info["clk_tck"] == os.sysconf("SC_CLK_TCK")
    assert H.host_info(ProcFS(proc=str(tmp_path / "absent")))["cpu_model"] == ""
