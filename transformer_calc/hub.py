"""Hub ids as models (issue 17): `org/name`, `org/name@revision` or a hub URL resolve to the
repository's config.json through huggingface_hub, from its cache first, online when allowed;
never the weights. huggingface_hub is imported only here (tcalc's optional hub extra).

The environment is read at each call, as huggingface_hub documents it: HF_HUB_OFFLINE (cache
only), HF_HUB_CACHE or HF_HOME (the cache), HF_ENDPOINT (a mirror), HF_TOKEN (gated repos).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

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
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _cache() -> str | None:
    env = os.environ
    return env.get("HF_HUB_CACHE") or (str(Path(env["HF_HOME"]) / "hub")
                                       if env.get("HF_HOME") else None)


def config_path(ref: str) -> Path:
    """The local path of the repository's config.json (downloaded if not cached and allowed)."""
    parsed = parse(ref)
    assert parsed is not None
    repo, rev = parsed
    try:
        from huggingface_hub import errors as hf_errors
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise PresetError(f"{ref}: a Hub id needs huggingface_hub (tcalc's hub extra: pip "
                          "install '.[hub]' in its checkout), or give a local config.json") \
            from None
    offline = _offline()
    try:
        return Path(hf_hub_download(repo, "config.json", revision=rev, etag_timeout=10,
                                    local_files_only=offline, cache_dir=_cache(),
                                    endpoint=os.environ.get("HF_ENDPOINT") or None,
                                    token=os.environ.get("HF_TOKEN") or None))
    except hf_errors.GatedRepoError:
        raise PresetError(f"{ref}: a gated repository: accept its terms on the Hub and set "
                          "HF_TOKEN") from None
    except hf_errors.RepositoryNotFoundError:
        raise PresetError(f"{ref}: no such repository on the Hub (or private: set "
                          "HF_TOKEN)") from None
    except hf_errors.RevisionNotFoundError:
        raise PresetError(f"{ref}: no revision {rev!r} in that repository") from None
    except hf_errors.LocalEntryNotFoundError:  # (a subclass of EntryNotFoundError)
        why = ("HF_HUB_OFFLINE is set" if offline else
               "the Hub could not be reached")
        raise PresetError(f"{ref}: config.json is not in the local cache and {why}") from None
    except hf_errors.EntryNotFoundError:
        raise PresetError(f"{ref}: the repository has no config.json") from None
    except (OSError, ValueError) as e:  # network errors, a bad revision string
        raise PresetError(f"{ref}: cannot fetch config.json: {str(e)[:200]}") from None


def checkpoint(ref: str) -> tuple[Checkpoint | None, str]:
    """(the checkpoint, "") from the repository's safetensors headers, read by HTTP range
    requests as huggingface_hub's get_safetensors_metadata does, never the weights; or
    (None, why not) when offline, not a safetensors repository, or unreachable."""
    parsed = parse(ref)
    if parsed is None or _offline():
        return None, "offline: the checkpoint's headers were not read"
    repo, rev = parsed
    try:
        from huggingface_hub import HfApi
        from huggingface_hub import errors as hf_errors
    except ImportError:
        return None, "huggingface_hub is not installed"
    api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None)
    try:
        meta = api.get_safetensors_metadata(repo, revision=rev,
                                            token=os.environ.get("HF_TOKEN") or None)
    except hf_errors.NotASafetensorsRepoError:
        return None, "the repository has no safetensors checkpoint"
    except (hf_errors.SafetensorsParsingError, OSError, ValueError) as e:
        return None, f"its safetensors headers could not be read: {str(e)[:120]}"
    dtypes: dict[str, int] = {}
    tensors: dict[str, int] = {}
    nbytes = 0
    for info in meta.files_metadata.values():
        for name, t in info.tensors.items():
            n = 1
            for d in t.shape:
                n *= d
            tensors[name] = n
            dtypes[t.dtype] = dtypes.get(t.dtype, 0) + n
            nbytes += t.data_offsets[1] - t.data_offsets[0]
    return Checkpoint(tuple(sorted(meta.files_metadata)), sum(tensors.values()), nbytes,
                      dtypes, tensors), ""
