"""`fedhpc login` (and `--status`, `--scope`) and `fedhpc logout`: a person's Globus identity
for Compute and Transfer. The Globus SDK loads only when one of these runs."""

from __future__ import annotations

import argparse
import json
from typing import Any

from fedhpc.profiles import load_federation
from fedhpc.settings import fedhpc_home

__all__ = ["add_parser", "configured_collections"]


def configured_collections() -> list[str]:
    """Every Globus collection of the enabled sites: the user's config, else the profile."""

    out: set[str] = set()
    for site in load_federation().values():
        out.update(site.user.collections.values())
        out.update(s.collection_id for s in site.profile.storage if s.collection_id)
    return sorted(out)


def _print_status(st: dict[str, Any]) -> None:
    if not st["logged_in"]:
        print("Not logged in to Globus. Run `fedhpc login`.")
    else:
        who = st.get("username") or st.get("identity_id") or "unknown identity"
        extra = ", ".join(x for x in (st.get("name"), st.get("email")) if x)
        print(f"Logged in to Globus as {who}" + (f" ({extra})" if extra else ""))
        print(
            f"  identity id: {st.get('identity_id')}  client: {st.get('client_id')}  "
            f"since: {st.get('logged_in_at')}"
        )
        for tok in st["tokens"]:
            state = "expired" if tok["access_token_expired"] else "valid"
            refresh = "refreshed automatically" if tok["refreshable"] else "NOT refreshable"
            print(
                f"  {tok['resource_server']}: access token {state} until "
                f"{tok['access_token_expires_at']} ({refresh})"
            )
            for scope in tok["scopes"]:
                print(f"      {scope}")
    uses = ", ".join(f"{svc}: {who}" for svc, who in st["daemon_uses"].items())
    print(f"The daemon uses: {uses}")


def _login(args: argparse.Namespace) -> int:
    home = fedhpc_home()
    if args.status:
        # startup: the Globus SDK only when a login command runs
        from fedhpc.globus_auth.login import status

        st = status(home)
        if args.json:
            print(json.dumps(st, indent=2))
        else:
            _print_status(st)
        return 0 if st["logged_in"] else 1
    # startup: the Globus SDK only when a login command runs
    from fedhpc.globus_auth.login import login

    record = login(
        home,
        collections=configured_collections(),
        extra_scopes=args.scope,
        domains=args.domain,
        mfa=args.mfa,
        client_id=args.client_id,
        browser=False if args.no_browser else None,
    )
    who = record.username or record.identity_id or "your Globus identity"
    if args.json:
        print(
            json.dumps(
                {
                    "logged_in": True,
                    "username": record.username,
                    "identity_id": record.identity_id,
                    "scopes": record.scopes,
                },
                indent=2,
            )
        )
    else:
        print(f"Logged in as {who}. Tokens stored in {home / 'globus'} (mode 0600).")
        print("The daemon uses them for Globus Compute and Transfer; see `fedhpc login --status`.")
    return 0


def _logout(args: argparse.Namespace) -> int:
    # startup: the Globus SDK only when a login command runs
    from fedhpc.globus_auth.login import logout

    out = logout(fedhpc_home())
    if args.json:
        print(json.dumps(out, indent=2))
    elif not out["was_logged_in"] and not out["removed"]:
        print("Not logged in to Globus; nothing to do.")
    else:
        if out["revoked"]:
            print("Revoked at Globus: " + ", ".join(out["revoked"]))
        if out["not_revoked"]:
            print(
                "Could NOT revoke at Globus (deleted locally anyway): "
                + ", ".join(out["not_revoked"])
                + ". Revoke them at https://app.globus.org/account/consents."
            )
        print("Deleted the stored Globus tokens.")
    return 1 if out["not_revoked"] else 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "login",
        help="log in to Globus once, with your own identity, for Compute and Transfer",
        description="Log in to Globus (native app, PKCE): prints an address, opens it where a "
        "browser exists, and reads the code you paste. Asks once for identity, Globus Compute, "
        "and Globus Transfer with the data_access consent of every configured collection.",
    )
    p.add_argument(
        "--status",
        action="store_true",
        help="who is logged in, granted scopes, expiry (exit 1 if nobody)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--scope",
        action="append",
        default=[],
        metavar="SCOPE",
        help="an extra consent to ask for (as named by a fedhpc error hint)",
    )
    p.add_argument(
        "--domain",
        action="append",
        default=[],
        metavar="DOMAIN",
        help="log in through an identity in this domain (a site's requirement)",
    )
    p.add_argument("--mfa", action="store_true", help="log in with multi-factor authentication")
    p.add_argument(
        "--client-id",
        default=None,
        help="the native Globus client to log in with (else FEDHPC_GLOBUS_CLIENT_ID)",
    )
    p.add_argument("--no-browser", action="store_true", help="only print the address")
    p.set_defaults(func=_login)
    o = sub.add_parser("logout", help="revoke and delete the stored Globus tokens")
    o.add_argument("--json", action="store_true", help="machine-readable output")
    o.set_defaults(func=_logout)
