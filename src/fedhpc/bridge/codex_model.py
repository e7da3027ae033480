"""`fedhpc deliveries check` for Codex's model: the model and provider a resumed `codex exec`
would use (its config.toml, with the selected profile), whether Codex knows the model name,
and whether the provider's endpoint answers. No model request is made: the endpoint is asked
for its model list (`GET <base_url>/models`, with the provider's key when the resume has it).

A model name Codex does not know is not fatal (gateways and custom providers name their own
models), but Codex then prints "Model metadata for `<name>` not found" before every turn and
runs with fallback metadata: the check says so. An endpoint that does not answer, or refuses
the key, makes every resume fail: the check fails."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

__all__ = ["CHATGPT_BASE_URL", "OPENAI_BASE_URL", "ModelReport", "check_model", "model_settings"]

OPENAI_BASE_URL = "https://api.openai.com/v1"
CHATGPT_BASE_URL = "https://chatgpt.com/backend-api/codex"  # Codex signed in with ChatGPT
API_KEY = "OPENAI_API_KEY"
_TIMEOUT_S = 10.0
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass
class ModelReport:
    """What was found: `fixes` fail the check, `notes` only inform."""

    model: str | None
    provider: str
    base_url: str
    fixes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def model_settings(config: dict[str, Any]) -> tuple[str | None, str, dict[str, Any]]:
    """(model, provider id, provider table) from Codex's config, its `profile` applied."""
    chosen = dict(config)
    profile = config.get("profile")
    profiles = config.get("profiles")
    if isinstance(profile, str) and isinstance(profiles, dict):
        picked = profiles.get(profile)
        if isinstance(picked, dict):
            chosen.update(picked)
    model = chosen.get("model")
    provider = str(chosen.get("model_provider") or "openai")
    providers = config.get("model_providers")
    table = providers.get(provider) if isinstance(providers, dict) else None
    return (str(model) if model else None), provider, (table if isinstance(table, dict) else {})


def _known_models(exe: str, env: dict[str, str]) -> list[str] | None:
    """The model names in Codex's catalog (`codex debug models`), or None when it cannot say."""
    try:
        out = subprocess.run(
            [exe, "debug", "models"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        models = json.loads(out.stdout).get("models") if out.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, AttributeError):
        return None
    if not isinstance(models, list):
        return None
    return [str(m.get("slug")) for m in models if isinstance(m, dict) and m.get("slug")]


def _opener(url: str, env: dict[str, str]) -> urllib.request.OpenerDirector:
    """Direct to loopback; elsewhere through the resume environment's proxy, if it has one."""
    host = urlsplit(url).hostname or ""
    proxies: dict[str, str] = {}
    if host not in _LOOPBACK:
        for scheme in ("http", "https"):
            found = env.get(f"{scheme}_proxy") or env.get(f"{scheme.upper()}_PROXY")
            if found:
                proxies[scheme] = found
    return urllib.request.build_opener(urllib.request.ProxyHandler(proxies))


def _listed(body: bytes) -> list[str] | None:
    """The model ids an OpenAI-style list names (`data[].id`, or `models[].slug|id`)."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    rows = doc.get("data") or doc.get("models") or []
    if not isinstance(rows, list):
        return None
    names = [str(r.get("id") or r.get("slug") or "") for r in rows if isinstance(r, dict)]
    return [n for n in names if n] or None


def _ask_endpoint(report: ModelReport, key: str | None, env: dict[str, str], where: str) -> None:
    url = report.base_url.rstrip("/") + "/models"
    if urlsplit(url).scheme not in ("http", "https"):
        report.fixes.append(f"the model base_url {report.base_url} is not http(s): fix {where}")
        return
    request = urllib.request.Request(url, method="GET")  # noqa: S310 (http(s) only, above)
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with _opener(url, env).open(request, timeout=_TIMEOUT_S) as answer:
            listed = _listed(answer.read(1_000_000))
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403) and key:  # keyless: a login, checked apart
            report.fixes.append(
                f"the model endpoint {report.base_url} (provider {report.provider}) refused "
                f"the resume's key (HTTP {exc.code}): set a valid key in [resume.codex] env_file"
            )
        return  # it answered: reachable (a gateway may serve no model list)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        why = getattr(exc, "reason", exc)
        report.fixes.append(
            f"the model endpoint {report.base_url} (provider {report.provider}) cannot be "
            f"reached from a resume ({why}): every resume would be stopped at "
            f"FEDHPC_RESUME_START_TIMEOUT_S. Fix base_url in {where}, or the network or "
            "proxy (HTTPS_PROXY) in [resume.codex] env"
        )
        return
    if report.model and listed and report.model not in listed:
        report.fixes.append(
            f"the model endpoint {report.base_url} does not serve the model `{report.model}` "
            f"(it lists {', '.join(listed[:8])}{', ...' if len(listed) > 8 else ''}): "
            f"set `model` in {where}"
        )


def _chatgpt_login(codex_home: Path) -> bool:
    """Codex is signed in with ChatGPT (`codex login`): its auth.json holds `tokens` and no
    API key. Its model requests then go to the ChatGPT backend, not the platform API."""
    try:
        auth = json.loads((codex_home / "auth.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(auth, dict) and isinstance(auth.get("tokens"), dict) and not auth.get(API_KEY)


def check_model(
    exe: str, env: dict[str, str], config: dict[str, Any], where: str, codex_home: Path
) -> ModelReport:
    """Codex's model and endpoint as a resume would use them (`where`: the config's path)."""
    model, provider, table = model_settings(config)
    base_url = str(table.get("base_url") or env.get("OPENAI_BASE_URL") or OPENAI_BASE_URL)
    chatgpt = (
        provider == "openai" and not table.get("base_url") and not env.get(API_KEY)
    ) and _chatgpt_login(codex_home)
    if chatgpt:
        base_url = str(config.get("chatgpt_base_url") or CHATGPT_BASE_URL)
    report = ModelReport(model, provider, base_url)
    if chatgpt:
        report.notes.append(
            f"Codex is signed in with ChatGPT: resumes use {base_url}, which this check found "
            "reachable or not (below); the login itself is Codex's to refresh: if a resume "
            "says it expired, run `codex login` as the daemon's user"
        )
    if model:
        known = _known_models(exe, env)
        if known is not None and model not in known:
            report.notes.append(
                f'Codex does not know the model `{model}`: it prints "Model metadata for '
                f'`{model}` not found" before each resumed turn and uses fallback metadata '
                f"(fine for a gateway's own model names; otherwise fix `model` in {where})"
            )
    key_var = str(table.get("env_key") or (API_KEY if provider == "openai" else ""))
    _ask_endpoint(report, env.get(key_var) if key_var else None, env, where)
    return report
