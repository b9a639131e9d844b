"""The command line as the README walks a new user through it, in real processes.

help, version, list, a run of the smoke scenario with its defaults, the figures of that one
run folder, the report, and the report rendered by a real headless browser (chromium):
a screenshot that is not blank and no horizontal overflow at 1280 px.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

NETSENSE = Path(sys.executable).with_name("netsense")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def sh(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="120")
    return subprocess.run([str(NETSENSE), *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=timeout)


def test_help_version_list_and_errors_in_one_style(tmp_path):
    top = sh("-h", cwd=tmp_path)
    assert top.returncode == 0
    for cmd in ("run", "show", "list", "schema", "sweep", "plot", "report", "compare", "export",
                "doctor"):
        assert re.search(rf"^\s+{cmd}\s", top.stdout, re.M), cmd
    assert "--install-completion" in top.stdout
    run_help = sh("run", "--help", cwd=tmp_path).stdout
    assert re.search(r"-q, --quiet\s+no progress line", run_help)  # a flag, no <bool> value
    assert "-r, --results DIR" in run_help
    for cmd in ("sweep", "plot", "report"):
        assert "-r, --results DIR" in sh(cmd, "-h", cwd=tmp_path).stdout, cmd
    version = sh("--version", cwd=tmp_path)
    assert version.returncode == 0 and re.fullmatch(r"netsense \S+\n", version.stdout)
    listing = sh("list", cwd=tmp_path).stdout
    for section in ("scenarios", "sweeps", "methods", "models", "datasets", "topologies"):
        assert re.search(rf"^{section} ", listing, re.M), section
    assert re.search(r"^\s+tiny\s", listing, re.M) and re.search(r"^\s+topk:R\s", listing, re.M)
    # a parser error and a command's own refusal read the same: one line, error: ..., exit 2
    for args in (("run", "--bogus", "smoke"), ("run", "nosuch"), ("sweep", "nosuch"),
                 ("plot", "-r", str(tmp_path / "missing"))):
        proc = sh(*args, cwd=tmp_path)
        assert proc.returncode == 2, args
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (args, proc.stderr)


def test_show_and_dry_run_print_the_resolved_scenario(tmp_path):
    show = sh("show", "smoke", "--set", "topology.rate_mbit=42", cwd=tmp_path)
    assert show.returncode == 0, show.stderr
    assert "rate_mbit: 42" in show.stdout and "queue_pkts: 100" in show.stdout  # defaults too
    dry = sh("run", "smoke", "--dry-run", "-r", str(tmp_path / "res"), cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "2 runs" in dry.stdout and "nothing run" in dry.stdout
    assert not (tmp_path / "res").exists()
    # the folder it names is the one a run makes: the method's slug, no ':' in a path
    dry = sh("run", "smoke", "--dry-run", "-m", "topk:0.01", "-r", str(tmp_path / "res"),
             cwd=tmp_path)
    assert f"-> {tmp_path / 'res'}/smoke/<time>-topk-0.01-s0/" in dry.stdout, dry.stdout
    assert "warning" not in dry.stderr
    # a native run configured above the faithful range says so before anything runs
    fast = sh("run", "smoke", "--dry-run", "--set", "topology.rate_mbit=5000", cwd=tmp_path)
    assert fast.returncode == 0 and re.search(
        r"^warning: configured rate 5000 Mbit/s is above the emulation's faithful range",
        fast.stderr, re.M), fast.stderr


@pytest.fixture(scope="module")
def smoke_results(tmp_path_factory):
    from tests.conftest import emulation_unavailable

    why = emulation_unavailable()
    if why:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("journey")
    proc = sh("run", "smoke", "-r", str(root / "results"), "-q", cwd=root, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root, proc


@pytest.mark.emulation
@pytest.mark.slow
def test_run_plot_one_run_folder_and_report(smoke_results):
    root, proc = smoke_results
    assert "allreduce" in proc.stdout and "netsenseml" in proc.stdout and " ok " in proc.stdout
    runs = sorted((root / "results" / "smoke").iterdir())
    assert len(runs) == 2
    one = runs[0]
    plot = sh("plot", "-r", str(one), cwd=root)
    assert plot.returncode == 0, plot.stderr
    for fig in ("accuracy_vs_time", "adaptation_timeline"):  # smoke has a rate cut
        assert (one / "figures" / f"{fig}.png").stat().st_size > 10_000, fig
        assert f"{fig}: " in plot.stdout
    report = sh("report", "-r", str(root / "results"), cwd=root)
    assert report.returncode == 0, report.stderr
    page = (root / "results" / "report.html").read_text()
    assert "<title>NetSense results: smoke</title>" in page
    assert "True" not in page and "False" not in page
    assert "data:image/png;base64," in page
    # smoke measures convergence: every run evaluated 5+ times before reaching its target
    assert "Not a convergence measurement" not in page


@pytest.mark.emulation
@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium (make setup installs it)")
def test_report_renders_in_a_headless_browser_without_overflow(smoke_results, tmp_path):
    root, _ = smoke_results
    page = root / "results" / "report.html"
    if not page.exists():
        assert sh("report", "-r", str(root / "results"), cwd=root).returncode == 0
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", (
        "<script>addEventListener('load',()=>{const d=document.createElement('pre');"
        "d.id='probe';d.textContent='W '+document.documentElement.scrollWidth+' '+"
        "document.documentElement.clientWidth+' I '+[...document.images].filter("
        "i=>i.naturalWidth>0).length;document.body.appendChild(d);});</script></body>")))
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,900"]
    dom = subprocess.run([*base, "--virtual-time-budget=5000", "--dump-dom",
                          probe.as_uri()], capture_output=True, text=True, timeout=120)
    m = re.search(r'id="probe">W (\d+) (\d+) I (\d+)', dom.stdout)
    assert m, dom.stderr[-2000:]
    scroll, client, images = map(int, m.groups())
    assert client == 1280 and scroll <= client, f"page overflows: {scroll} > {client}"
    assert images >= 2  # the figures decoded
    shot = tmp_path / "report.png"
    subprocess.run([*base, f"--screenshot={shot}", page.as_uri()], capture_output=True,
                   timeout=120)
    from PIL import Image

    img = Image.open(shot).convert("L")
    assert img.size == (1280, 900)
    lo, hi = img.getextrema()
    assert hi - lo > 100  # text and figures, not a blank page
    keep = os.environ.get("NETSENSE_KEEP_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)
