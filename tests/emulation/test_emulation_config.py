"""An Emulation refuses a bad topology, bad topology parameters or a bad prefix with an error
naming the field, before anything is built (no root needed)."""

from __future__ import annotations

import pytest

from testbed import emulation
from testbed.emulation import kernel


@pytest.mark.parametrize("topology,params,field", [
    ("star", {"n_workers": 0, "rate_mbit": 10.0}, "n_workers"),
    ("star", {"n_workers": 2}, "rate_mbit: required"),
    ("star", {"n_workers": 2, "rate_mbit": -5}, "rate"),
    ("star", {"n_workers": 2, "rate_mbit": 10.0, "queue_pkts": 0}, "queue_pkts"),
    ("star", {"bogus": 1}, "params.bogus"),
    ("ring", {}, "topology"),
])
def test_bad_config_names_the_field(topology, params, field):
    with pytest.raises(ValueError, match=field):
        emulation.Emulation(topology, params, prefix="nstzz00")


def test_bad_prefix_refused():
    with pytest.raises(ValueError, match="prefix"):
        emulation.Emulation("star", {}, prefix="abc")


def test_name_servers_parses_ipv4_and_skips_loopback(tmp_path):
    from testbed.emulation.emulated_network import name_servers

    conf = tmp_path / "resolv.conf"
    conf.write_text("# comment\nnameserver 10.255.255.53\nnameserver 127.0.0.53\n"
                    "nameserver ::1\nnameserver fe80::1\nsearch example\nnameserver bogus\n"
                    "nameserver 10.255.255.53\nnameserver 8.8.4.4\n")
    assert name_servers(conf) == ["10.255.255.53", "8.8.4.4"]
    assert name_servers(tmp_path / "missing") == []


def test_congestion_control_the_kernel_refuses(tmp_path, monkeypatch):
    """Checked before the registry is written: nothing to clean after the refusal."""
    monkeypatch.setattr(kernel, "congestion_controls", lambda: ["reno", "bbr"])
    monkeypatch.setattr(kernel, "available_congestion_controls", lambda: ["reno", "bbr"])
    with pytest.raises(ValueError, match=r"^congestion_control: 'cubic' is not allowed .*"
                                         r"allowed: reno, bbr"):
        emulation.Emulation("star", {"n_workers": 2, "rate_mbit": 10.0}, prefix="nstzz00",
                            state_dir=tmp_path, congestion_control="cubic")
    assert list(tmp_path.iterdir()) == []


def test_allow_congestion_control_only_widens(tmp_path, monkeypatch):
    """One the kernel has but a namespace may not set is appended to the allowed list (the
    rest kept, in order); one already allowed or one the kernel lacks changes nothing."""
    allowed, available = tmp_path / "allowed", tmp_path / "available"
    allowed.write_text("reno bbr\n")
    available.write_text("reno bbr cubic\n")
    monkeypatch.setattr(kernel, "CC_ALLOWED", allowed)
    monkeypatch.setattr(kernel, "CC_AVAILABLE", available)
    assert kernel.allow_congestion_control("bbr") is False
    assert kernel.allow_congestion_control("vegas") is False
    assert allowed.read_text() == "reno bbr\n"
    assert kernel.allow_congestion_control("cubic") is True
    assert kernel.congestion_controls() == ["reno", "bbr", "cubic"]
    assert kernel.allow_congestion_control("cubic") is False
    assert kernel.congestion_control_error("cubic") is None
    assert "allowed: reno, bbr, cubic" in kernel.congestion_control_error("vegas")
