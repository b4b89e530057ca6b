"""Hub ids as models: `org/name`, `org/name@revision` or a hub URL resolve to the
repository's config.json through huggingface_hub (a dependency, imported only here), never
the weights.

Offline first: the local cache is read first (try_to_load_from_cache: no request); only a
config.json not cached is fetched, with one metadata request that fails fast (no retries;
the library's own retry loop, up to a minute when the Hub cannot be reached, is never
entered) and then the download. Every failure, the library's and the network's, is one line
naming the repository, and the shipped preset that is the same model when there is one.

The environment is read at each call, as huggingface_hub documents it: HF_HUB_OFFLINE (cache
only), HF_HUB_CACHE or HF_HOME (the cache), HF_ENDPOINT (a mirror), HF_TOKEN (gated repos),
HF_HUB_ETAG_TIMEOUT (seconds per request, 10 by default).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

from transformer_calc.checkpoint import Checkpoint
from transformer_calc.errors import PresetError

# org/name[@revision]: the Hub's repository-id characters (huggingface_hub
# validate_repo_id: letters, digits, '-', '_', '.'; at most 96 each)
_ID = r"[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}"
_REF = re.compile(rf"^(?P<repo>{_ID})(?:@(?P<rev>[\w./-]{{1,200}}))?$")
_URL = re.compile(rf"^https?://(?:www\.)?(?:huggingface\.co|hf\.co)/(?P<repo>{_ID})"
                  r"(?:/(?:tree|blob|resolve)/(?P<rev>[\w.-]{1,200}))?/?$")


def parse(ref: str) -> tuple[str, str | None] | None:
    """(repo id, revision) when ``ref`` is a hub id or URL, else None."""
    m = _URL.match(ref) or _REF.match(ref)
    if not m or m.group("repo").endswith((".json", ".yaml", ".yml", ".gguf")):
        return None
    return m.group("repo"), m.group("rev")


def _offline() -> bool:
    # huggingface_hub's reading of the variable (constants._is_true)
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def _cache() -> str | None:
    env = os.environ
    return env.get("HF_HUB_CACHE") or (str(Path(env["HF_HOME"]) / "hub")
                                       if env.get("HF_HOME") else None)


def _endpoint() -> str | None:
    """HF_ENDPOINT, checked before huggingface_hub reads it (a malformed one makes its import
    fail)."""
    from urllib.parse import urlsplit

    from transformer_calc.errors import printable

    raw = os.environ.get("HF_ENDPOINT", "")
    if not raw:
        return None
    try:
        url = urlsplit(raw)
        ok = url.scheme in ("http", "https") and bool(url.hostname)
        url.port  # noqa: B018 -- raises ValueError for a port that is not a number
    except ValueError:
        ok = False
    if not ok:
        raise PresetError(f"HF_ENDPOINT: expected the Hub's URL (https://huggingface.co, or a "
                          f"mirror's http(s) URL), got {printable(raw, one_line=True)[:100]!r}")
    return raw.rstrip("/")


def _timeout() -> float:
    raw = os.environ.get("HF_HUB_ETAG_TIMEOUT", "")
    try:
        value = float(raw) if raw else 10.0
    except ValueError:
        value = -1.0
    if not 0 < value <= 600:
        raise PresetError(f"HF_HUB_ETAG_TIMEOUT: expected seconds (> 0, at most 600), got "
                          f"{raw[:40]!r}")
    return value


def _library(ref: str) -> Any:
    """huggingface_hub, quiet: no progress bars, no retry warnings on stderr."""
    _endpoint()
    try:
        import huggingface_hub
        from huggingface_hub.utils import disable_progress_bars, logging
    except ImportError:
        raise PresetError(f"{ref}: a Hub id needs huggingface_hub, which is not installed "
                          "(pip install huggingface_hub), or give a local config.json") \
            from None
    disable_progress_bars()
    logging.set_verbosity_error()
    return huggingface_hub


def preset_for(repo: str) -> str | None:
    """The shipped preset that is this repository's model: its source names the repository
    ("HF config org/name"), or its name is the repository's name."""
    from transformer_calc.presets import preset_dir

    wanted = re.compile(rf"HF config {re.escape(repo)}(?![\w.-])", re.IGNORECASE)
    name = repo.split("/")[-1].lower()
    by_name = None
    for path in sorted(preset_dir().glob("*.yaml")):
        try:
            head = path.read_text(encoding="utf-8")[:4096]
        except (OSError, UnicodeDecodeError):
            continue
        if wanted.search(head):
            return path.stem
        if path.stem == name:
            by_name = path.stem
    return by_name


def _error(ref: str, repo: str, why: str) -> PresetError:
    preset = preset_for(repo)
    hint = f"; the shipped preset {preset} is this model" if preset else ""
    return PresetError(f"{ref}: {why}{hint}")


