"""Every YAML, CSV and trace input has a size and an expansion bound,
so a hostile file is refused in well under a second, with one line, not after minutes and
gigabytes."""

from __future__ import annotations

import json
import time

import pytest

from testbed.analysis import loading
from testbed.common import bounded
from tests.cli.invoke import netsense

BOMB = """name: bomb
a: &a [x, x, x, x, x, x, x, x, x, x]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]
"""
SWEEP_BOMB = ("name: bomb\nmethods: [allreduce]\nscenario: smoke\noverrides:\n  x:\n"
              + "".join("    " + line + "\n" for line in BOMB.splitlines()[1:])
              + "  description: *h\n")


def _timed(fn):
    t = time.monotonic()
    out = fn()
    assert time.monotonic() - t < 5, "took too long to refuse"
    return out


@pytest.mark.parametrize("kind", ["scenario", "sweep"])
def test_alias_bomb_refused_at_once(tmp_path, monkeypatch, kind):
    p = tmp_path / "bomb.yaml"
    p.write_text(BOMB if kind == "scenario" else SWEEP_BOMB)
    args = ["run", str(p), "--results", str(tmp_path / "r")] if kind == "scenario" else \
        ["sweep", str(p), "--results", str(tmp_path / "r"), "--dry-run"]
    res = _timed(lambda: netsense(args, tmp_path, monkeypatch))
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "aliases are expanded (alias bomb?)" in lines[0], res.stderr


def test_set_value_bomb_and_size(tmp_path, monkeypatch):
    res = _timed(lambda: netsense(["run", "smoke", "--set", "description=" + BOMB, "--results",
                                   str(tmp_path / "r")], tmp_path, monkeypatch))
    assert res.exit_code == 2, res.stderr
    assert res.stderr.strip().splitlines() == [
        "error: --set description: more than 100000 YAML nodes once aliases are expanded "
        "(alias bomb?)"], res.stderr
    res = netsense(["run", "smoke", "--set", "description=" + "x" * 70000, "--results",
                    str(tmp_path / "r")], tmp_path, monkeypatch)
    assert res.exit_code == 2 and "longer than 65536 bytes" in res.stderr


@pytest.mark.parametrize("text, needle", [
    ("[" * 5000 + "]" * 5000, "nested"),
    ("a: " + "x" * (bounded.MAX_YAML_BYTES + 10), "bytes, more than the"),
    ("a: &a [*a]", "recursive alias"),
    ("a: !!python/object:os.system x", "could not determine a constructor"),
])
def test_yaml_bounds(tmp_path, text, needle):
    p = tmp_path / "x.yaml"
    p.write_text(text)
    with pytest.raises(bounded.BoundError, match=needle.replace("(", r"\(")):
        _timed(lambda: bounded.load_yaml(p))


@pytest.mark.parametrize("fmt, content, needle", [
    ("mahimahi", "0\n999999999999\n", "more than 100000 bins"),
    ("csv", "0,10\n1,inf\n", "must be finite"),
    ("csv", "0,10\n1,nan\n", "must be finite"),
    ("csv", "\0\1\2binary", "expected 'time,rate'"),
    ("csv", "0,1e7\n", "above the 100000 accepted"),
])
def test_trace_bounds(tmp_path, monkeypatch, fmt, content, needle):
    (tmp_path / "t.trace").write_text(content)
    s = tmp_path / "s.yaml"
    s.write_text(json.dumps({
        "name": "s", "topology": {"kind": "star", "n_workers": 2, "n_cross": 0,
                                  "rate_mbit": 50},
        "workload": {"model": "mlp", "dataset": "digits", "batch_size": 8,
                     "time_limit_s": 10},
        "methods": ["allreduce"],
        "timeline": [{"at_s": 0, "kind": "trace", "link": "w0", "file": "t.trace",
                      "format": fmt}]}))
    res = _timed(lambda: netsense(["run", str(s), "--results", str(tmp_path / "r")], tmp_path,
                                  monkeypatch))
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "timeline[0]" in lines[0] and needle in lines[0], res.stderr


def test_trace_file_size_bound_reads_nothing(tmp_path):
    big = tmp_path / "big.trace"
    with open(big, "wb") as fh:  # sparse: costs no disk
        fh.truncate(bounded.MAX_TRACE_BYTES + 1)
    from testbed.config.traces import TraceError, parse_trace

    with pytest.raises(TraceError, match="bytes, more than the"):
        _timed(lambda: parse_trace(big, "csv"))


def test_result_csv_and_json_size_bounds(tmp_path, monkeypatch):
    monkeypatch.setattr(bounded, "MAX_CSV_BYTES", 100)
    p = tmp_path / "steps.csv"
    p.write_text("rank,t,samples\n" + "0,1,2\n" * 50)
    with pytest.raises(loading.Damaged, match="more than the 100"):
        loading.read_csv_file(p, loading.STEP_COLUMNS)
