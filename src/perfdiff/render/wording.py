"""The report's sentences: findings and notices worded in Markdown, user names escaped.

The only place where analysis records become prose (docs/ARCHITECTURE.md, rendering).  A
function that names a function, range or device takes the report's `NameTable` (text.py), its
tables keyed by code included; outside a report, `NameTable.plain()` gives every name its plain cut.
"""
from __future__ import annotations

import math
from typing import Any, Callable, TypeVar

from perfdiff.analyze.evidence import (DEPENDENCE_MIN_CYCLES, MAX_LISTED, CauseEvidence, CommonModeEvidence, Dependence,
                                       Direction,
                                       CycleRatioDetail,
                                       CycleSourceDetail, CycleTimeEvidence, CyclesNeededEvidence, DeviceWideEvidence,
                                       EventEvidence, Finding, FindingCode, KernelSwapEvidence, LoadEvidence, ReplacedEvidence,
                                       LoadNoticeDetail, MetricOneSideDetail, MixEvidence, NegligibleEvidence, NoCauseEvidence,
                                       OppositeEvidence, RankDetail, SymptomEvidence, WorldSizeDetail)
from perfdiff.analyze.gate_records import GateMetric, GateOutcome, GateReason, GateTest
from perfdiff.analyze.records import Analysis, FunctionStats, Notice, NoticeCode, OpCategory
from perfdiff.analyze.verdict_records import (CpuClockDetail, CpuWorkDetail, DeviceWideDetail, HardwareDetail,
                                              HostWide, LaunchDetail, LaunchStructureDetail, LoadDetail, MixDetail,
                                              OtherProcessDetail, QuotaDetail, Signal, Starved, StallDetail,
                                              SwappedDetail, SyncDetail, ThrottleDetail, VerdictClass, VerdictCode)
from perfdiff.model.cycles import CyclePlan, Regime
from perfdiff.render.totals import totals_finding, unfit_text
from perfdiff.model.schema import CycleSource, Kind
from perfdiff.render.text import (NameTable, fmt_calls, fmt_num, fmt_p, fmt_pct, fmt_signed, fmt_time_us, fmt_value,
                                  md_escape)

EVENT_WORDS = {
    "gpu-lost": "GPU lost (fell off the bus or stopped answering)",
    "xid": "XID error",
    "ecc": "ECC errors",
    "other-process": "another process on the GPU",
    "target-exited": "the target exited",
}


R = TypeVar("R")
MAX_REPLACED_LISTED = 2  # kernels a replaced finding names on each side



def _detail(n: Notice, kind: type[R]) -> R:
    """n's detail, of the record type its code states (a bug otherwise)."""
    if not isinstance(n.detail, kind):
        raise TypeError(f"a {n.code} notice without its {kind.__name__}: {n.detail!r}")
    return n.detail


def _vdetail(v: VerdictClass, kind: type[R]) -> R:
    """v's detail, of the record type its code states (a bug otherwise)."""
    if not isinstance(v.detail, kind):
        raise TypeError(f"a {v.code} class without its {kind.__name__}: {v.detail!r}")
    return v.detail


def test_name(paired: bool) -> str:
    """The rank test behind p_mwu: Wilcoxon signed-rank over matched cycles, else Mann–Whitney."""
    return "Wilcoxon signed-rank" if paired else "Mann–Whitney"


def matching_text(c: Analysis) -> str:
    """Whether the cycles are matched, and so how the functions are tested."""
    if c.matched:
        return (f"Cycles are matched (cycle i does the same work in both runs: Spearman ρ {fmt_num(c.match_rho, 3)} "
                f"over {c.normal.n_cycles:,} cycles): functions are tested on paired differences.")
    return ""


def _q_words(q: float, c: Analysis) -> str:
    return f"significant, q {fmt_p(q)}" if c.thresholds.significant(q) else f"not significant, q {fmt_p(q)}"


def _fn(f: FunctionStats, names: NameTable) -> str:
    """A function for a sentence: bold, escaped (a code span would show the escapes literally)."""
    return f"**{names.md(f.name, 80)}** on {names.md(f.device)}"


def _calls_vs_slower(f: FunctionStats, per: str, same_calls_log: float) -> str:
    """Whether own time moved through more calls or slower calls (calls within `same_calls_log`
    of each other in ln: the same calls)."""
    if f.presence == "new":
        return "new in the abnormal run"
    if f.presence == "vanished":
        return "absent from the abnormal run"
    if f.sampled:
        return ""
    parts = []
    if f.calls_n > 0 and f.calls_a > 0:
        rc = f.calls_a / f.calls_n
        rp = (f.per_call_a_us / f.per_call_n_us) if f.per_call_n_us and f.per_call_n_us > 0 else float("nan")
        parts.append(f"{fmt_calls(f.calls_n)} → {fmt_calls(f.calls_a)} calls {per}, "
                     f"{fmt_time_us(f.per_call_n_us)} → {fmt_time_us(f.per_call_a_us)} per call")
        if math.isfinite(rp) and abs(math.log(rp)) > abs(math.log(rc)) + same_calls_log:
            parts.append("slower calls" if rp > 1 else "faster calls")
        elif abs(math.log(rc)) > same_calls_log:
            parts.append("more calls" if rc > 1 else "fewer calls")
    return "; ".join(parts)


