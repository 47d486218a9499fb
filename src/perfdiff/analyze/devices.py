"""GPU time per device, both runs: where a process drives several GPUs, each one's total is
shown beside the cycle time, so that no GPU's change hides behind another's rows (the top
functions may all be one GPU's).  Pure: no I/O."""
from __future__ import annotations

from collections.abc import Iterable

from perfdiff.analyze.records import DeviceTotal, FunctionStats
from perfdiff.model.schema import GPU_KINDS

__all__ = ["device_totals"]


def device_totals(functions: Iterable[FunctionStats]) -> tuple[DeviceTotal, ...]:
    """GPU time per cycle (µs) of each device's kernels, memcpys and memsets in both runs,
    devices in name order (GPU 2 before GPU 10)."""
    t: dict[str, list[float]] = {}
    for f in functions:
        if f.kind not in GPU_KINDS:
            continue
        row = t.setdefault(f.device, [0.0, 0.0, 0, 0])
        row[0] += f.t_n_us
        row[1] += f.t_a_us
        row[2] += int(f.presence != "new")
        row[3] += int(f.presence != "vanished")

    def order(device: str) -> tuple[str, int, str]:
        head, _, tail = device.rpartition(" ")
        return (head, int(tail), "") if tail.isdigit() else (device, -1, device)

    return tuple(DeviceTotal(device=d, t_n_us=tn, t_a_us=ta, d_us=ta - tn, functions_n=int(fn), functions_a=int(fa))
                 for d, (tn, ta, fn, fa) in sorted(t.items(), key=lambda kv: order(kv[0])))
