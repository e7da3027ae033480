"""How the doctor tells when an SSH ControlMaster closes: the one `fedhpc connect` opened stays
(ControlPersist=yes); one opened on demand by fedhpc's calls closes after its idle time."""

from __future__ import annotations

from fedhpc.onboard.doctor import master_expiry


def test_master_opened_by_connect_stays() -> None:
    text = master_expiry(42, {"pid": 42, "at": 1000}, "600", 1000 + 180.0)
    assert text.startswith("opened by fedhpc connect 3 min ago; stays open until the center")


def test_master_opened_on_demand_closes_after_idle() -> None:
    assert (
        master_expiry(42, None, "900", 0.0) == "opened on demand; closes 900 s after its last use"
    )
    # A record of an older master (another pid) says nothing about this one.
    assert master_expiry(43, {"pid": 42, "at": 1}, "600", 9.0).startswith("opened on demand")
    assert master_expiry(42, {"pid": 42, "at": "x"}, "600", 9.0).startswith("opened on demand")
