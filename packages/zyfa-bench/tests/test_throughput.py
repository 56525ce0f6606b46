"""run_sweep's interleaved timing rounds, with fake peers on CPU that record every call in order."""

from __future__ import annotations

import time
from itertools import groupby

import pytest
import torch

import zyfa_bench.timing as timing
from zyfa_bench.peers.base import Peer, Prepared, Unsupported
from zyfa_bench.spec import Spec
from zyfa_bench.throughput import Problem, SweepOptions, run_sweep
from zyfa_bench.workloads import Gaussian

CPU = torch.device("cpu")


class Recorder(Peer):
    """A peer that runs anywhere and appends ("prepare", name) / ("call", name) to a shared log."""

    def __init__(
        self,
        name: str,
        log: list[tuple[str, str]],
        *,
        available: bool = True,
        prepare_error: Exception | None = None,
        fail_after: int | None = None,
        prepare_s: float = 0.0,
    ) -> None:
        self.name, self.family, self.log = name, "fake", log
        self._available, self._prepare_error = available, prepare_error
        self._fail_after, self._prepare_s, self.calls = fail_after, prepare_s, 0

    def available(self) -> tuple[bool, str]:
        return (True, "fake") if self._available else (False, f"{self.name} is not installed")

    def supports(self, spec: Spec, device: torch.device) -> tuple[bool, str]:
        return True, ""

    def _prepare(self, inputs: object) -> Prepared:
        self.log.append(("prepare", self.name))
        time.sleep(self._prepare_s)
        if self._prepare_error is not None:
            raise self._prepare_error
        return Prepared(call=self._call, result=lambda out: out)

    def _call(self) -> None:
        self.calls += 1
        if self._fail_after is not None and self.calls > self._fail_after:
            raise RuntimeError(f"{self.name} broke on call {self.calls}")
        self.log.append(("call", self.name))


def _sweep(peers: list[Peer], problems: int = 1, **opts: object) -> list[dict]:
    rows: list[dict] = []
    spec = Spec(1, 16, 16, 2, 2, 16, 16)
    options = SweepOptions(check=False, **opts)
    run_sweep(
        [Problem(f"p{i}", spec) for i in range(problems)],
        peers,
        Gaussian(),
        device=CPU,
        options=options,
        add_row=rows.append,
    )
    return rows


def _runs(log: list[tuple[str, str]], kind: str = "call") -> list[str]:
    """Names of consecutive runs of calls: A A A B B -> [A, B]."""
    return [name for name, _ in groupby(name for k, name in log if k == kind)]


@pytest.fixture
def spy(monkeypatch):
    """Every call_times the sweep makes: (peer, warmup, repeats, warm_every_set)."""
    seen: list[tuple[str, int, int, bool]] = []
    real = timing.call_times

    def wrapper(calls, *, device, warmup, repeats, warm_every_set=True):
        seen.append((calls[0].__self__.name, warmup, repeats, warm_every_set))
        return real(calls, device=device, warmup=warmup, repeats=repeats, warm_every_set=warm_every_set)

    monkeypatch.setattr(timing, "call_times", wrapper)
    return seen


def test_rounds_interleave_peers_in_rotated_order(spy):
    log: list[tuple[str, str]] = []
    peers = [Recorder(n, log) for n in "ABC"]
    rows = _sweep(peers, repeats=9, rounds=3, warmup=2)
    # Every peer is prepared before any is timed, then three rounds: A B C, B C A, C A B.
    assert [name for kind, name in log if kind == "prepare"] == ["A", "B", "C"]
    assert log.index(("call", "A")) > log.index(("prepare", "C"))
    assert _runs(log) == ["A", "B", "C", "B", "C", "A", "C", "A", "B"]
    # Round 0 warms up fully; later rounds make one untimed call and do not re-warm every set.
    assert spy == [
        ("A", 2, 3, True),
        ("B", 2, 3, True),
        ("C", 2, 3, True),
        ("B", 1, 3, False),
        ("C", 1, 3, False),
        ("A", 1, 3, False),
        ("C", 1, 3, False),
        ("A", 1, 3, False),
        ("B", 1, 3, False),
    ]
    assert [r["impl"] for r in rows] == ["A", "B", "C"] and all(r["status"] == "ok" for r in rows)


