"""The direction of the cycle-time change, from which a cause must move: the mean cycle's,
unless only the median's shift is significant and the two moved apart (a different mix of
cycles)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

import perfdiff
from step_loops import serial_steps
from perfdiff.analyze.verdict import VerdictCode



def decode_loop(out: Path, *, seed: int, prefill_share: float, attention_us: float, n: int = 120,
                stalls: int = 0, batch_var: float = 0.0) -> Path:
    """A serving loop: each step the host schedules (300 µs), then the GPU runs six attention
    and six GEMM kernels back to back, their times scaled by the step's batch (uniform within
    ± `batch_var`); a `prefill_share` of the steps also run two long prefill GEMMs (1.2 ms
    each); the first `stalls` steps stall 20 ms in the host's garbage collector.  Steps are
    perfdiff-marked."""
    rng = np.random.default_rng(seed)

    def steps():
        for step in range(n):
            batch = rng.uniform(1 - batch_var, 1 + batch_var) if batch_var else 1.0
            work = [("scheduler_schedule", "cpu", "Host", 300.0)]
            work += [("gc_collect", "cpu", "Host", 20_000.0)] if step < stalls else []
            work += [("paged_attention_decode_kernel", "kernel", "GPU 0", attention_us), ("gemm_kernel", "kernel",
                                                                                           "GPU 0", 20.0)] * 6
            if rng.random() < prefill_share:
                work += [("gemm_prefill_kernel", "kernel", "GPU 0", 1_200.0)] * 2
            yield 0, [(name, kind, device, us * batch if kind == "kernel" else us) for name, kind, device, us in work]
    return serial_steps(out, steps(), rng, sigma=0.05)


def test_every_step_slower_under_fewer_prefills_is_a_slowdown(tmp_path: Path) -> None:
    """Attention ×2 on every step, while the abnormal run happens to draw fewer prefill
    steps: the median step is slower (significant), the mean one faster (not significant).
    The slower kernel read "moved against the cycle-time change" and the verdict "no material
    change"."""
    n = decode_loop(tmp_path / "n", seed=1, prefill_share=0.3, attention_us=30.0)
    a = decode_loop(tmp_path / "a", seed=2, prefill_share=0.22, attention_us=60.0)
    c = perfdiff.compare(n, a)
    an = c.analysis
    assert an.abnormal.median_us > an.normal.median_us and an.abnormal.mean_us < an.normal.mean_us
    assert an.cycle_test.p_mwu <= 0.05 < an.cycle_test.p_welch
    assert c.verdict[0].code == VerdictCode.GPU_KERNEL
    assert c.findings[c.verdict[0].evidence[0]].function == "paged_attention_decode_kernel"


def test_a_mix_that_moved_the_mean_is_a_change_of_mix(tmp_path: Path) -> None:
    """Many more prefill steps and nothing else: the mean moves significantly, and compared
    kind of step with kind nothing changed: the change is the mix of steps, a load change,
    and no cause is named (before step classes, issue 34, the prefill GEMM's extra calls were
    named as new work)."""
    n = decode_loop(tmp_path / "n", seed=3, prefill_share=0.1, attention_us=30.0)
    a = decode_loop(tmp_path / "a", seed=4, prefill_share=0.5, attention_us=30.0)
    c = perfdiff.compare(n, a)
    assert c.analysis.cycle_test.p_welch <= 0.05
    assert not [f for f in c.findings if f.code.value == "cause"]
    (mix,) = [f for f in c.findings if f.code.value == "mix-change"]
    assert [c.analysis.functions[i].name for i in mix.evidence.present] == ["gemm_prefill_kernel"]
    assert [v.code.value for v in c.verdict] == ["mix-change"]


def test_a_mean_slowed_by_stalls_is_not_turned_into_a_speed_up(tmp_path: Path) -> None:
    """Every step a little faster (attention 30 → 28 µs) and three 20 ms stalls: the median
    is faster (significant), the mean slower (Welch's test, blind to three stalls, does not
    reject).  Throughput was lost: the direction stays the mean's, and the faster kernel is
    no cause."""
    n = decode_loop(tmp_path / "n", seed=5, prefill_share=0.0, attention_us=30.0)
    a = decode_loop(tmp_path / "a", seed=6, prefill_share=0.0, attention_us=28.0, stalls=3)
    c = perfdiff.compare(n, a)
    an = c.analysis
    assert an.abnormal.median_us < an.normal.median_us and an.abnormal.mean_us > an.normal.mean_us
    assert an.cycle_test.p_mwu <= 0.05 < an.cycle_test.p_welch
    causes = [f.function for f in c.findings if f.code.value == "cause"]
    assert "paged_attention_decode_kernel" not in causes


def test_a_slower_kernel_is_named_where_neither_cycle_test_rejects(tmp_path: Path) -> None:
    """Batches that vary ±30 % per step hide a 1.3× attention kernel from both cycle tests,
    and fewer prefill steps happened to make the mean faster: its (untested) direction made
    the slower kernel 'move against the change', and the verdict read "no material change"."""
    n = decode_loop(tmp_path / "n", seed=2, prefill_share=0.3, attention_us=30.0, batch_var=0.3, n=60)
    a = decode_loop(tmp_path / "a", seed=21, prefill_share=0.2, attention_us=39.0, batch_var=0.3, n=60)
    c = perfdiff.compare(n, a)
    an = c.analysis
    assert an.abnormal.mean_us < an.normal.mean_us
    assert min(an.cycle_test.p_mwu, an.cycle_test.p_welch) > 0.05
    assert c.verdict[0].code == VerdictCode.GPU_KERNEL
    assert c.findings[c.verdict[0].evidence[0]].function == "paged_attention_decode_kernel"