def _ci(lo: float, hi: float) -> str:
    """" [lo–hi]" of a 95 % CI (µs), or nothing when it is unknown."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return ""
    return f" [{fmt_time_us(lo)}–{fmt_time_us(hi)}]"


def _cycle_time(c: Analysis, x: Finding, names: NameTable) -> str:
    v = x.evidence_as(CycleTimeEvidence)
    if compared_as_rates(c):
        why = ("--window cuts both runs into fixed windows" if c.plan is not None and c.plan.chosen_by_user
               else "No cycle source exists in both runs")
        return (f"{why}, so they are compared as rates: every number below is time {per_unit(c)} "
                f"({v.n_n:,} vs {v.n_a:,} windows), not per iteration. Mark the main loop with "
                "`perfdiff.cycle()` or name its ranges with `--cycle REGEX` for per-iteration causes.")
    text = (f"Median cycle time {'rose' if v.median_a_us >= v.median_n_us else 'fell'} from "
            f"{fmt_time_us(v.median_n_us)} to {fmt_time_us(v.median_a_us)} ({_cycle_test(v)}).")
    tail = v.p95_a_us / v.p95_n_us if v.p95_n_us else float("nan")
    text += (f" Mean cycle {fmt_time_us(v.mean_n_us)} → {fmt_time_us(v.mean_a_us)}: throughput "
             f"{fmt_pct(v.throughput_change_pct, 1)}; P95 {fmt_time_us(v.p95_n_us)}{_ci(v.p95_n_lo_us, v.p95_n_hi_us)} → "
             f"{fmt_time_us(v.p95_a_us)}{_ci(v.p95_a_lo_us, v.p95_a_hi_us)} (×{fmt_num(tail)}); Kolmogorov–Smirnov D "
             f"{fmt_num(v.ks_d, 3)}, p {fmt_p(v.ks_p)}.")
    apart = v.p95_a_lo_us > v.p95_n_hi_us  # NaN: False
    th = c.thresholds
    if (abs(v.change_pct) < th.shape_median_pct and tail >= th.shape_tail_ratio and apart
            and th.significant(v.ks_p)):
        text += (" The median held but the distribution changed shape: a share of the cycles stall, and the "
                 "causes below are what those cycles spend their time on.")
    return text


def verdict_head(c: Analysis, findings: list[Finding]) -> str:
    """How much the median cycle moved and how sure, for the verdict's first line; "" where
    the runs are compared as rates (no cycles) or the runs are identical."""
    x = next((f for f in findings if f.code == FindingCode.CYCLE_TIME), None)
    if x is None or compared_as_rates(c) or not isinstance(x.evidence, CycleTimeEvidence):
        return ""
    v = x.evidence
    quiet = "" if c.thresholds.significant(v.p_mwu) else f"; not significant at α {c.alpha:g}"
    head = f"median cycle {fmt_time_us(v.median_n_us)} → {fmt_time_us(v.median_a_us)} ({_cycle_test(v)}{quiet})"
    return head + _mean_apart(v, c.thresholds.head_mean_pct) + "." + unchecked_note(findings)


def unchecked_note(findings: list[Finding]) -> str:
    """What the verdict's † marks: classes resting on a cause whose cycles were too few to
    check that they are independent ("" where none)."""
    if not any(isinstance(f.evidence, CauseEvidence) and f.evidence.dependence_unchecked for f in findings):
        return ""
    return (f" † Under {DEPENDENCE_MIN_CYCLES} cycles a run: too few to check their independence; the q of a "
            "† class may be too small.")


def _mean_apart(v: CycleTimeEvidence, moved_pct: float) -> str:
    """"; mean cycle … : throughput −23.6% (Welch p …)" where the mean cycle tells another story
    than the median: the median held (< moved_pct, 5 %) while the mean moved, or the two moved
    apart (more steps of a long kind, a share of the cycles stalling, a different mix); else
    nothing."""
    mn, ma, tput, med = v.mean_n_us, v.mean_a_us, v.throughput_change_pct, v.change_pct
    if not (mn and ma and math.isfinite(tput) and math.isfinite(med)):
        return ""
    mean_pct = 100.0 * (ma / mn - 1.0)
    held = abs(med) < moved_pct <= abs(mean_pct)
    apart = min(abs(med), abs(mean_pct)) >= moved_pct and med * mean_pct < 0
    if not (held or apart):
        return ""
    test = f" (Welch p {fmt_p(v.p_welch)})" if math.isfinite(v.p_welch) else ""
    return f"; mean cycle {fmt_time_us(mn)} → {fmt_time_us(ma)}: throughput {fmt_pct(tput, 1)}{test}"


def _cycle_test(v: CycleTimeEvidence) -> str:
    """The median cycle's change and its test, as the cycle-time finding's evidence gives them:
    "+39.3%; Mann–Whitney p 0.065, 6 vs 6 cycles"."""
    return (f"{fmt_pct(v.change_pct, 1)}; {test_name(v.paired)} p {fmt_p(v.p_mwu)}, "
            f"{v.n_n:,} vs {v.n_a:,} cycles")


def compared_as_rates(c: Analysis) -> bool:
    """Cycles are fixed windows (no cycle source in both runs, or --window), so per-cycle
    numbers are rates (time per window of wall clock)."""
    return c.plan is not None and c.plan.source == CycleSource.WINDOW


def per_unit(c: Analysis) -> str:
    """What own times are per: "per cycle", or per window of wall clock when compared as rates."""
    if compared_as_rates(c) and c.plan is not None:
        return f"per {fmt_time_us((c.plan.window_ns or 0) / 1e3)} of wall clock"
    return "per cycle"


def _cause(c: Analysis, x: Finding, names: NameTable) -> str:
    f = c.functions[x.func]  # type: ignore[index]
    d_t = f.t_a_us - f.t_n_us
    how = _calls_vs_slower(f, per_unit(c), c.thresholds.same_calls_log) if f.kind != Kind.HOST else (
        f"its share of the cycle went {fmt_num(f.beta_n)} → {fmt_num(f.beta_a)} % (q(β) {fmt_p(f.q_beta)})")
    incl = ""
    if f.kind == Kind.CPU and abs((f.incl_a_us - f.incl_n_us) - d_t) > c.thresholds.inclusive_rel * abs(d_t):
        incl = f", inclusive of nested ranges {fmt_time_us(f.incl_n_us)} → {fmt_time_us(f.incl_a_us)}"
    v = x.evidence_as(CauseEvidence)
    if v.load_adjusted:
        return _cause_at_load(c, x, f, names)
    if v.by_class:
        return _cause_by_class(c, x, f, names)
    text = (f"{_fn(f, names)} took {fmt_time_us(abs(d_t))} {'more' if d_t > 0 else 'less'} "
            f"{'self time ' if incl else ''}{per_unit(c)} ({fmt_time_us(f.t_n_us)} → {fmt_time_us(f.t_a_us)}{incl}; "
            f"τ {fmt_signed(f.tau_pp)} pp of {tau_cycle(c)}; {_q_words(f.q_t, c)}{_dependence_words(v, f)})"
            + (f": {how}." if how else "."))
    if x.related:
        inner = ", ".join(f"**{names.md(g.name, 60)}** ({fmt_signed((g.t_a_us - g.t_n_us) / 1e3)} ms/cycle)"
                          for g in (c.functions[i] for i in x.related))
        more = v.nested - len(x.related)
        text += f" Inside it, also slower: {inner}" + (f" and {more} more" if more > 0 else "") + "."
    return text


def _cause_at_load(c: Analysis, x: Finding, f: FunctionStats, names: NameTable) -> str:
    """A cause under different load: its own time compared at the common load."""
    v = x.evidence_as(CauseEvidence)
    d_t = v.t_a_us - v.t_n_us
    return (f"{_fn(f, names)} took {fmt_time_us(abs(d_t))} {'more' if d_t > 0 else 'less'} {per_unit(c)} at a common "
            f"load ({fmt_time_us(v.t_n_us)} → {fmt_time_us(v.t_a_us)}; "
            f"τ {fmt_signed(v.tau_pp)} pp of the abnormal cycle at that load; {_q_words(x.q, c)}"
            f"{_dependence_words(v, f)}); as measured, {fmt_time_us(f.t_n_us)} → {fmt_time_us(f.t_a_us)} {per_unit(c)}.")


def step_kind(present: tuple[str, ...], absent: tuple[str, ...], names: NameTable) -> str:
    """A kind of step by the functions that name it: "steps with **X**", "steps without **Y**"."""
    parts = [f"with {' and '.join(f'**{names.md(n, 48)}**' for n in present)}"] if present else []
    parts += [f"without {' and '.join(f'**{names.md(n, 48)}**' for n in absent)}"] if absent else []
    return "steps " + ", ".join(parts) if parts else "steps"


def _class_kind(c: Analysis, k: int, names: NameTable) -> str:
    """Step class k of the analysis, named by its functions."""
    sc = c.step_classes
    if sc is None:
        return "steps"
    present, absent = sc.classes[k].signature
    return step_kind(tuple(c.functions[i].name for i in present), tuple(c.functions[i].name for i in absent), names)


def _cause_by_class(c: Analysis, x: Finding, f: FunctionStats, names: NameTable) -> str:
    """A cause compared kind with kind: its own time in each kind of step, and standardised."""
    v = x.evidence_as(CauseEvidence)
    d_t = v.t_a_us - v.t_n_us
    kinds = "; ".join(f"{_class_kind(c, k, names)}: {fmt_time_us(n)} → {fmt_time_us(a)}"
                      for k, (n, a) in enumerate(zip(v.class_t_n_us, v.class_t_a_us, strict=True)))
    return (f"{_fn(f, names)} took {fmt_time_us(abs(d_t))} {'more' if d_t > 0 else 'less'} {per_unit(c)}, compared kind of "
            f"step with kind ({kinds}; at both runs' mix of steps {fmt_time_us(v.t_n_us)} → {fmt_time_us(v.t_a_us)}; "
            f"τ {fmt_signed(v.tau_pp)} pp of {tau_cycle(c)}; {_q_words(x.q, c)}{_dependence_words(v, f)}); "
            f"as measured, {fmt_time_us(f.t_n_us)} → {fmt_time_us(f.t_a_us)} {per_unit(c)}.")


def _mix_change(c: Analysis, x: Finding, names: NameTable) -> str:
    """A kind of step's share of the steps moved: a load change, not a regression."""
    v = x.evidence_as(MixEvidence)
    kind = step_kind(tuple(c.functions[i].name for i in v.present), tuple(c.functions[i].name for i in v.absent),
                     names)
    dep = ""
    if v.dependence_unchecked:
        dep = f"; fewer than {DEPENDENCE_MIN_CYCLES} cycles in a run, too few to check that they are independent"
    elif v.dependence is Dependence.CORRECTED:
        dep = f"; steps dependent in time, n_eff ≈ {v.n_eff_n:,.0f} vs {v.n_eff_a:,.0f}"
    return (f"Different mix of steps: {kind} {fmt_num(v.share_n_pct, 1)} % → {fmt_num(v.share_a_pct, 1)} % of "
            f"steps ({v.count_n:,} of {v.n_n:,} → {v.count_a:,} of {v.n_a:,}; h {fmt_signed(v.h)}; p {fmt_p(v.p)}, "
            f"q {fmt_p(x.q)}{dep}): a load change, not a regression. Own times below are compared kind of step "
            "with kind, at both runs' mix." + _explained_alone(c, x, v.explained, "Changed with the mix alone "
                                                               "(significant as measured, not kind with kind)", names))


