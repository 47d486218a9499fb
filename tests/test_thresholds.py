"""The decision thresholds as one record (perfdiff.analyze.Thresholds): validated once, with
one clear line; carried on the analysis; what the CLI, the API and the wording read."""
from __future__ import annotations

import dataclasses
import math
import subprocess
import sys

import pytest

from perfdiff.analyze import Thresholds
from perfdiff.errors import InputError


@pytest.mark.parametrize("alpha", [0.0, 1.0, -0.1, 2.0, math.nan])
def test_a_bad_alpha_is_refused_with_one_line(alpha: float) -> None:
    with pytest.raises(InputError) as exc:
        Thresholds(alpha=alpha)
    text = str(exc.value)
    assert "\n" not in text and text.startswith("alpha ") and "between 0 and 1" in text


@pytest.mark.parametrize("name, value", [("material_delta", 1.5), ("material_tau_pp", -1.0),
                                         ("launch_ratio", math.inf), ("starved_drop_pp", math.nan)])
def test_a_bad_threshold_is_refused_with_one_line(name: str, value: float) -> None:
    with pytest.raises(InputError) as exc:
        Thresholds(**{name: value})
    assert "\n" not in str(exc.value) and name in str(exc.value)


def test_significant_is_q_at_most_alpha() -> None:
    th = Thresholds(alpha=0.1)
    assert th.significant(0.1) and not th.significant(0.11)
    assert not th.significant(math.nan) and not th.significant(None)


def test_material_reads_tau_and_delta() -> None:
    th = Thresholds()
    assert th.material(1.0, 0.147) and th.material(-2.0, math.nan)  # δ unknown: τ alone
    assert not th.material(0.99, 0.9) and not th.material(5.0, 0.1)


def test_every_field_is_a_typed_float_for_reflection() -> None:
    """The record is serialisable by reflection: every field a float with a default."""
    for f in dataclasses.fields(Thresholds):
        assert f.type in ("float", float), f.name
        assert isinstance(getattr(Thresholds(), f.name), float), f.name


def test_building_thresholds_does_not_import_the_statistics() -> None:
    """The CLI and the API build the record before the runs load: importing it leaves scipy
    and the analysis modules to be imported while the runs load (api._import_later_stages)."""
    code = ("import sys; from perfdiff.analyze import Thresholds; Thresholds(alpha=0.1); "
            "print('scipy' in sys.modules, 'perfdiff.analyze.compare' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_api_refuses_a_bad_alpha_before_reading_inputs(tmp_path) -> None:
    from perfdiff.api import compare, tree

    missing = str(tmp_path / "missing")
    for fn in (compare, tree):
        with pytest.raises(InputError, match="alpha 1.5: must be between 0 and 1"):
            fn(missing, missing, alpha=1.5)


def test_analysis_thresholds_follow_its_alpha() -> None:
    """An Analysis copied with another α carries thresholds with that α (one α, never two)."""
    from perfdiff.analyze.records import Analysis

    fields = {f.name: None for f in dataclasses.fields(Analysis) if f.default is dataclasses.MISSING
              and f.default_factory is dataclasses.MISSING}
    a = Analysis(**{**fields, "alpha": 0.01})
    assert a.thresholds.alpha == 0.01 and dataclasses.replace(a, alpha=0.2).thresholds.alpha == 0.2


def test_the_wording_states_the_thresholds_the_analysis_used() -> None:
    """No threshold literal in the wording: a sentence that names a threshold reads the record."""
    from conftest import EXAMPLES

    import perfdiff
    from perfdiff.analyze import Finding, FindingCode
    from perfdiff.analyze.evidence import NegligibleEvidence, NoCauseEvidence
    from perfdiff.render.text import NameTable
    from perfdiff.render.wording import finding_text

    c = perfdiff.compare(EXAMPLES / "cpufreq" / "normal", EXAMPLES / "cpufreq" / "abnormal").analysis
    plain = NameTable.plain()
    strict = dataclasses.replace(c, thresholds=Thresholds(alpha=c.alpha, material_tau_pp=2.5, material_delta=0.33))
    no_cause = finding_text(strict, Finding(FindingCode.NO_CAUSE, evidence=NoCauseEvidence(n_tests=9, negligible=1)),
                            plain)
    assert "|τ| ≥ 2.5 pp and |δ| ≥ 0.33" in no_cause
    negligible = finding_text(strict, Finding(FindingCode.NEGLIGIBLE, evidence=NegligibleEvidence(count=0)), plain)
    assert "|τ| < 2.5 pp of the abnormal cycle or |δ| < 0.33" in negligible
