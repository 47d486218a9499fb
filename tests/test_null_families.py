"""Null pairs stay quiet when a run's cycles depend on each other (docs/STATISTICS.md,
"Dependent cycles" and "Step classes"; issue 34): a small seeded version of
bench/null_families.py.  Serving steps (tests/serving_sim.py) with prefill in bursts, a
drifting batch, iowait sampled on 10 ms ticks: 20 null pairs per family, at most 2 naming a
cause (the bench's 100 pairs a family hold the 5 % target; these 20 pairs named a cause in 3
to 10 each before the dependence-robust tests); a 20 % slower GEMM under bursts is the first
cause named in at least 17 of 20 with the step load recorded, and compared kind of step with
kind without it in 19 of 20 (20; 17 without step classes), a 10 % slower one in 18 of 20
(20; 14 without).  Seeded pairs that only step classes get right: a slower GEMM while the
abnormal run drew fewer prefill steps, and a change of the mix of steps alone."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from null_families import run_family  # noqa: E402

PAIRS = 20


@pytest.mark.slow
@pytest.mark.parametrize("family", ["burst-15%-8", "burst-20%-15", "few-cycles", "batch-ar1", "iowait-ticks"])
def test_null_pairs_of_dependent_cycles_name_at_most_two_causes_in_20(family: str) -> None:
    hits, pairs, named, *_ = run_family(family, PAIRS)
    assert hits <= 2, (hits, pairs, named)


@pytest.mark.slow
def test_a_slower_gemm_under_bursts_is_still_found_first() -> None:
    hits, pairs, *_ = run_family("gemm+20%+load", PAIRS)
    assert hits >= 17, (hits, pairs)


@pytest.mark.slow
@pytest.mark.parametrize(("family", "least"), [("gemm+20%", 19), ("gemm+10%", 18)])
def test_a_slower_gemm_is_found_first_kind_of_step_with_kind(family: str, least: int) -> None:
    hits, pairs, *_ = run_family(family, PAIRS)
    assert hits >= least, (hits, pairs)


def _pair(seed: int, share_a: float | None = None, share: float = 0.10, burst: float = 10.0,
          slow: dict[str, float] | None = None):
    """(Analysis, findings, verdict) of the seeded serving pair (seed, seed + 1)."""
    from serving_sim import analyse_pair, serving_run

    kw = dict(prefill_share=share, mean_burst=burst)
    return analyse_pair(serving_run(seed, **kw), serving_run(seed + 1, **{**kw, "prefill_share": share_a or share},
                                                              slow=slow))


def _one_class(monkeypatch: pytest.MonkeyPatch) -> None:
    """No step classes: the pairs compared pooled, as before issue 34's step classes."""
    from perfdiff.analyze import classes

    monkeypatch.setattr(classes, "MAX_CLASSES", 1)


def test_a_slower_gemm_under_fewer_prefill_steps_is_found_kind_with_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every step's GEMM 20 % slower while the abnormal run drew 13 prefill steps against 46:
    pooled, the GEMM's mean per step barely moves and nothing is named; decode steps compared
    with decode steps and prefill with prefill, the GEMM is the cause."""
    from serving_sim import GEMM, first_cause

    from perfdiff.analyze.verdict_records import VerdictCode

    c, findings, verdict = _pair(5, slow={GEMM: 1.2})
    sc = c.step_classes
    assert sc is not None and [(x.n_n, x.n_a) for x in sc.classes] == [(254, 287), (46, 13)]
    assert first_cause(findings) == GEMM and verdict[0].code == VerdictCode.GPU_KERNEL
    cause = next(f for f in findings if f.function == GEMM)
    decode_n, prefill_n = cause.evidence.class_t_n_us
    decode_a, prefill_a = cause.evidence.class_t_a_us
    assert cause.evidence.by_class and 1.15 < decode_a / decode_n < 1.25 and 1.15 < prefill_a / prefill_n < 1.25
    _one_class(monkeypatch)
    c, findings, verdict = _pair(5, slow={GEMM: 1.2})
    assert c.step_classes is None and first_cause(findings) is None
    assert [v.code for v in verdict] == [VerdictCode.NO_MATERIAL]


def test_a_change_of_the_mix_alone_is_said_as_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Prefill steps 10 % → 47 % of the steps and nothing else: a mix-change finding naming
    the prefill kind, with its dependence-robust test; the verdict says the mix (a load
    change) and names no cause.  Pooled, the GEMM, the prefill kernel's extra calls and the
    scheduler were named."""
    from serving_sim import first_cause, names_cause, serving_run

    import perfdiff
    from perfdiff.analyze import FindingCode
    from perfdiff.analyze.verdict_records import VerdictCode
    from perfdiff.bundle import write_bundle
    from perfdiff.stats import Dependence

    kw = dict(prefill_share=0.10, mean_burst=10.0)
    n = write_bundle(tmp_path / "n", serving_run(3, **kw))
    a = write_bundle(tmp_path / "a", serving_run(4, **{**kw, "prefill_share": 0.4}))
    c = perfdiff.compare(n, a)
    (mix,) = [f for f in c.findings if f.code == FindingCode.MIX_CHANGE]
    ev = mix.evidence
    assert [c.analysis.functions[i].name for i in ev.present] == ["flash_attn_prefill"] and not ev.absent
    assert (ev.count_n, ev.count_a, ev.n_n, ev.n_a) == (29, 142, 300, 300)
    assert ev.share_a_pct > 4 * ev.share_n_pct and ev.h > 0.2 and mix.q <= 0.05
    assert ev.dependence is Dependence.CORRECTED and ev.n_eff_n < 100  # the bursts: few effective steps
    assert [v.code for v in c.verdict] == [VerdictCode.MIX] and not names_cause(c.verdict)
    md = c.to_markdown()
    assert "Different mix of steps: steps with **flash\\_attn\\_prefill** 9.7 % → 47.3 % of steps (29 of 300 → " in md
    assert "- **different mix of steps**: steps with **flash\\_attn\\_prefill** 9.7 % → 47.3 % of steps" in md
    assert "a load change, not a regression" in md
    _one_class(monkeypatch)
    _, findings, verdict = _pair(3, share_a=0.4)
    assert names_cause(verdict) and first_cause(findings) is not None