def _explained_alone(c: Analysis, x: Finding, count: int, what: str, names: NameTable) -> str:
    """" What: f (N → A), g (N → A) and 3 more.": the functions a load or a mix alone explains
    (the finding's related, `count` in all); "" when none."""
    if not x.related:
        return ""
    listed = ", ".join(f"{_fn(g, names)} ({fmt_time_us(g.t_n_us)} → {fmt_time_us(g.t_a_us)})"
                       for g in (c.functions[i] for i in x.related))
    more = count - len(x.related)
    return f" {what}: {listed}" + (f" and {more} more" if more > 0 else "") + "."


def _dependence_words(v: CauseEvidence, f: FunctionStats) -> str:
    """What the cause's test did about dependent cycles, where it matters: the effective
    cycles beside the cycles, or that too few cycles left their dependence unchecked."""
    n_n, n_a = (f.t.n_n, f.t.n_a) if f.t is not None else (0, 0)
    if v.dependence_unchecked:
        return (f"; fewer than {DEPENDENCE_MIN_CYCLES} cycles in a run, too few to check that they are "
                f"independent: q may be too small")
    if v.n_eff_differs(n_n, n_a) and not v.load_adjusted:  # at a common load q is the fit's (§6b)
        return (f"; cycles dependent in time, tested as {n_n:,} (n_eff ≈ {v.n_eff_n:,.0f}) vs "
                f"{n_a:,} (n_eff ≈ {v.n_eff_a:,.0f})")
    return ""


def _load(c: Analysis, x: Finding, names: NameTable) -> str:
    """The runs carried different load: the cycle time at a common load, and what load explains."""
    v = x.evidence_as(LoadEvidence)
    text = (f"Different load: median tokens per cycle {fmt_num(v.median_tokens_n, 1)} → "
            f"{fmt_num(v.median_tokens_a, 1)}. Compared at a common load (over the load range both runs cover, "
            f"in {v.n_strata} load strata: each run's cycle time fitted on its tokens within each stratum, the "
            f"strata weighted by both runs' cycles; median {fmt_num(v.x0_tokens, 1)} tokens), the cycle time "
            f"went {fmt_time_us(v.cycle_n_us)} → {fmt_time_us(v.cycle_a_us)} ({fmt_pct(v.change_pct, 1)}; "
            f"{_ci_pct(100.0 * v.change_lo_us / v.cycle_n_us, 100.0 * v.change_hi_us / v.cycle_n_us)}, "
            f"p {fmt_p(v.p)}); own times below are compared at that load.")
    return text + _explained_alone(c, x, v.explained, "Grew with the load alone (significant as measured, not at "
                                   "a common load)", names)


def _no_cause(c: Analysis, x: Finding, names: NameTable) -> str:
    if x.evidence_as(NoCauseEvidence).negligible:
        return ("No material cause: no function's own time changed both significantly and materially in the "
                f"direction of the cycle-time change (q ≤ {c.alpha:g} over {c.n_tests_t} tested functions, "
                f"|τ| ≥ {c.thresholds.material_tau_pp:g} pp and |δ| ≥ {c.thresholds.material_delta:g}).")
    return ("No function's own time changed significantly in the direction of the cycle-time change "
            f"(q ≤ {c.alpha:g} over {c.n_tests_t} tested functions).")


def _negligible(c: Analysis, x: Finding, names: NameTable) -> str:
    th = c.thresholds
    listed = ", ".join(f"{_fn(f, names)} (τ {fmt_signed(f.tau_pp)} pp, "
                       f"δ {fmt_num(f.t.cliffs_delta if f.t else None)})" for f in (c.functions[i] for i in x.related))
    more = x.evidence_as(NegligibleEvidence).count - len(x.related)
    return (f"Significant but negligible (|τ| < {th.material_tau_pp:g} pp of {tau_cycle(c)} or |δ| < "
            f"{th.material_delta:g}): {listed}" + (f" and {more} more" if more > 0 else "") + ".")


def _proportional(c: Analysis, x: Finding, names: NameTable) -> str:
    listed = ", ".join(f"{_fn(f, names)} ({fmt_time_us(f.t_n_us)} → {fmt_time_us(f.t_a_us)}, β {fmt_num(f.beta_n)} → "
                       f"{fmt_num(f.beta_a)} %)" for f in (c.functions[i] for i in x.related[:MAX_LISTED]))
    if len(x.related) > MAX_LISTED:
        listed += f" and {len(x.related) - MAX_LISTED} more (flagged in the tables)"
    what = ("Host states, and waits of threads idle through every cycle," if any(c.functions[i].wait for i in x.related)
            else "Host states")
    how = "shrank" if all(c.functions[i].t_a_us < c.functions[i].t_n_us for i in x.related) else "grew"
    return f"{what} that {how} with the cycle but kept their share of it (not causes by themselves): {listed}."


def _kernel_swap(c: Analysis, x: Finding, names: NameTable) -> str:
    v = x.evidence_as(KernelSwapEvidence)
    fs = [c.functions[i] for i in x.related]

    def one(f: FunctionStats, tau: float) -> str:
        return (f"**{names.md(f.name, 64)}** ({fmt_calls(f.calls_n)} → {fmt_calls(f.calls_a)} calls {per_unit(c)}, "
                f"{fmt_signed(tau)} pp)")

    parts = [one(f, t) for f, t in zip(fs, v.tau_pp, strict=True)]
    grew, fell = parts[:v.grew], parts[v.grew:]
    return (f"Kernel choice changed on {names.md(x.device or '')}: {', '.join(grew)} in place of {', '.join(fell)}; "
            f"together {fmt_signed(v.net_pp)} pp of {tau_cycle(c)}: the library chose other kernels for the "
            "same work (cuDNN's algorithm search, a GEMM's tiles), not added work.")


def _replaced(c: Analysis, x: Finding, names: NameTable) -> str:
    """"Replaced under `op`: `gone` 120.7 ms → `new` 122.1 ms + `new2` …" (per cycle)."""
    v = x.evidence_as(ReplacedEvidence)
    gone, new = x.related[:v.gone], x.related[v.gone:]
    shown = MAX_REPLACED_LISTED

    def listed(idx: tuple[int, ...], side: str) -> str:
        fs = [c.functions[i] for i in idx]
        parts = [f"**{names.md(f.name, 64)}** {fmt_time_us(f.t_n_us if side == 'n' else f.t_a_us)}" for f in fs[:shown]]
        return " + ".join(parts) + (f" + {len(fs) - shown} more" if len(fs) > shown else "")

    return (f"Replaced under **{names.md(x.function or '', 64)}** on {names.md(x.device or '')}: {listed(gone, 'n')} → "
            f"{listed(new, 'a')} {per_unit(c)}; together {fmt_time_us(v.t_n_us)} → {fmt_time_us(v.t_a_us)} "
            f"({fmt_signed(v.tau_pp)} pp of {tau_cycle(c)}): the op launched other kernels (an implementation "
            "swapped), not added work.")


