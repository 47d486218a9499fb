"""The suspicion score that ranks functions, and the reference tool's legacy score.

docs/STATISTICS.md, "Suspicion score".  τ and Δβ in percentage points; scores in pp.
"""
from __future__ import annotations

import numpy as np

# Suspicion score: each of Z(t) and Z(log μ) adds at most this much.
SCORE_Z_CAP = 5.0


def _cap_abs(z: object) -> np.ndarray:
    zz = np.abs(np.asarray(z, dtype=np.float64))
    return np.where(np.isnan(zz), 0.0, np.minimum(zz, SCORE_Z_CAP))


def suspicion_score(tau: object, z_t: object, z_logmu: object,
                    func_scope: object) -> float | np.ndarray:
    """S = |τ|·(min(|Z(t)|, 5) + (min(|Z(log μ)|, 5) if func_scope else 0)), τ in pp.

    n/a Z counts 0; NaN τ gives NaN.  Works elementwise on arrays too.
    """
    w = _cap_abs(z_t) + np.where(np.asarray(func_scope, dtype=bool), _cap_abs(z_logmu), 0.0)
    s = np.abs(np.asarray(tau, dtype=np.float64)) * w
    return float(s) if s.ndim == 0 else s


def legacy_score(delta_beta: object, z_beta: object, z_logmu: object) -> float | np.ndarray:
    """The reference's |Δβ|·(|Z(β)| + |Z(log μ)|), n/a Z counting 0, uncapped; elementwise too."""
    zb = np.abs(np.nan_to_num(np.asarray(z_beta, dtype=np.float64), nan=0.0))
    zl = np.abs(np.nan_to_num(np.asarray(z_logmu, dtype=np.float64), nan=0.0))
    s = np.abs(np.asarray(delta_beta, dtype=np.float64)) * (zb + zl)
    return float(s) if s.ndim == 0 else s

