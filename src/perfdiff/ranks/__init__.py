"""Runs of many ranks: one trace (or bundle) per rank, or one nsys export holding several
processes, compared rank by rank with the work fanned out to worker processes (on this machine, or on a
Dask cluster: the extra perfdiff[ranks]).

Modules, one job each: `discover` (find the ranks, their numbers, the pairs), `identity` (which
process of one export is which rank), `groups` (each collective's communicator), `part` (one
rank's task: load, cut, attribute, reduce), `fanout` (a local pool of worker processes, or an existing Dask cluster),
`straggler` (who reaches the collectives last, and why), `collectives` (the collectives' own
time, beyond waiting for one another), `across` (tests per rank, the rank table, findings
across ranks, the verdict), `records` (the typed results), `pipeline` (`compare_ranks`);
`processes`: the processes of one export that are not ranks (a server and its workers), their
roles and pairs, compared pair by pair by perfdiff.api.compare_processes.  Wording is in
perfdiff.render.ranks and perfdiff.render.processes.
"""
from __future__ import annotations

from perfdiff.ranks.discover import any_multi_rank, is_multi_rank, is_rank_directory
from perfdiff.ranks.records import (CollectiveTime, ExcessKind, GroupCode, GroupStraggler, IdentitySource, Phase,
                                    RankAnalysis, RankFinding, RankNotice, RankNoticeCode, RankRow, RankVerdict,
                                    RankVerdictCode, ScopeCode, Straggler, StragglerCode)

__all__ = ["CollectiveTime", "ExcessKind", "GroupCode", "GroupStraggler", "IdentitySource", "Phase", "RankAnalysis",
           "RankFinding", "RankNotice", "RankNoticeCode", "RankRow", "RankVerdict", "RankVerdictCode", "ScopeCode",
           "Straggler", "StragglerCode", "any_multi_rank", "compare_ranks", "is_multi_rank",
           "is_rank_directory"]


def compare_ranks(*args, **kwargs) -> RankAnalysis:
    """perfdiff.ranks.pipeline.compare_ranks (imported on first use: it imports the analysis)."""
    if kwargs.get("scheduler") is None and kwargs.get("processes", True):
        from perfdiff.ranks.fanout import warm_up

        warm_up()  # the local workers' fork server imports while this process imports the analysis
    from perfdiff.ranks.pipeline import compare_ranks as run

    return run(*args, **kwargs)
