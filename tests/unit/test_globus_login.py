"""`fedhpc login` / `--status` / `logout` driven in-process as a person would (the code on
stdin), against a fake Globus Auth on `responses`: the code exchange with PKCE, private token
files, refresh with rotation used by both Compute and Transfer, revocation, and missing
consents as typed errors whose hint is the exact command."""

from __future__ import annotations

import io
import json
import stat
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
import responses
import structlog

from fedhpc.cli.main import main
from fedhpc.globus_auth import apps as auth_apps
from fedhpc.globus_auth.scopes import COMPUTE_SCOPE, data_access_scope
from fedhpc.globus_auth.store import open_token_storage, tokens_path
from tests.unit.globus_fake_auth import CANARY, CLIENT_ID, IDENTITY, FakeAuth

COLLECTION = "6f1e3c2a-0000-4000-8000-00000000d001"
CODE = "the-code-from-the-globus-page"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "fedhpc-home"
    config = tmp_path / "config.toml"
    config.write_text(f'[sites.delta.collections]\nwork = "{COLLECTION}"\n')
    monkeypatch.setenv("FEDHPC_HOME", str(home))
    monkeypatch.setenv("FEDHPC_CONFIG", str(config))
    for var in (
        "GLOBUS_CLIENT_ID",
        "GLOBUS_CLIENT_SECRET",
        "GLOBUS_COMPUTE_CLIENT_ID",
        "GLOBUS_COMPUTE_CLIENT_SECRET",
        "FEDHPC_GLOBUS_IDENTITY",
        "DISPLAY",
        "WAYLAND_DISPLAY",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("FEDHPC_GLOBUS_CLIENT_ID", CLIENT_ID)
    auth_apps.reset()
    return home


@pytest.fixture(autouse=True)
def keep_logging() -> Iterator[None]:
    """main() points structlog at this test's captured stderr: restore it for later tests."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


@pytest.fixture
def fake() -> Iterator[FakeAuth]:
    responses.start()
    fake = FakeAuth()
    fake.register()
    yield fake
    responses.stop()
    responses.reset()
    auth_apps.reset()


def run_cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *argv: str, stdin: str = ""
) -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def login(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, str, str]:
    return run_cli(monkeypatch, capsys, "login", "--no-browser", *extra, stdin=CODE + "\n")


def test_login_exchanges_the_pasted_code_with_pkce_and_asks_every_scope_once(
    home: Path, fake: FakeAuth, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = login(monkeypatch, capsys)
    assert code == 0, err
    url = next(line for line in out.splitlines() if line.startswith("https://auth.globus.org"))
    query = parse_qs(urlparse(url).query)
    assert query["client_id"] == [CLIENT_ID]
    assert query["code_challenge_method"] == ["S256"]
    asked = query["scope"][0]
    for scope in ("openid", "profile", "email", COMPUTE_SCOPE, data_access_scope(COLLECTION)):
        assert scope in asked
    assert query["access_type"] == ["offline"]  # refresh tokens
    (exchange,) = fake.posts
    assert exchange["grant_type"] == ["authorization_code"]
    assert exchange["code"] == [CODE]
    assert exchange["code_verifier"][0]  # PKCE: the verifier of the challenge above
    assert "Logged in as alice@uni.edu" in out
    stored = open_token_storage(home, create=False)
    assert stored is not None
    data = stored.get_token_data_by_resource_server()
    stored.close()
    assert sorted(data) == ["auth.globus.org", "funcx_service", "transfer.api.globus.org"]
    assert all(d.refresh_token and d.identity_id == IDENTITY for d in data.values())


def test_token_files_are_private_to_the_user(
    home: Path, fake: FakeAuth, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert login(monkeypatch, capsys)[0] == 0
    folder = tokens_path(home).parent
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for path in folder.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    record = (folder / "login.json").read_text()
    assert CANARY not in record  # who and which scopes only; tokens live in tokens.db


def test_status_says_who_which_scopes_and_when_they_expire_without_showing_a_token(
    home: Path, fake: FakeAuth, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert login(monkeypatch, capsys)[0] == 0
    code, out, _ = run_cli(monkeypatch, capsys, "login", "--status", "--json")
    assert code == 0
    st = json.loads(out)
    assert st["logged_in"] is True
    assert (st["username"], st["identity_id"]) == ("alice@uni.edu", IDENTITY)
    by_rs = {t["resource_server"]: t for t in st["tokens"]}
    assert by_rs["funcx_service"]["scopes"] == [COMPUTE_SCOPE]
    assert by_rs["transfer.api.globus.org"]["refreshable"] is True
    assert by_rs["transfer.api.globus.org"]["access_token_expires_at"].startswith("20")
    assert st["daemon_uses"] == {"compute": "user", "transfer": "user"}
    code, text, _ = run_cli(monkeypatch, capsys, "login", "--status")
    assert "Logged in to Globus as alice@uni.edu" in text
    assert CANARY not in out + text


def test_logout_revokes_every_token_then_deletes_them(
    home: Path, fake: FakeAuth, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert login(monkeypatch, capsys)[0] == 0
    issued = fake.all_tokens()
    code, out, _ = run_cli(monkeypatch, capsys, "logout")
    assert code == 0
    assert set(fake.revoked) == issued  # access and refresh token of every resource server
    assert not tokens_path(home).exists()
    assert not (tokens_path(home).parent / "login.json").exists()
    code, out, _ = run_cli(monkeypatch, capsys, "login", "--status")
    assert code == 1
    assert "Not logged in" in out


def test_a_refused_code_is_a_typed_error_and_stores_nothing(
    home: Path, fake: FakeAuth, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    responses.replace(
        responses.POST,
        "https://auth.globus.org/v2/oauth2/token",
        status=400,
        json={"error": "invalid_grant"},
    )
    code, _, err = login(monkeypatch, capsys)
    assert code == 2
    assert "error[globus_login_failed]" in err
    assert "hint: Run `fedhpc login` again" in err
    assert not (tokens_path(home).parent / "login.json").exists()


def test_no_code_on_stdin_is_a_typed_error_not_a_hang(
    home: Path, fake: FakeAuth, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(monkeypatch, capsys, "login", "--no-browser", stdin="")
    assert code == 2
    assert "no authorization code was entered" in err
    assert not fake.posts


def test_login_scope_adds_a_consent_that_later_logins_ask_again(
    home: Path, fake: FakeAuth, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    other = "6f1e3c2a-0000-4000-8000-00000000e001"
    extra = f"urn:globus:auth:scope:transfer.api.globus.org:all[*{data_access_scope(other)}]"
    assert login(monkeypatch, capsys, "--scope", extra)[0] == 0
    code, out, _ = login(monkeypatch, capsys)  # a plain login later keeps asking for it
    assert code == 0
    url = next(line for line in out.splitlines() if line.startswith("https://auth.globus.org"))
    asked = parse_qs(urlparse(url).query)["scope"][0]
    assert data_access_scope(other) in asked
    assert data_access_scope(COLLECTION) in asked


@pytest.mark.parametrize("bad", ["transfer:all[unclosed", "a]b"])
def test_a_malformed_scope_is_refused_before_the_flow_starts(
    home: Path,
    fake: FakeAuth,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    bad: str,
) -> None:
    code, out, err = login(monkeypatch, capsys, "--scope", bad)
    assert code == 2
    assert "error[globus_login_failed]" in err
    assert "is not a Globus scope" in err
    assert "https://auth.globus.org" not in out
    assert not fake.posts
