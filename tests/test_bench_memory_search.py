"""The memory benchmarks' seed search (`benchmarks._common.search_seeds`) against a brute-force scan.

It stands in for a doubling and a bisection with probes aimed along the footprint's line; each probe is a
compile of the vmapped train (seconds on a GPU), so the count of probes is what a device check pays.
"""

import math

import pytest

from benchmarks import _common

FOOTPRINTS = {
    "linear": lambda s: 5_000_000 + 40_000 * s,
    "convex": lambda s: 5_000_000 + 30_000 * s + 2 * s * s,
    "concave": lambda s: 5_000_000 + 900_000 * math.sqrt(s),
    "steps": lambda s: 5_000_000 + 65_536 * math.ceil(s * 40_000 / 65_536),  # allocation in 64 KiB pages
}


def _search(shape, budget, start, precision):
    calls = []

    def footprint(seeds):
        calls.append(seeds)
        return {"seeds": seeds, "total": FOOTPRINTS[shape](seeds)}

    return _common.search_seeds(footprint, budget, start, precision), calls


@pytest.mark.parametrize("shape", sorted(FOOTPRINTS))
@pytest.mark.parametrize("budget", [8 * 2**30, 2**30, 60_000_000])
def test_search_brackets_the_most_seeds_that_fit(shape, budget):
    precision = 0.02
    found, calls = _search(shape, budget, 256, precision)
    best = found["max_seeds"]
    f = FOOTPRINTS[shape]
    assert f(best) <= budget
    # the true largest count that fits lies within the precision above the answer
    true = best
    while f(true + 1) <= budget:
        true += 1
    assert true - best <= max(1, int(best * precision)), (best, true)
    assert found["at_max"]["seeds"] == best and found["probes"][0]["seeds"] == 1
    assert len(calls) == len(found["probes"]) and len(set(calls)) == len(calls)  # no count probed twice
    if shape in ("linear", "steps"):
        assert len(calls) <= 4, calls  # one, start, the line's crossing and one inside the bracket
    assert len(calls) <= _doubling_and_bisection(f, budget, 256, precision) + 1, calls


def _doubling_and_bisection(f, budget, start, precision):
    """How many probes the search this one replaced took: double from start, then bisect."""
    probes, lo, hi = 2, 1, start
    while f(hi) <= budget:
        lo, hi, probes = hi, hi * 2, probes + 1
    while hi - lo > max(1, int(lo * precision)):
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if f(mid) <= budget else (lo, mid)
        probes += 1
    return probes


def test_one_seed_over_the_budget_is_zero():
    found, calls = _search("linear", 1_000_000, 256, 0.02)
    assert found["max_seeds"] == 0 and calls == [1]


def test_start_over_the_budget_searches_below_it():
    found, _ = _search("linear", 5_000_000 + 40_000 * 100, 256, 0.02)
    assert 98 <= found["max_seeds"] <= 100