def network_errors() -> tuple[type[BaseException], ...]:
    """What a request can raise besides huggingface_hub's own errors: OSError (requests'
    errors, before huggingface_hub 1.0), ValueError (a bad id or revision), and the HTTP
    client's errors (httpx from 1.0, httpx2 from 2.0), whichever the library imported."""
    found: list[type[BaseException]] = [OSError, ValueError]
    for name in ("httpx", "httpx2"):
        module = sys.modules.get(name)
        for cls in ("HTTPError", "InvalidURL", "StreamError", "CookieConflict"):
            error = getattr(module, cls, None) if module else None
            if isinstance(error, type) and issubclass(error, BaseException):
                found.append(error)
    return tuple(found)


def _why(e: BaseException, hub: Any, rev: str | None) -> str:
    """One line for a failed request."""
    errors = hub.errors
    gated = getattr(errors, "GatedRepoError", ())
    if gated and isinstance(e, gated):
        return "a gated repository: accept its terms on the Hub and set HF_TOKEN"
    if isinstance(e, errors.RepositoryNotFoundError):
        return "no such repository on the Hub (or private: set HF_TOKEN)"
    if isinstance(e, errors.RevisionNotFoundError):
        return f"no revision {rev!r} in that repository"
    if isinstance(e, errors.EntryNotFoundError) and not isinstance(
            e, getattr(errors, "LocalEntryNotFoundError", ())):
        return "the repository has no config.json"
    offline = getattr(errors, "OfflineModeIsEnabled", ())
    if offline and isinstance(e, offline):
        return "config.json is not in the local cache and HF_HUB_OFFLINE is set"
    text = " ".join(str(e).split())[:160] or type(e).__name__
    if isinstance(e, ValueError) and not isinstance(e, getattr(errors, "HfHubHTTPError", ())):
        return f"not a Hub id the Hub accepts ({text})"
    return f"config.json is not in the local cache and the Hub could not be reached ({text})"


def config_path(ref: str) -> Path:
    """The local path of the repository's config.json: the cached one, else downloaded
    when allowed."""
    parsed = parse(ref)
    if parsed is None:
        raise PresetError(f"{ref}: not a Hub id (org/name, org/name@revision or a Hub URL)")
    repo, rev = parsed
    hub = _library(ref)
    endpoint, timeout = _endpoint(), _timeout()
    cache, token = _cache(), os.environ.get("HF_TOKEN") or None
    try:
        cached = hub.try_to_load_from_cache(repo, "config.json", cache_dir=cache,
                                            revision=rev)
    except network_errors() as e:  # (a revision or id the cache layout cannot hold)
        raise _error(ref, repo, _why(e, hub, rev)) from None
    if isinstance(cached, str) and os.path.isfile(cached):
        return Path(cached)
    if _offline():
        raise _error(ref, repo, "config.json is not in the local cache and HF_HUB_OFFLINE is "
                                "set")
    try:
        # one request, no retries: a Hub that cannot be reached is said at once
        hub.get_hf_file_metadata(hub.hf_hub_url(repo, "config.json", revision=rev,
                                                endpoint=endpoint),
                                 token=token, timeout=timeout)
        return Path(hub.hf_hub_download(repo, "config.json", revision=rev, cache_dir=cache,
                                        endpoint=endpoint, token=token, etag_timeout=timeout))
    except (hub.errors.HfHubHTTPError, *network_errors()) as e:
        raise _error(ref, repo, _why(e, hub, rev)) from None


def checkpoint(ref: str) -> tuple[Checkpoint | None, str]:
    """(the checkpoint, "") from the repository's safetensors headers, read by HTTP range
    requests as huggingface_hub's get_safetensors_metadata does, never the weights, each
    validated as a local file's (checkpoint.tensor_size, check_ranges); or (None, why not)
    when offline, not a safetensors repository, or unreachable."""
    from array import array

    from transformer_calc.checkpoint import _Totals, check_ranges, tensor_size
    from transformer_calc.errors import TcalcError

    parsed = parse(ref)
    if parsed is None or _offline():
        return None, "offline: the checkpoint's headers were not read"
    repo, rev = parsed
    try:
        hub = _library(ref)
        api = hub.HfApi(endpoint=_endpoint())
    except PresetError as e:
        return None, str(e).removeprefix(f"{ref}: ")
    errors = hub.errors
    try:
        meta = api.get_safetensors_metadata(repo, revision=rev,
                                            token=os.environ.get("HF_TOKEN") or None)
    except errors.NotASafetensorsRepoError:
        return None, "the repository has no safetensors checkpoint"
    except (errors.SafetensorsParsingError, errors.HfHubHTTPError, *network_errors()) as e:
        return None, f"its safetensors headers could not be read: {' '.join(str(e).split())[:120]}"
    totals = _Totals()
    try:
        for file, info in sorted(meta.files_metadata.items()):
            where = f"{ref}: {file}"
            begins, ends = array("Q"), array("Q")
            for name, t in info.tensors.items():
                raw = {"dtype": t.dtype, "shape": list(t.shape),
                       "data_offsets": list(t.data_offsets)}
                dtype, n, begin, end = tensor_size(where, name, raw)
                totals.add(name, dtype, n, end - begin)
                begins.append(begin)
                ends.append(end)
            check_ranges(where, begins, ends, None)
    except TcalcError as e:
        return None, f"its safetensors headers are not valid: {e}"
    return totals.checkpoint(tuple(sorted(meta.files_metadata))), ""