@pytest.mark.parametrize(
    ("repeats", "rounds", "split"), [(20, 3, [7, 7, 6]), (7, 3, [3, 2, 2]), (2, 3, [1, 1])]
)
def test_repeats_total_is_the_option(spy, repeats, rounds, split):
    log: list[tuple[str, str]] = []
    peers = [Recorder(n, log) for n in "AB"]
    rows = _sweep(peers, repeats=repeats, rounds=rounds, warmup=0)
    assert [count for name, _, count, _ in spy if name == "A"] == split
    for row, peer in zip(rows, peers, strict=True):
        timing = row["timing"]
        assert timing["repeats"] == repeats and timing["rounds"] == len(split)
        # warmup 0 and one input set: round 0 still touches the set once, later rounds make no call.
        assert peer.calls == 1 + repeats
        assert timing["min_ms"] <= timing["p10_ms"] <= timing["median_ms"] <= timing["p90_ms"]
        assert len(timing["round_median_ms"]) == len(split)
        assert all(timing["min_ms"] <= m <= timing["max_ms"] for m in timing["round_median_ms"])
        assert set(timing) == {
            "median_ms",
            "min_ms",
            "max_ms",
            "p10_ms",
            "p90_ms",
            "repeats",
            "warmup",
            "sets",
            "method",
            "t_start",
            "t_end",
            "rounds",
            "round_median_ms",
        }


def test_one_round_is_the_old_sequential_sweep(spy):
    log: list[tuple[str, str]] = []
    peers = [Recorder(n, log) for n in "ABC"]
    rows = _sweep(peers, problems=2, repeats=5, rounds=1, warmup=3)
    # Prepare A, time A, prepare B, time B, ... : each peer in turn, one time_calls-like run of all repeats.
    compact = [f"{kind}:{name}" for (kind, name), _ in groupby(log)]
    assert compact == ["prepare:A", "call:A", "prepare:B", "call:B", "prepare:C", "call:C"] * 2
    assert spy == [(n, 3, 5, True) for n in "ABC"] * 2
    assert [r["impl"] for r in rows] == list("ABC") * 2
    assert all(r["timing"]["rounds"] == 1 and r["timing"]["repeats"] == 5 for r in rows)
    assert all(r["timing"]["warmup"] == 3 for r in rows)


@pytest.mark.parametrize("rounds", [1, 3])
def test_failures_still_make_their_rows(spy, rounds):
    log: list[tuple[str, str]] = []
    peers = [
        Recorder("ok1", log),
        Recorder("missing", log, available=False),
        Recorder("unsup", log, prepare_error=Unsupported("no such head dim")),
        Recorder("broken", log, prepare_error=RuntimeError("plan failed")),
        Recorder("flaky", log, fail_after=4),  # 1 warm-up + 3 timed calls in round 0, then it breaks
        Recorder("ok2", log),
    ]
    rows = _sweep(peers, repeats=9, rounds=rounds, warmup=0)
    by = {r["impl"]: r for r in rows}
    assert len(rows) == len(peers)
    assert by["missing"]["status"] == "skipped" and by["missing"]["reason"] == "missing is not installed"
    assert by["unsup"]["status"] == "unsupported" and by["unsup"]["reason"] == "no such head dim"
    assert by["broken"]["status"] == "error" and by["broken"]["reason"] == "RuntimeError: plan failed"
    assert by["flaky"]["status"] == "error" and by["flaky"]["reason"].startswith(
        "timing failed: RuntimeError"
    )
    assert "ms" not in by["flaky"] and "timing" not in by["flaky"]
    for name in ("ok1", "ok2"):
        assert by[name]["status"] == "ok" and by[name]["timing"]["repeats"] == 9
        assert by[name]["timing"]["rounds"] == rounds
    if rounds == 1:  # rows in peer order, as before
        assert [r["impl"] for r in rows] == [p.name for p in peers]
    else:  # rows that exist before timing come first; then the timed ones in peer order
        assert [r["impl"] for r in rows] == ["missing", "unsup", "broken", "ok1", "flaky", "ok2"]
        # A peer that failed is left out of later rounds; the others go on.
        assert [name for name, *_ in spy] == ["ok1", "flaky", "ok2", "flaky", "ok2", "ok1", "ok2", "ok1"]


@pytest.mark.parametrize("rounds", [1, 3])
def test_time_budget_skips_peers_not_yet_started(rounds):
    log: list[tuple[str, str]] = []
    peers = [Recorder("slow", log, prepare_s=0.3), Recorder("B", log), Recorder("C", log)]
    rows = _sweep(peers, problems=2, repeats=3, rounds=rounds, warmup=0, time_budget_s=0.2)
    by = {(r["shape"], r["impl"]): r for r in rows}
    assert len(rows) == 6
    assert by[("p0", "slow")]["status"] == "ok"  # started within the budget: measured to the end
    skipped = [k for k, r in by.items() if r["status"] == "skipped"]
    assert sorted(skipped) == [("p0", "B"), ("p0", "C"), ("p1", "B"), ("p1", "C"), ("p1", "slow")]
    assert all("time budget of 0 s spent" in by[k]["reason"] for k in skipped)


def test_bad_rounds_are_refused():
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        _sweep([Recorder("A", [])], rounds=0)