def _common_mode(c: Analysis, x: Finding, names: NameTable) -> str:
    v = x.evidence_as(CommonModeEvidence)
    text = (f"Common-mode shift: all {v.k} kernels on {names.md(x.device or '')} scaled ×{v.ratio:.2f} in β "
            f"(IQR of ln ratio {v.iqr_log:.2f}) — a device-wide shift (starvation, clocks, or a "
            f"cycle-definition change), not {v.k} separate regressions.")
    if v.same_time:
        text += (f" {v.same_time} of them kept their own time per cycle (no significant change): "
                 "their β fell only because the cycle grew." if v.ratio < 1 else
                 f" {v.same_time} of them kept their own time per cycle (no significant change).")
    if x.related:
        listed = ", ".join(f"{_fn(f, names)} (Δβ vs common {fmt_signed(f.beta_vs_common)} pp, "
                           f"τ {fmt_signed(f.tau_pp)} pp)" for f in (c.functions[i] for i in x.related))
        text += f" Deviating from it: {listed}."
    return text


def _symptom(c: Analysis, x: Finding, names: NameTable) -> str:
    f = c.functions[x.func]  # type: ignore[index]
    d_t = f.t_a_us - f.t_n_us
    meaning = ""
    faster = isinstance(x.evidence, SymptomEvidence) and x.evidence.direction == Direction.FASTER
    if f.kind == Kind.API and faster:  # the cycle got faster
        meaning = (": the GPU work it waits for finished sooner" if d_t < 0
                   else ": the host's own work shrank more than the GPU's (GPU-bound)")
    elif f.kind == Kind.API:
        meaning = (": the GPU finished sooner relative to the host — the GPU was starved (host-bound)"
                   if d_t < 0 else ": the host waited longer on the GPU (GPU-bound)")
    return (f"Symptom: the host waited {fmt_time_us(abs(d_t))} {'more' if d_t > 0 else 'less'} {per_unit(c)} in "
            f"{_fn(f, names)} ({fmt_time_us(f.t_n_us)} → {fmt_time_us(f.t_a_us)}; {_q_words(f.q_t, c)}){meaning}.")


def _resource(c: Analysis, x: Finding, names: NameTable) -> str:
    r = c.context[x.ref]  # type: ignore[index]
    alias = f" (= {names.md(', '.join(r.aliases))})" if r.aliases else ""
    delta = r.res.mean_a - r.res.mean_n
    return (f"Resource: **{names.md(r.metric)}**{alias} on {names.md(r.device)} "
            f"{'rose' if delta > 0 else 'fell'} from {fmt_value(r.res.mean_n, r.unit)} to "
            f"{fmt_value(r.res.mean_a, r.unit)} ({_q_words(r.q, c)}, {r.res.n_n} vs {r.res.n_a} samples).")


def _metric_while(c: Analysis, x: Finding, names: NameTable) -> str:
    m = c.mu[x.ref]  # type: ignore[index]
    f = c.functions[m.func]
    return (f"While {_fn(f, names)} ran, **{names.md(m.metric)}** went from {fmt_value(m.res.mean_n, m.unit)} to "
            f"{fmt_value(m.res.mean_a, m.unit)} ({_q_words(m.q, c)}).")


def _event(c: Analysis, x: Finding, names: NameTable) -> str:
    e = x.evidence_as(EventEvidence)
    kind = e.event
    who = ""
    if kind == "other-process":
        who = f": pid {e.pid}" + (f" ({names.md(e.name, 40)})" if e.name else "")
        if math.isfinite(e.used_gpu_memory_bytes) and e.used_gpu_memory_bytes:
            who += f", holding {fmt_value(e.used_gpu_memory_bytes, 'bytes')}"
    elif kind == "xid" and e.xid is not None:
        who = f" {names.md(e.xid)}"
    return (f"Event in the abnormal run only: {EVENT_WORDS[kind]} on {names.md(e.device)}{who}, "
            f"{fmt_num(e.t_s, 1)} s after the first cycle.")


def _opposite(c: Analysis, x: Finding, names: NameTable) -> str:
    taus = x.evidence_as(OppositeEvidence).tau_pp or [c.functions[i].tau_pp for i in x.related]  # at a common load, if given
    listed = ", ".join(f"{_fn(c.functions[i], names)} (τ {fmt_signed(t)} pp)"
                       for i, t in zip(x.related, taus, strict=True))
    return f"Moved against the cycle-time change: {listed}."


def _cycles_needed(c: Analysis, x: Finding, names: NameTable) -> str:
    v = x.evidence_as(CyclesNeededEvidence)
    return (f"With {v.n_n} / {v.n_a} cycles the smallest attainable {'signed-rank' if c.matched else 'U-test'} p "
            f"is {fmt_p(v.min_p)}: after the false-discovery control over {v.n_tests} functions, a change "
            f"in one function alone cannot reach q ≤ {c.alpha:g}, however large (only changes shared by many "
            f"can); collect ≥ {v.cycles_needed} cycles per run to test each on its own. The largest changes "
            "are still ranked below.")


def _device_wide(c: Analysis, x: Finding, names: NameTable) -> str:
    v = x.evidence_as(DeviceWideEvidence)
    what = "CPU-side operator" if v.host else "kernel"
    why = ("the CPU itself got slower (clock, contention, fewer threads)" if v.host and v.ratio > 1
           else "clocks, power or thermal limits, or another process on the GPU" if v.ratio > 1 else
           "a device-wide speed-up")
    text = (f"Device-wide: every busy {what} on {names.md(x.device or '')} took ×{fmt_num(v.ratio)} per call "
            f"({v.k} functions at unchanged call counts, IQR of ln ratio {fmt_num(v.iqr_log)}), accounting for "
            f"{fmt_signed(v.tau_pp)} pp of {tau_cycle(c)}: one change — {why} — not {v.absorbed} "
            "separate regressions.")
    if x.related:
        listed = ", ".join(f"{_fn(f, names)} (×{fmt_num(f.per_call_a_us / f.per_call_n_us)} per call)"
                           for f in (c.functions[i] for i in x.related) if f.per_call_n_us)
        text += f" Deviating from it: {listed}."
    return text


def _identical(c: Analysis, x: Finding, names: NameTable) -> str:
    return "Identical inputs: both runs hold the same bytes, so nothing changed and nothing is named."


FINDING_WORDS: dict[FindingCode, Callable[[Analysis, Finding, NameTable], str]] = {
    FindingCode.IDENTICAL: _identical, FindingCode.NEGLIGIBLE: _negligible, FindingCode.DEVICE_WIDE: _device_wide,
    FindingCode.CYCLE_TIME: _cycle_time, FindingCode.CAUSE: _cause, FindingCode.NO_CAUSE: _no_cause,
    FindingCode.PROPORTIONAL: _proportional, FindingCode.COMMON_MODE: _common_mode,
    FindingCode.KERNEL_SWAP: _kernel_swap,
    FindingCode.REPLACED: _replaced,
    # A pair compared by totals (perfdiff.render.totals words them)
    FindingCode.STEP_CHANGE: totals_finding, FindingCode.PER_CALL: totals_finding,
    FindingCode.PER_CALL_NONE: totals_finding, FindingCode.LAUNCH_STRUCTURE: totals_finding,
    FindingCode.VANISHED: totals_finding, FindingCode.NEW: totals_finding,
    FindingCode.SYMPTOM: _symptom, FindingCode.RESOURCE: _resource, FindingCode.METRIC_WHILE: _metric_while,
    FindingCode.EVENT: _event, FindingCode.OPPOSITE: _opposite, FindingCode.CYCLES_NEEDED: _cycles_needed,
    FindingCode.LOAD: _load, FindingCode.MIX_CHANGE: _mix_change,
}


def finding_text(c: Analysis, x: Finding, names: NameTable) -> str:
    """One finding as a Markdown sentence, its names as `names` words them."""
    return FINDING_WORDS[x.code](c, x, names)


def _counted(names: list[str]) -> str:
    """GPU models as "8 × NVIDIA A100": each model once, with its count."""
    if not names:
        return "unknown"
    seen: dict[str, int] = {}
    for x in names:
        seen[x] = seen.get(x, 0) + 1
    return ", ".join(f"{k} × {x}" if k > 1 else x for x, k in seen.items())


def _unknown(v: Any) -> str:
    return "unknown" if v is None else str(v)


def _metric_one_side(n: Notice) -> str:
    d = _detail(n, MetricOneSideDetail)
    return f"metric {d.metric} on {d.device} was sampled in the {d.side} run only; not compared"