def test_a_null_pair_in_bursts_forms_step_classes_and_stays_quiet() -> None:
    """Prefill 15 % in bursts of 8 in both runs, nothing changed: two kinds of step, each named
    by the kernel only it runs, matched across the runs; no change of mix, no cause."""
    from serving_sim import mix_reported, names_cause

    c, findings, verdict = _pair(1, share=0.15, burst=8.0)
    sc = c.step_classes
    assert sc is not None and len(sc.classes) == 2
    names = [[c.functions[i].name for i in x.signature[0]] for x in sc.classes]
    assert names == [["flash_attn_decode"], ["flash_attn_prefill"]]
    assert [(x.n_n, x.n_a) for x in sc.classes] == [(272, 253), (28, 47)]
    assert not sc.mix_changed and not mix_reported(findings) and not names_cause(verdict)


def test_one_kind_of_step_is_one_class() -> None:
    """Steps that all do the same work (no prefill): no classes, nothing split on noise."""
    c, _, _ = _pair(1, share=0.0)
    assert c.step_classes is None


def test_a_cause_under_bursts_shows_its_effective_cycles(tmp_path: Path) -> None:
    """The report says n and n_eff beside each other where the cycles depend materially: here
    the batch drifts (compared kind of step with kind, the bursts of prefill steps no longer
    make the cycles dependent; the drift still does)."""
    from serving_sim import GEMM, serving_run

    import perfdiff
    from perfdiff.analyze import FindingCode
    from perfdiff.bundle import write_bundle
    from perfdiff.stats import Dependence

    kw = dict(prefill_share=0.10, mean_burst=10.0, batch_phi=0.9, batch_sd=0.3)
    n = write_bundle(tmp_path / "n", serving_run(13, **kw))
    a = write_bundle(tmp_path / "a", serving_run(14, **kw, slow={GEMM: 1.2}))
    c = perfdiff.compare(n, a)
    cause = next(f for f in c.findings if f.code == FindingCode.CAUSE)
    ev = cause.evidence
    assert cause.function == GEMM and ev.dependence is Dependence.CORRECTED
    assert min(ev.n_eff_n, ev.n_eff_a) < 0.8 * 300
    assert f"tested as 300 (n_eff ≈ {ev.n_eff_n:,.0f}) vs 300 (n_eff ≈ {ev.n_eff_a:,.0f})" in c.to_markdown()
    assert not any(v.dependence_unchecked for v in c.verdict)


def test_a_run_too_short_to_check_its_dependence_forms_no_classes() -> None:
    """A normal run of 12 steps (half of them prefill) against 300: enough cycles of each kind
    together, too few in one run to estimate its dependence; compared pooled, as before."""
    from serving_sim import analyse_pair, serving_run

    c, _, _ = analyse_pair(serving_run(7, steps=12, prefill_share=0.5, mean_burst=2.0),
                           serving_run(8, prefill_share=0.5, mean_burst=2.0))
    assert c.step_classes is None
