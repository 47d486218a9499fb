"""How many cycles a side a comparison needs before a clear change can be significant.

docs/STATISTICS.md, "Cycles needed": the smallest count per side from which a perfectly
separated row reaches q ≤ α under Benjamini–Hochberg, whatever the other rows do.
"""
from __future__ import annotations

from perfdiff.stats.mannwhitney import _exact_regime, min_attainable_p


def cycles_needed(n_total_tests: int, alpha: float = 0.05) -> int:
    """Cycles per side from which a perfectly separated row can reach q ≤ alpha under BH.

    Rule: the smallest n such that min_attainable_p(n', n')·m ≤ alpha for every n' ≥ n,
    m = max(1, n_total_tests).  BH gives the smallest p a q of at most p·m, so the
    condition guarantees q ≤ alpha whatever the other rows do.  "Every n' ≥ n" matters:
    past the exact regime (n > 10) the asymptotic p of a perfect separation is larger than
    the exact one at n = 10, so the condition is not monotone there.
    """
    m = max(1, int(n_total_tests))
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    ok: list[bool] = []
    n = 1
    while True:
        n += 1
        good = min_attainable_p(n, n) * m <= alpha
        ok.append(good)
        # Past the exact regime min_attainable_p(n, n) decreases in n: the first success
        # there holds for all larger n.
        if good and not _exact_regime(n, n):
            break
    need = n
    for i in range(len(ok) - 1, -1, -1):
        if not ok[i]:
            break
        need = i + 2
    return need