def _cycle_ratio(n: Notice) -> str:
    d = _detail(n, CycleRatioDetail)
    head = f"median cycle times differ by ×{d.ratio:.2f} ({n.normal / 1e3:.3g} ms vs {n.abnormal / 1e3:.3g} ms)"
    if d.same_marked_source:
        return (f"{head}: both runs' cycles are the process's own markers ({d.source_n}), so probably a real "
                "change, unless the markers changed meaning")
    return f"{head}: probably segmented differently; choose cycles with --cycle / --window"


def _world_size(n: Notice) -> str:
    d = _detail(n, WorldSizeDetail)
    return (f"world size differs: {_unknown(n.normal)} (rank {_unknown(d.rank_n)}) vs {_unknown(n.abnormal)} "
            f"(rank {_unknown(d.rank_a)}): collectives and the work per rank change with it")


def _rank(n: Notice) -> str:
    return (f"another rank: {_unknown(n.normal)} vs {_unknown(n.abnormal)} of "
            f"{_unknown(_detail(n, RankDetail).world_size)}: ranks can do different work")


def _cycle_source(n: Notice) -> str:
    d = _detail(n, CycleSourceDetail)
    return f"cycle source differs: {n.normal} ({d.detail_n}) vs {n.abnormal} ({d.detail_a})"


def _load_notice(n: Notice) -> str:
    """The runs carried different load: the numbers, and the cycle time at a common load."""
    d = _detail(n, LoadNoticeDetail)
    s = (f"the runs carried different load: median tokens per cycle {fmt_num(n.normal, 1)} → "
         f"{fmt_num(n.abnormal, 1)}, requests per cycle {fmt_num(d.requests_n, 1)} → "
         f"{fmt_num(d.requests_a, 1)}, prefill share {fmt_num(d.prefill_share_n_pct, 1)} → "
         f"{fmt_num(d.prefill_share_a_pct, 1)} % of tokens; cycle times grow with load, so they are not "
         "comparable as they stand")
    if d.adjusted:
        s += (f". At a common load (both runs' cycles weighted to their pooled load, median "
              f"{fmt_num(d.x0_tokens, 1)} tokens per cycle) the cycle time changed "
              f"{fmt_pct(d.change_pct, 1)} ({fmt_time_us(d.cycle_n_us)} → {fmt_time_us(d.cycle_a_us)}; "
              f"{_ci_pct(d.change_lo_pct, d.change_hi_pct)}, p {fmt_p(d.p)}), and the findings compare "
              "own times at that load")
    else:
        s += f"; they could not be compared at a common load: {d.reason}"
    return s


def _differs_list(what: str) -> Callable[[Notice], str]:
    """A setting of each GPU that differs (driver, clock, power limit): each value once, counted."""
    return lambda n: (f"{what} differs: {_counted([_unknown(x) for x in n.normal or []])} vs "
                      f"{_counted([_unknown(x) for x in n.abnormal or []])}")


def _differs(what: str) -> Callable[[Notice], str]:
    """A setting of the host that differs."""
    return lambda n: f"{what} differs: {_unknown(n.normal)} vs {_unknown(n.abnormal)}"


NOTICE_WORDS: dict[NoticeCode, Callable[[Notice], str]] = {
    NoticeCode.METRIC_ONE_SIDE: _metric_one_side,
    NoticeCode.CYCLE_RATIO: _cycle_ratio,
    NoticeCode.GPU_MODEL: lambda n: f"GPU model differs: {_counted(n.normal)} vs {_counted(n.abnormal)}",
    NoticeCode.GPU_DRIVER: _differs_list("GPU driver"),
    NoticeCode.MAX_SM_CLOCK: _differs_list("max SM clock (MHz)"),
    NoticeCode.POWER_LIMIT: _differs_list("power limit (W)"),
    NoticeCode.CPU_MODEL: _differs("CPU model"),
    NoticeCode.CPU_CORES: _differs("CPU cores"),
    NoticeCode.OS_KERNEL: _differs("OS kernel"),
    NoticeCode.WORLD_SIZE: _world_size,
    NoticeCode.RANK: _rank,
    NoticeCode.CYCLE_SOURCE: _cycle_source,
    NoticeCode.INPUT_SOURCE: lambda n: f"the runs come from different sources: {n.normal} vs {n.abnormal}",
    NoticeCode.LOAD: _load_notice,
}


def notice_text(n: Notice) -> str:
    """A warning or comparability problem as one Markdown line (values escaped)."""
    return md_escape(NOTICE_WORDS[n.code](n))


def _ci_pct(lo: float, hi: float) -> str:
    """"95 % CI +1.7% to +2.8%"."""
    return f"95 % CI {fmt_pct(lo, 1)} to {fmt_pct(hi, 1)}"


def plan_text(plan: CyclePlan | None, names: NameTable) -> str:
    """The cycle plan as Markdown sentences, each on its own line of one paragraph so that no
    line is wider than a screen (names escaped)."""
    if plan is None:
        return "Each run was cut into cycles on its own."
    what = plan_source_text(plan, names)
    if plan.source == CycleSource.WINDOW and not plan.chosen_by_user:
        what += (": no cycle source exists in both runs, so per-cycle numbers are per window; mark the "
                 "loop with `perfdiff.cycle()` or choose cycles with `--cycle REGEX`")
    text = f"Both runs are cut into cycles by one plan: {what}."
    if not plan.confirmed:
        text += "\nOnly one run repeats this sequence on its own: check that the other run's cycles are whole iterations."
    if plan.device_map:
        pairs = ", ".join(f"{md_escape(a)} as {md_escape(n)}" for a, n in plan.device_map)
        text += f"\nThe runs used other GPU indexes; matched by their order of activity: the abnormal run's {pairs}."
    passed = one_sided_text(plan)
    return text + (f"\nPassed over, not in both runs: {passed}." if passed else "")


def one_sided_text(plan: CyclePlan) -> str:
    """The sources the plan passed over because one run lacked them, "; "-joined ("" for none)."""
    return "; ".join(
        f"repeating ranges (up to {n_n} repeats of a name in the normal run, {n_a} in the abnormal; no "
        "name in both)" if src_ == CycleSource.ANNOTATION.value else
        f"{md_escape(src_)} ({n_n} cycles in the normal run, {n_a} in the abnormal)"
        for src_, n_n, n_a in plan.one_sided)


def device_plans_text(plan: CyclePlan | None, names: NameTable, who: str = "The process drives") -> str:
    """For a process that drives several GPUs: a list of what the plan would cut each GPU's
    work alone at, and what it would pass over there (CyclePlan.devices); "" for none.  `who`
    opens the sentence (a rank report: the ranks the plan was chosen on)."""
    if plan is None or not plan.devices:
        return ""
    lines = [f"{who} {len(plan.devices)} GPUs; each GPU's work alone, with the ranges of the threads "
             "that launch it, would be cut at:", ""]
    for d in plan.devices:
        p = d.plan
        what = ("no cycle source that passes the checks (each run compared by its totals)"
                if p.regime is Regime.TOTALS else plan_source_text(p, names))
        line = f"- {md_escape(d.device)}: {what}" + (" — the plan's own choice." if d.same else ".")
        if p.rejected:
            line += f" Passed over, unfit: {unfit_text(p.rejected)}."
        if p.one_sided:
            line += f" Passed over, not in both runs: {one_sided_text(p)}."
        lines.append(line)
    return "\n".join(lines)


