"""A topology's paths and probe pairs read off the graph its ``build()`` makes
(``topologies.graph``), without root: the same answers the built-ins' hand-written
declarations gave (their formulas are the references below), for every host pair of many
shapes; ECMP's tied paths all counted; and no graph where ``build()`` refuses the values."""

from __future__ import annotations

import itertools

import pytest

from topologies import registry
from topologies.graph import TopoGraph


def _star_paths(p, a, b):
    return {a, b}


def _dumbbell_side(p, h):
    i = int(h[1:])
    return (0 if i < p.n_left else 1) if h[0] == "w" else i % 2


def _dumbbell_paths(p, a, b):
    return {a, b} | ({"bottleneck"} if _dumbbell_side(p, a) != _dumbbell_side(p, b) else set())


def _leaf(p, h):
    return int(h[1:]) // p.hosts_per_leaf


def _leafspine_paths(p, a, b):
    links = {a, b}
    if _leaf(p, a) != _leaf(p, b):
        links |= {f"l{_leaf(p, h)}-p{j}" for h in (a, b) for j in range(p.spines)}
    return links


def _access_pairs(hosts, group):
    pairs = {}
    for h in hosts:
        peers = [q for q in hosts if q != h and group(q) == group(h)]
        if peers:
            pairs[h] = (peers[0], h)
    return pairs


CASES = [
    ("star", {"n_workers": 1, "n_cross": 0, "rate_mbit": 10}, _star_paths, lambda p, h: 0),
    ("star", {"n_workers": 4, "n_cross": 2, "rate_mbit": 10}, _star_paths, lambda p, h: 0),
    ("dumbbell", {"n_left": 1, "n_right": 1, "n_cross": 0, "bottleneck_mbit": 5},
     _dumbbell_paths, _dumbbell_side),
    ("dumbbell", {"n_left": 2, "n_right": 3, "n_cross": 3, "bottleneck_mbit": 5},
     _dumbbell_paths, _dumbbell_side),
    ("leafspine", {"leaves": 2, "spines": 1, "hosts_per_leaf": 2}, _leafspine_paths, _leaf),
    ("leafspine", {"leaves": 3, "spines": 2, "hosts_per_leaf": 2}, _leafspine_paths, _leaf),
    ("leafspine", {"leaves": 2, "spines": 3, "hosts_per_leaf": 1}, _leafspine_paths, _leaf),
]


@pytest.mark.parametrize(("kind", "values", "paths", "group"), CASES)
def test_paths_and_access_pairs_are_what_the_declarations_said(kind, values, paths, group):
    p = registry.parse({"kind": kind, **values})
    hosts = p.hosts()
    for a, b in itertools.permutations(hosts, 2):
        assert p.path_links(a, b) == paths(p, a, b), (kind, values, a, b)
    assert p.access_pairs() == _access_pairs(hosts, lambda h: group(p, h))


def test_the_probe_pairs_stay_as_declared():
    bell = registry.parse({"kind": "dumbbell", "n_left": 2, "n_right": 2, "n_cross": 2,
                           "bottleneck_mbit": 5})
    pairs = bell.probe_pairs()
    assert pairs["bottleneck"] == ("w0", "w2") and pairs["x1"] == ("w2", "x1")
    assert pairs["w0"] == ("w1", "w0") and pairs["x0"] == ("w0", "x0")
    ls = registry.parse({"kind": "leafspine", "leaves": 2, "spines": 2})
    assert set(ls.probe_pairs()) == {"w0", "w1", "w2", "w3"}  # no uplink: ECMP picks it


def test_the_graph_takes_every_tied_shortest_path_and_refuses_unknown_hosts():
    # a square a-b-d and a-c-d, plus a tail d-e: a to d ties over b and c
    g = TopoGraph(("a", "e"), (("ab", "a", "b"), ("ac", "a", "c"), ("bd", "b", "d"),
                               ("cd", "c", "d"), ("de", "d", "e")))
    assert g.path_links("a", "d") == {"ab", "ac", "bd", "cd"}
    assert g.path_links("a", "e") == {"ab", "ac", "bd", "cd", "de"}
    assert g.path_links("a", "zz") is None and g.attached("e") == "d" and g.attached("a") is None


def test_no_graph_where_build_refuses_the_values_or_nothing_is_built():
    big = registry.parse({"kind": "leafspine", "leaves": 16, "spines": 16})  # > 250 uplinks
    assert big.graph() is None and big.path_links("w0", "w2") is None
    assert big.access_pairs() == {}
    hosts = registry.parse({"kind": "hosts", "rate_mbit": 10,
                            "machines": [{"address": "10.0.0.1", "interface": "eth0"},
                                         {"address": "10.0.0.2", "interface": "eth0"}]})
    assert hosts.graph() is None  # real machines: never built in Mininet
