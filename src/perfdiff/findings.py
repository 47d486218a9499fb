"""Key Findings in plain words: causes first, then the symptoms and resources that explain them.

Every claim carries its q and says "significant" only when q ≤ α (STATS.md).  Text is
Markdown with user names already escaped (perfdiff.text).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from perfdiff.analyze import Comparison, FunctionStats
from perfdiff.model.schema import GPU_KINDS
from perfdiff.text import fmt_num, fmt_p, fmt_pct, fmt_signed, fmt_time_us, fmt_value, md_name

MAX_CAUSES = 5
MAX_SYMPTOMS = 3
MAX_RESOURCES = 5
HOST_SHARE_MIN_REL = 0.10


@dataclass
class Finding:
    """One sentence of the Key Findings, with the numbers it rests on."""

    kind: str  # cycle | cause | common-mode | symptom | resource | opposite | power | note
    text: str  # Markdown, names escaped
    function: str | None = None
    device: str | None = None
    q: float | None = None
    values: dict[str, float] = field(default_factory=dict)


def _sig(q: float, alpha: float) -> bool:
    return q is not None and math.isfinite(q) and q <= alpha


def _q_words(q: float, alpha: float) -> str:
    return f"significant, q {fmt_p(q)}" if _sig(q, alpha) else f"not significant, q {fmt_p(q)}"


def _calls_vs_slower(f: FunctionStats) -> str:
    """Say whether own time moved through more calls or slower calls."""
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
        parts.append(f"{fmt_num(f.calls_n, 1)} → {fmt_num(f.calls_a, 1)} calls per cycle, "
                     f"{fmt_time_us(f.per_call_n_us)} → {fmt_time_us(f.per_call_a_us)} per call")
        if math.isfinite(rp) and abs(math.log(rp)) > abs(math.log(rc)) + 0.05:
            parts.append("slower calls" if rp > 1 else "faster calls")
        elif abs(math.log(rc)) > 0.05:
            parts.append("more calls" if rc > 1 else "fewer calls")
    return "; ".join(parts)


def _fn(f: FunctionStats) -> str:
    """A function for a sentence: bold, escaped (a code span would show the escapes literally)."""
    return f"**{md_name(f.name, 80)}** on {md_name(f.device)}"


def build_findings(c: Comparison) -> list[Finding]:
    """The ordered Key Findings of a comparison."""
    a = c.alpha
    out: list[Finding] = []
    d_med = c.abnormal.median_us - c.normal.median_us
    rel = 100.0 * d_med / c.normal.median_us if c.normal.median_us else float("nan")
    direction = 1.0 if d_med >= 0 else -1.0
    cyc_q = c.cycle_test.p_mwu
    out.append(Finding("cycle", (
        f"Median cycle time {'rose' if d_med >= 0 else 'fell'} from {fmt_time_us(c.normal.median_us)} "
        f"to {fmt_time_us(c.abnormal.median_us)} ({fmt_pct(rel, 1)}; Mann–Whitney p {fmt_p(cyc_q)}, "
        f"{c.normal.n_cycles} vs {c.abnormal.n_cycles} cycles)."), q=cyc_q,
        values={"median_n_us": c.normal.median_us, "median_a_us": c.abnormal.median_us}))

    tested = [f for f in c.functions if f.tested]
    moved = [f for f in tested if not f.wait and _sig(f.q_t, a) and f.tau_pp * direction > 0]
    # A host state summed over threads (oncpu, blocked …) grows with the cycle by itself; it is
    # a cause only when its share of the cycle moved too.
    causes = [f for f in moved if f.kind != "host" or _share_moved(f, a, direction)]
    proportional = [f for f in moved if f not in causes]
    causes.sort(key=lambda f: -abs(f.tau_pp))
    for f in causes[:MAX_CAUSES]:
        d_t = f.t_a_us - f.t_n_us
        how = _calls_vs_slower(f) if f.kind != "host" else (
            f"its share of the cycle went {fmt_num(f.beta_n)} → {fmt_num(f.beta_a)} % (q(β) {fmt_p(f.q_beta)})")
        incl = ""
        if f.kind == "cpu" and abs((f.incl_a_us - f.incl_n_us) - d_t) > 0.05 * abs(d_t):
            incl = f", inclusive of nested ranges {fmt_time_us(f.incl_n_us)} → {fmt_time_us(f.incl_a_us)}"
        out.append(Finding("cause", (
            f"{_fn(f)} took {fmt_time_us(abs(d_t))} {'more' if d_t > 0 else 'less'} {'self time ' if incl else ''}per cycle "
            f"({fmt_time_us(f.t_n_us)} → {fmt_time_us(f.t_a_us)}{incl}; τ {fmt_signed(f.tau_pp)} pp of the abnormal cycle; "
            f"{_q_words(f.q_t, a)})" + (f": {how}." if how else ".")),
            function=f.name, device=f.device, q=f.q_t,
            values={"tau_pp": f.tau_pp, "t_n_us": f.t_n_us, "t_a_us": f.t_a_us,
                    "incl_n_us": f.incl_n_us, "incl_a_us": f.incl_a_us}))
    if not causes:
        out.append(_no_cause_note(c))
    if proportional:
        names = ", ".join(f"{_fn(f)} ({fmt_time_us(f.t_n_us)} → {fmt_time_us(f.t_a_us)}, β {fmt_num(f.beta_n)} → "
                          f"{fmt_num(f.beta_a)} %)" for f in proportional[:4])
        out.append(Finding("proportional", (
            f"Host states that grew with the cycle but kept their share of it (not causes by themselves): {names}.")))

    for cm in c.common_modes:
        if not cm.triggered:
            continue
        movers = [f for f in tested if f.device == cm.device and f.kind in GPU_KINDS and _sig(f.q_t, a)
                  and f.tau_pp * direction > 0]
        movers.sort(key=lambda f: -abs(f.tau_pp))
        same_time = [f for f in tested if f.device == cm.device and f.kind in GPU_KINDS and not _sig(f.q_t, a)]
        text = (f"Common-mode shift: all {cm.k} kernels on {md_name(cm.device)} scaled ×{cm.ratio:.2f} in β "
                f"(IQR of ln ratio {cm.iqr_log:.2f}) — a device-wide shift (starvation, clocks, or a "
                f"cycle-definition change), not {cm.k} separate regressions.")
        if same_time:
            text += (f" {len(same_time)} of them kept their own time per cycle (no significant change): "
                     "their β fell only because the cycle grew." if cm.ratio < 1 else
                     f" {len(same_time)} of them kept their own time per cycle (no significant change).")
        if movers:
            names = ", ".join(f"{_fn(f)} (Δβ vs common {fmt_signed(f.beta_vs_common)} pp, τ {fmt_signed(f.tau_pp)} pp)"
                              for f in movers[:3])
            text += f" Deviating from it: {names}."
        out.append(Finding("common-mode", text, device=cm.device, values={"ratio": cm.ratio, "k": cm.k}))

    waits = [f for f in tested if f.wait and _sig(f.q_t, a)]
    waits.sort(key=lambda f: -abs(f.tau_pp))
    for f in waits[:MAX_SYMPTOMS]:
        d_t = f.t_a_us - f.t_n_us
        gpu_sync = f.kind == "api"
        meaning = ""
        if gpu_sync:
            meaning = (": the GPU finished sooner relative to the host — the GPU was starved (host-bound)"
                       if d_t < 0 else ": the host waited longer on the GPU (GPU-bound)")
        out.append(Finding("symptom", (
            f"Symptom: the host waited {fmt_time_us(abs(d_t))} {'more' if d_t > 0 else 'less'} per cycle in "
            f"{_fn(f)} ({fmt_time_us(f.t_n_us)} → {fmt_time_us(f.t_a_us)}; {_q_words(f.q_t, a)}){meaning}."),
            function=f.name, device=f.device, q=f.q_t, values={"tau_pp": f.tau_pp}))

    res = [r for r in c.context if _sig(r.q, a)]
    res.sort(key=lambda r: -abs(r.z_log) if math.isfinite(r.z_log) else 0.0)
    for r in res[:MAX_RESOURCES]:
        alias = f" (= {md_name(', '.join(r.aliases))})" if r.aliases else ""
        delta = r.res.mean_a - r.res.mean_n
        out.append(Finding("resource", (
            f"Resource: **{md_name(r.metric)}**{alias} on {md_name(r.device)} "
            f"{'rose' if delta > 0 else 'fell'} from {fmt_value(r.res.mean_n, r.unit)} to "
            f"{fmt_value(r.res.mean_a, r.unit)} ({_q_words(r.q, a)}, {r.res.n_n} vs {r.res.n_a} samples)."),
            device=r.device, q=r.q, values={"mean_n": r.res.mean_n, "mean_a": r.res.mean_a}))
    top_causes = {(f.name, f.device) for f in causes[:MAX_CAUSES]}
    mus = [m for m in c.mu if _sig(m.q, a) and (c.functions[m.func].name, c.functions[m.func].device) in top_causes]
    for m in mus[:MAX_RESOURCES]:
        f = c.functions[m.func]
        out.append(Finding("resource", (
            f"While {_fn(f)} ran, **{md_name(m.metric)}** went from {fmt_value(m.res.mean_n, m.unit)} to "
            f"{fmt_value(m.res.mean_a, m.unit)} ({_q_words(m.q, a)})."),
            function=f.name, device=f.device, q=m.q))

    out.extend(_event_findings(c))

    opposite = [f for f in tested if not f.wait and _sig(f.q_t, a) and f.tau_pp * direction < 0]
    opposite.sort(key=lambda f: -abs(f.tau_pp))
    if opposite:
        names = ", ".join(f"{_fn(f)} (τ {fmt_signed(f.tau_pp)} pp)" for f in opposite[:3])
        out.append(Finding("opposite", f"Moved against the cycle-time change: {names}."))
    if c.cycles_needed is not None:
        out.append(Finding("note", (
            f"With {c.normal.n_cycles} / {c.abnormal.n_cycles} cycles the smallest attainable U-test p is "
            f"{fmt_p(c.min_p)}, and the false-discovery control over {c.n_tests_t} functions lifts q above "
            f"{a:g} whatever the effect: not significant at this sample size; collect ≥ {c.cycles_needed} "
            "cycles per run. The largest changes are still ranked below.")))
    return out


EVENT_WORDS = {
    "gpu-lost": "GPU lost (fell off the bus or stopped answering)",
    "xid": "XID error",
    "ecc": "ECC errors",
    "other-process": "another process on the GPU",
    "target-exited": "the target exited",
}


def _event_findings(c: Comparison) -> list[Finding]:
    """Timed events of the abnormal run that the normal run did not have (by kind and device)."""
    seen_n = {(e.get("event"), e.get("device"), e.get("pid")) for e in c.events_n}
    out: list[Finding] = []
    for e in c.events_a:
        kind = str(e.get("event"))
        if kind not in EVENT_WORDS or (kind, e.get("device"), e.get("pid")) in seen_n:
            continue
        who = ""
        if kind == "other-process":
            who = f": pid {e.get('pid')}" + (f" ({md_name(str(e['name']), 40)})" if e.get("name") else "")
            if e.get("used_gpu_memory_bytes"):
                who += f", holding {fmt_value(float(e['used_gpu_memory_bytes']), 'bytes')}"
        elif kind == "xid" and e.get("xid") is not None:
            who = f" {md_name(str(e.get('xid')))}"
        out.append(Finding("event", (
            f"Event in the abnormal run only: {EVENT_WORDS[kind]} on {md_name(str(e.get('device', '?')))}{who}, "
            f"{fmt_num(e['t_s'], 1)} s after the first cycle."), device=str(e.get("device")),
            values={"t_s": e["t_s"]}))
    return out[:MAX_RESOURCES]


def _share_moved(f: FunctionStats, alpha: float, direction: float) -> bool:
    """A host state's share of the cycle moved significantly, by ≥ 10 % of its normal share."""
    return (_sig(f.q_beta, alpha) and f.d_beta * direction > 0
            and abs(f.d_beta) >= HOST_SHARE_MIN_REL * max(f.beta_n, 1e-9))


def _no_cause_note(c: Comparison) -> Finding:
    return Finding("note", (
        f"No function's own time changed significantly in the direction of the cycle-time change "
        f"(q ≤ {c.alpha:g} over {c.n_tests_t} tested functions)."))