def plan_source_text(plan: CyclePlan, names: NameTable) -> str:
    """What a plan cuts at, as a noun phrase ("the repeating range **step**, a cycle running
    from one's start to the next's"; names escaped)."""
    src = plan.source
    if src == CycleSource.PERFDIFF_MARKERS:
        what = "the perfdiff cycle markers the process wrote"
    elif src == CycleSource.PROFILER_STEP:
        what = "the profiler's ProfilerStep#N ranges"
    elif src == CycleSource.ANNOTATION:
        what = f"the repeating range **{names.md(plan.name or '', 80)}**"
        if plan.to_next_start:
            what += ", a cycle running from one's start to the next's"
    elif src == CycleSource.REGEX:
        what = f"the ranges or kernels matching /{md_escape(plan.name or '')}/ (--cycle)"
    elif src == CycleSource.KERNEL_SEQUENCE:
        launch = "at each launch" if plan.anchor_every == 1 else f"every {plan.anchor_every} launches"
        what = (f"a repeating kernel sequence ({plan.period} kernels), a cycle starting {launch} of "
                f"**{names.md(plan.name or '', 60)}**")
    elif src == CycleSource.IDLE_GAPS:
        what = f"GPU idle gaps longer than {fmt_time_us((plan.threshold_ns or 0) / 1e3)}"
    else:
        what = f"fixed windows of {fmt_time_us((plan.window_ns or 0) / 1e3)}"
    return what


VERDICT_WORDS = {
    VerdictCode.DIFFERENT_HARDWARE: "different hardware",
    VerdictCode.CPU_CLOCK: "host CPU clock reduced",
    VerdictCode.CPU_QUOTA: "CPU quota throttling",
    VerdictCode.MEMORY_PRESSURE: "host memory pressure",
    VerdictCode.CPU_CONTENTION: "host CPU contention",
    VerdictCode.IO_WAIT: "host I/O wait",
    VerdictCode.INPUT_PIPELINE: "input pipeline stall",
    VerdictCode.GPU_DEVICE_WIDE: "device-wide GPU slowdown",
    VerdictCode.GPU_THROTTLING: "GPU throttling",
    VerdictCode.GPU_KERNEL: "GPU kernel regression",
    VerdictCode.COLLECTIVES: "collectives took longer",
    VerdictCode.OTHER_PROCESS: "another process on the GPU",
    VerdictCode.LAUNCH_BOUND: "launch-bound",
    VerdictCode.ADDED_SYNC: "added synchronisation",
    VerdictCode.TRANSFER: "transfer growth",
    VerdictCode.IMPLEMENTATION_SWAPPED: "implementation swapped",
    VerdictCode.FEWER_LONGER_LAUNCHES: "fewer, longer launches",
    VerdictCode.MORE_SHORTER_LAUNCHES: "more, shorter launches",
    VerdictCode.NEW_WORK: "new or added work",
    VerdictCode.CPU_WORK: "CPU-side work slower",
    VerdictCode.LOAD: "different load",
    VerdictCode.MIX: "different mix of steps",
    VerdictCode.NO_MATERIAL: "no material change",
}

# A class that made the cycle faster (Direction.FASTER), where its name says which way: the
# causes it names took less time.
VERDICT_WORDS_FASTER = {
    VerdictCode.CPU_CLOCK: "host CPU clock raised",
    VerdictCode.CPU_QUOTA: "less CPU quota throttling",
    VerdictCode.MEMORY_PRESSURE: "less host memory pressure",
    VerdictCode.CPU_CONTENTION: "less host CPU contention",
    VerdictCode.IO_WAIT: "less host I/O wait",
    VerdictCode.INPUT_PIPELINE: "input pipeline faster",
    VerdictCode.GPU_DEVICE_WIDE: "device-wide GPU speed-up",
    VerdictCode.GPU_THROTTLING: "less GPU throttling",
    VerdictCode.GPU_KERNEL: "GPU kernels faster",
    VerdictCode.COLLECTIVES: "collectives took less time",
    VerdictCode.OTHER_PROCESS: "another process on the GPU",
    VerdictCode.LAUNCH_BOUND: "launches faster",
    VerdictCode.ADDED_SYNC: "fewer synchronisation points",
    VerdictCode.TRANSFER: "transfers shrank",
    VerdictCode.NEW_WORK: "work removed or fewer calls",
    VerdictCode.CPU_WORK: "CPU-side work faster",
}


def verdict_word(v: VerdictClass) -> str:
    """A verdict class's name, by its code and the direction of the change it explains."""
    if v.direction == Direction.FASTER:
        return VERDICT_WORDS_FASTER.get(v.code, VERDICT_WORDS[v.code])
    return VERDICT_WORDS[v.code]


def tau_cycle(c: Analysis) -> str:
    """The cycle τ is a share of (Analysis.tau_base): the longer run's, "the normal cycle" for a
    speed-up, "the abnormal cycle" otherwise."""
    return f"the {c.tau_base.value} cycle"


# Op categories (perfdiff.analyze.records.OpCategory) as the report names them.
CATEGORY_WORDS = {
    OpCategory.GEMM: "GEMM",
    OpCategory.ATTENTION: "attention",
    OpCategory.CONVOLUTION: "convolution",
    OpCategory.NORMALIZATION: "normalization",
    OpCategory.ELEMENTWISE: "elementwise / activation",
    OpCategory.REDUCTION: "reduction / softmax",
    OpCategory.MEMCPY: "memcpy / memset",
    OpCategory.COMMUNICATION: "communication",
    OpCategory.OTHER: "other",
}


def categories_intro(c: Analysis, first: bool) -> str:
    """The sentence before the op-category table: why it is there (on the first screen: the
    GPUs differ, or much GPU time is in rows of one run only) and what it shows."""
    share = c.unmatched_gpu_share
    why = []
    if c.hardware_differs:
        why.append("the runs ran on other GPUs")
    if math.isfinite(share) and share > 0:
        why.append(f"{fmt_num(100.0 * share, 0)} % of the GPU time is in rows of one run only")
    lead = "**GPU time by kind of work**" if first else "GPU time by kind of work"
    return (f"{lead} ({'; '.join(why)}), {per_unit(c)}; kernels, copies and sets by their names "
            "(op categories, docs/STATISTICS.md):")


def categories_rest(n: int) -> str:
    """What the first screen's category table leaves to section 1 ("" when nothing)."""
    return f"The other {n} {'category is' if n == 1 else 'categories are'} in section 1." if n > 0 else ""


SIGNAL_WORDS = {  # metric → (group, what, unit as printed); one signal per group is worded
    # (memory pressure's signals, and the CPU and I/O stalls that back contention and I/O wait)
    "cgroup_mem_events_oom_kill": ("events", "OOM kills", "/s"),
    "cgroup_mem_events_oom": ("events", "cgroup OOMs", "/s"),
    "cgroup_mem_under_oom": ("events", "under OOM", "% of readings"),
    "cgroup_mem_events_max": ("events", "memory limit hits", "/s"),
    "cgroup_mem_events_high": ("events", "memory.high hits", "/s"),
    "host_pressure_memory_some": ("psi", "memory stalls (some)", "% of time"),
    "cgroup_pressure_memory_some": ("psi", "cgroup memory stalls (some)", "% of time"),
    "host_pressure_memory_full": ("psi", "memory stalls (full)", "% of time"),
    "cgroup_pressure_memory_full": ("psi", "cgroup memory stalls (full)", "% of time"),
    "host_swap_in": ("swap", "swap-in", "B/s"),
    "host_swap_out": ("swap", "swap-out", "B/s"),
    "process_major_faults": ("faults", "major faults", "/s"),
    "cgroup_pressure_cpu_some": ("psi", "cgroup CPU stalls (some)", "% of time"),
    "host_pressure_cpu_some": ("psi", "CPU stalls (some)", "% of time"),
    "cgroup_pressure_cpu_full": ("psi", "cgroup CPU stalls (full)", "% of time"),
    "cgroup_pressure_io_some": ("psi", "cgroup I/O stalls (some)", "% of time"),
    "host_pressure_io_some": ("psi", "I/O stalls (some)", "% of time"),
    "cgroup_pressure_io_full": ("psi", "cgroup I/O stalls (full)", "% of time"),
    "host_pressure_io_full": ("psi", "I/O stalls (full)", "% of time"),
}


def _signal_words(signals: tuple[Signal, ...], names: NameTable) -> str:
    """"memory limit hits 0 → 4.01 /s, memory stalls (some) 0.29 → 17.95 % of time, swap-in 0 B/s
    → 4.95 MiB/s": the first signal of each group in SIGNAL_WORDS's order, at most three."""
    order = list(SIGNAL_WORDS)
    parts, groups = [], set()
    for sig in sorted(signals, key=lambda x: order.index(x.metric) if x.metric in order else len(order)):
        group, what, unit = SIGNAL_WORDS.get(sig.metric, (sig.metric, names.md(sig.metric), ""))
        if group in groups or len(parts) == 3:
            continue
        groups.add(group)
        n, a = sig.mean_n, sig.mean_a
        if unit in ("bytes", "B/s"):
            parts.append(f"{what} {fmt_value(n, unit)} → {fmt_value(a, unit)}")
        else:
            parts.append(f"{what} {fmt_num(n)} → {fmt_value(a, unit)}")
    return ", ".join(parts)


def _host_wide_words(hw: HostWide, names: NameTable, c: Analysis | None = None, who: str = "") -> str:
    """A host-wide common-mode slowdown, in words; with the analysis, what waiting explains of
    it, the largest functions it holds, and `who` (the other functions the class names)."""
    text = f"every CPU-side function on {names.md(hw.device)} ×{fmt_num(hw.ratio)} per call"
    if c is None:
        return text
    if math.isfinite(hw.explained_pp) and hw.explained_pp:
        by = " and ".join(VERDICT_WORDS[x] for x in hw.explained_by)
        text += f", more than {by or 'waiting'} explains ({fmt_num(hw.explained_pp)} of {fmt_num(hw.host_wide_pp)} pp)"
    funcs = [c.functions[i].name for i in hw.absorbed_funcs]
    if funcs:
        text += "; most in " + ", ".join(f"**{names.md(n, 48)}**" for n in funcs[:2])
    return text + (f"; also {who}" if who else "")


def _who(who: str, sep: str = ": ") -> str:
    return f"{sep}{who}" if who else ""


def _cpu_clock(c: Analysis, v: VerdictClass, who: str, names: NameTable) -> str:
    d = _vdetail(v, CpuClockDetail)
    hw = d.host_wide
    # With waiting beside it, the host-wide rest in the clock's class says what waiting explains.
    if hw is not None and math.isfinite(hw.explained_pp):
        slower = _host_wide_words(hw, names, c, who)
    else:
        slower = who or (_host_wide_words(hw, names) if hw is not None else "")
    return (f": CPU clock {fmt_num(d.clock.n)} → {fmt_num(d.clock.a)} {d.clock.unit}; slower at unchanged calls: "
            f"{slower}")


def _cpu_work(c: Analysis, v: VerdictClass, who: str, names: NameTable) -> str:
    if isinstance(v.detail, CpuWorkDetail):  # a host-wide slowdown per call
        return ": " + _host_wide_words(v.detail.host_wide, names, c, who)
    return _who(who)


def _cpu_quota(c: Analysis, v: VerdictClass, who: str, names: NameTable) -> str:
    d = _vdetail(v, QuotaDetail)
    return (f": the target's cgroup was throttled {fmt_num(d.throttled_ms_per_s_n)} → "
            f"{fmt_num(d.throttled_ms_per_s_a)} ms per s" + _who(who, "; "))


def _stall(c: Analysis, v: VerdictClass, who: str, names: NameTable) -> str:
    """Memory pressure, contention, I/O wait: the signals backing the class, then its causes."""
    d = v.detail
    if isinstance(d, StallDetail) and d.signals:
        return f": {_signal_words(d.signals, names)}" + _who(who, "; ")
    return _who(who)


def _gpu_throttling(c: Analysis, v: VerdictClass, who: str, names: NameTable) -> str:
    d = _vdetail(v, ThrottleDetail)
    if not d.held:
        return f" ({d.reason}): kernels slower while the GPU was held back: {who}"
    text = (f" ({d.reason}): {names.md(d.device)} held back by its {d.reason} limit {fmt_num(d.share_a_pct, 1)} % of "
            f"the time (normal run: {fmt_num(d.share_n_pct, 1)} %)")
    if math.isfinite(d.clock_n_mhz) and math.isfinite(d.clock_a_mhz) and d.clock_n_mhz > 0:
        text += (f", SM clock {fmt_num(d.clock_n_mhz, 0)} → {fmt_num(d.clock_a_mhz, 0)} MHz "
                 f"({fmt_pct(100.0 * (d.clock_a_mhz / d.clock_n_mhz - 1.0), 1)})")
    return text + "; no kernel got slower with it"


def _load_class(c: Analysis, v: VerdictClass, who: str, names: NameTable) -> str:
    d = _vdetail(v, LoadDetail)
    return (f": median tokens per cycle {fmt_num(d.median_tokens_n, 1)} → {fmt_num(d.median_tokens_a, 1)}; at a "
            f"common load the cycle time changed {fmt_pct(d.change_pct, 1)} (p {fmt_p(d.p)})"
            + ("; no function changed materially at that load: the load explains the change" if d.explained else ""))


def _mix_class(c: Analysis, v: VerdictClass, who: str, names: NameTable) -> str:
    d = _vdetail(v, MixDetail)
    return (": " + "; ".join(f"{step_kind(x.present, x.absent, names)} {fmt_num(x.share_n_pct, 1)} % → "
                             f"{fmt_num(x.share_a_pct, 1)} % of steps (p {fmt_p(x.p)})" for x in d.shifts)
            + ": a load change, not a regression"
            + ("; no function changed materially kind of step with kind: the mix explains the change"
               if d.explained else ""))


def _gpu_device_wide(c: Analysis, v: VerdictClass, who: str, names: NameTable) -> str:
    d = _vdetail(v, DeviceWideDetail)
    return f": every kernel on {names.md(d.device)} ×{fmt_num(d.ratio)} per call"


def _launch_bound(c: Analysis, v: VerdictClass, who: str, names: NameTable) -> str:
    """The launch calls behind a launch-bound class: per call and per cycle."""
    d, per = _vdetail(v, LaunchDetail), per_unit(c)
    return ": " + "; ".join(f"**{names.md(x.name, 48)}** {fmt_time_us(x.per_call_n_us)} → "
                            f"{fmt_time_us(x.per_call_a_us)} per call, "
                            f"{fmt_num(x.calls_n, 1)} → {fmt_num(x.calls_a, 1)} calls {per}"
                            for x in d.launches[:2]) + (
        f"; the kernels they feed {fmt_num(d.kernel_calls_n, 1)} → {fmt_num(d.kernel_calls_a, 1)} calls {per}")


def _added_sync(c: Analysis, v: VerdictClass, who: str, names: NameTable) -> str:
    """The synchronisation calls behind an added-synchronisation class, per cycle."""
    calls, per = _vdetail(v, SyncDetail).calls, per_unit(c)
    return ": " + ", ".join(f"**{names.md(x.name, 48)}** {fmt_num(x.calls_n, 1)} → {fmt_num(x.calls_a, 1)} "
                            f"calls {per}" for x in calls[:2]) + (
        f" and {len(calls) - 2} more" if len(calls) > 2 else "")


def _other_process(c: Analysis, v: VerdictClass, who: str, names: NameTable) -> str:
    return " (" + ", ".join(names.md(d) for d in _vdetail(v, OtherProcessDetail).devices) + ")" + _who(who)


def _names_only(c: Analysis, v: VerdictClass, who: str, names: NameTable) -> str:
    return _who(who)


RUNTIME_WORDS = {"cuda": "CUDA", "hip": "HIP"}


def _different_hardware(c: Analysis, v: VerdictClass, who: str, names: NameTable) -> str:
    """The runs' GPUs (or runtimes) and the op categories whose GPU time moved most."""
    d, per = _vdetail(v, HardwareDetail), per_unit(c)
    parts = []
    if d.gpus_n or d.gpus_a:
        parts.append(f"{md_escape(', '.join(d.gpus_n) or '?')} → {md_escape(', '.join(d.gpus_a) or '?')}")
    if d.runtime_n and d.runtime_a and d.runtime_n != d.runtime_a:
        parts.append(f"{RUNTIME_WORDS.get(d.runtime_n, d.runtime_n)} → {RUNTIME_WORDS.get(d.runtime_a, d.runtime_a)} "
                     "runtime")
    text = ": " + "; ".join(parts) if parts else ""
    if d.shifts:
        text += ("; GPU time " + per + " by kind: "
                 + ", ".join(f"{CATEGORY_WORDS[x.category]} {fmt_time_us(x.t_n_us)} → {fmt_time_us(x.t_a_us)}"
                             for x in d.shifts))
    return text


def _swapped_class(c: Analysis, v: VerdictClass, who: str, names: NameTable) -> str:
    """": under `op`, `gone` → `new`" for the largest replacements (the findings list each)."""
    ops = _vdetail(v, SwappedDetail).ops
    return ": " + "; ".join(f"under **{names.md(o.op, 48)}**, " + " + ".join(f"**{names.md(n, 48)}**" for n in o.gone[:1])
                            + " → " + " + ".join(f"**{names.md(n, 48)}**" for n in o.new[:2])
                            + (" + …" if len(o.new) > 2 else "") for o in ops[:2]) + (
        f" and {len(ops) - 2} more ops" if len(ops) > 2 else "")


def _launch_structure(c: Analysis, v: VerdictClass, who: str, names: NameTable) -> str:
    """": 862 calls of X (148 µs each) became 18 of Y (5.3 ms each)", per piece."""
    d = _vdetail(v, LaunchStructureDetail)
    return (f": {d.calls_n:g} calls of **{names.md(d.gone, 48)}** ({fmt_time_us(d.per_call_n_us)} each) "
            f"became {d.calls_a:g} of **{names.md(d.new, 48)}** ({fmt_time_us(d.per_call_a_us)} each)")


def _no_material(c: Analysis, v: VerdictClass, who: str, names: NameTable) -> str:
    return ": no function's own time changed both significantly and materially"


# What each class says after its name, from its detail and `who` (the functions it names).
VERDICT_LINES: dict[VerdictCode, Callable[[Analysis, VerdictClass, str, NameTable], str]] = {
    VerdictCode.DIFFERENT_HARDWARE: _different_hardware,
    VerdictCode.CPU_CLOCK: _cpu_clock,
    VerdictCode.CPU_QUOTA: _cpu_quota,
    VerdictCode.MEMORY_PRESSURE: _stall,
    VerdictCode.CPU_CONTENTION: _stall,
    VerdictCode.IO_WAIT: _stall,
    VerdictCode.INPUT_PIPELINE: _names_only,
    VerdictCode.GPU_DEVICE_WIDE: _gpu_device_wide,
    VerdictCode.GPU_THROTTLING: _gpu_throttling,
    VerdictCode.GPU_KERNEL: _names_only,
    VerdictCode.COLLECTIVES: _names_only,
    VerdictCode.OTHER_PROCESS: _other_process,
    VerdictCode.LAUNCH_BOUND: _launch_bound,
    VerdictCode.ADDED_SYNC: _added_sync,
    VerdictCode.TRANSFER: _names_only,
    VerdictCode.IMPLEMENTATION_SWAPPED: _swapped_class,
    VerdictCode.FEWER_LONGER_LAUNCHES: _launch_structure,
    VerdictCode.MORE_SHORTER_LAUNCHES: _launch_structure,
    VerdictCode.NEW_WORK: _names_only,
    VerdictCode.CPU_WORK: _cpu_work,
    VerdictCode.LOAD: _load_class,
    VerdictCode.MIX: _mix_class,
    VerdictCode.NO_MATERIAL: _no_material,
}
# What a class adds after its share and q.
VERDICT_AFTER = {VerdictCode.COLLECTIVES: ": a collective waits for the last rank; compare all ranks' traces to find it"}


def verdict_lines(c: Analysis, verdict: list[VerdictClass], findings: list[Finding], names: NameTable) -> list[str]:
    """The verdict as short Markdown lines, one per class: its name, what it states
    (VERDICT_LINES), the share it explains and its evidence (at most two names, shortened)."""
    lines = []
    for v in verdict:
        named = list(dict.fromkeys(findings[i].function for i in v.evidence if findings[i].function))
        who = ", ".join(f"**{names.md(n, 48)}**" for n in named[:2]) + (f" and {len(named) - 2} more"
                                                                           if len(named) > 2 else "")
        text = f"**{verdict_word(v)}**" + VERDICT_LINES[v.code](c, v, who, names)
        if v.tau_pp:
            # Host and GPU time overlap in the cycle: each device's share, not their sum.
            shares = (" and ".join(f"{fmt_signed(pp)} pp on {names.md(d)}" for d, pp in v.tau_by_device)
                      if v.tau_by_device else f"{fmt_signed(v.tau_pp)} pp")
            # A cause's nested causes count in its share (the tables show each one's own τ).
            nested = any(isinstance(findings[i].evidence, CauseEvidence) and findings[i].evidence.tau_nested_pp
                         for i in v.evidence)
            text += (f" ({shares} of {tau_cycle(c)}" + (", with the work nested in it" if nested else "")
                     + (f", q {fmt_p(v.q)})" if math.isfinite(v.q) else ")"))
        elif math.isfinite(v.q):
            text += f" (q {fmt_p(v.q)})"
        # A cause tested over too few cycles to check their dependence: marked, said once below.
        lines.append(text + VERDICT_AFTER.get(v.code, "") + (". †" if v.dependence_unchecked else "."))
        lines.extend(starved_line(s, names) for s in v.starved)
    return lines


def starved_line(s: Starved, names: NameTable) -> str:
    """A GPU that waited for the host, and the host-side class it points to."""
    return (f"**GPU starved**: {names.md(s.device)} busy {fmt_num(s.busy_n_pct, 1)} → {fmt_num(s.busy_a_pct, 1)} % "
            f"of the cycle (p {fmt_p(s.p)}): the GPU waited for the host; host-side cause: **{VERDICT_WORDS[s.cause]}**.")


# --- The CI gate (perfdiff.analyze.gate_records) ---------------------------------------------

GATE_OUTCOME_WORDS = {GateOutcome.PASS: "pass", GateOutcome.REGRESSION: "regression",
                      GateOutcome.CANNOT_JUDGE: "cannot judge"}
GATE_METRIC_WORDS = {GateMetric.MEDIAN: "median cycle", GateMetric.MEAN: "mean cycle", GateMetric.P95: "P95 cycle",
                     GateMetric.FUNCTION: "own time per cycle of"}
GATE_TEST_WORDS = {GateTest.MANN_WHITNEY: "Mann–Whitney", GateTest.SIGNED_RANK: "Wilcoxon signed-rank",
                   GateTest.WELCH: "Welch's t test", GateTest.QUANTILE_CI: "both runs' 95 % CIs of the P95",
                   GateTest.FUNCTION_Q: "its own-time test, BH q"}
GATE_REASON_WORDS = {
    GateReason.GREW: "grew by at least the threshold, significantly",
    GateReason.BELOW_THRESHOLD: "grew by less than the threshold (or fell)",
    GateReason.NOT_SIGNIFICANT: "grew by at least the threshold, but not significantly",
    GateReason.IDENTICAL: "the inputs hold the same bytes: nothing was measured twice",
    GateReason.EMPTY_CAPTURE: "one run holds no GPU work (or no cycle) where the other does: an empty capture",
    GateReason.NOT_STATIONARY: ("no cycle source exists in both runs, and fixed windows were refused because the "
                                "work changes over the run (a one-shot program): no iteration time to compare"),
    GateReason.NO_CYCLES: "the runs are compared by totals (too few cycles or steps): no iteration time to compare",
    GateReason.WINDOWS: ("the cycles are fixed windows, whose duration is the window's: no iteration time to "
                         "compare (mark the loop with perfdiff.cycle() or --cycle REGEX, or gate on function:REGEX)"),
    GateReason.DIFFERENT_HARDWARE: "the runs ran on other GPU models or vendors: not like for like",
    GateReason.TOO_FEW_CYCLES: "too few cycles for the test",
    GateReason.NO_FUNCTION: "no function of the comparison matches the pattern",
    GateReason.UNTESTED: "too small a share of the cycle to be tested",
}
