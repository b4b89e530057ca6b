"""Hub ids as models, with no network: a Hub cache laid out as huggingface_hub lays
it out, and a local HTTP server on 127.0.0.1 that answers the Hub's endpoints for the online
path (HF_ENDPOINT), bounded in requests and time."""

from __future__ import annotations

import hashlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import DATA

pytest.importorskip("huggingface_hub")

CONFIG = (DATA / "hf" / "llama-3.1-8b.json").read_bytes()
SHA = "0123456789abcdef0123456789abcdef01234567"
TINY = DATA / "checkpoints" / "tiny-llama"
# what the stand-in Hub serves: org/model (a config only), org/tiny (a config and a real
# safetensors file written by transformers: tools/make_checkpoint_fixtures.py)
FILES = {"/org/model/resolve/main/config.json": CONFIG,
         "/org/tiny/resolve/main/config.json": (TINY / "config.json").read_bytes(),
         "/org/tiny/resolve/main/model.safetensors": (TINY / "model.safetensors").read_bytes()}


def _cache(root: Path, repo: str = "meta-llama/Llama-3.1-8B") -> Path:
    """models--org--name/{refs/main, snapshots/<commit>/config.json}, as hf_hub_download
    leaves a cached file (huggingface_hub's cache layout)."""
    folder = root / ("models--" + repo.replace("/", "--"))
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(SHA)
    snap = folder / "snapshots" / SHA
    snap.mkdir(parents=True)
    (snap / "config.json").write_bytes(CONFIG)
    return root


@pytest.fixture
def env(monkeypatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    for key in ("HF_HUB_OFFLINE", "HF_HOME", "HF_ENDPOINT", "HF_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    return monkeypatch


def test_a_cached_hub_id_works_offline(env, tmp_path: Path, cli) -> None:
    _cache(tmp_path / "cache")
    env.setenv("HF_HUB_OFFLINE", "1")
    for ref in ("meta-llama/Llama-3.1-8B", "https://huggingface.co/meta-llama/Llama-3.1-8B",
                "https://huggingface.co/meta-llama/Llama-3.1-8B/tree/main"):
        assert cli.json("params", ref)["total_params"] == 8_030_261_248


def test_offline_and_not_cached_is_one_line(env, cli) -> None:
    env.setenv("HF_HUB_OFFLINE", "1")
    r = cli("params", "someone/not-cached", code=2)
    assert r.stderr == ("Error: someone/not-cached: config.json is not in the local cache and "
                        "HF_HUB_OFFLINE is set\n")


class _Hub(http.server.BaseHTTPRequestHandler):
    """The Hub's resolve endpoint for one config.json; gated and missing repos by name."""

    requests = 0

    def _answer(self, body: bool) -> None:
        type(self).requests += 1
        if type(self).requests > 50:  # bounded: a client looping would fail the test
            self.send_response(429)
            self.end_headers()
            return
        if "/gated/" in self.path:
            self.send_response(401)
            self.send_header("X-Error-Code", "GatedRepo")
            self.send_header("X-Error-Message", "Access to this model is restricted")
            self.end_headers()
            return
        path = self.path.split("?", 1)[0]
        data = FILES.get(path)
        if data is None:
            self.send_response(404)
            known = any(path.startswith(p.rsplit("/resolve/", 1)[0] + "/") for p in FILES)
            self.send_header("X-Error-Code", "EntryNotFound" if known else "RepoNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        start, end = 0, len(data) - 1
        ranged = self.headers.get("range", "")
        if ranged.startswith("bytes="):  # the header reads (get_safetensors_metadata)
            a, _, b = ranged[6:].partition("-")
            start, end = int(a), min(int(b), len(data) - 1)
        part = data[start:end + 1]
        self.send_response(206 if ranged else 200)
        self.send_header("Content-Length", str(len(part)))
        self.send_header("X-Repo-Commit", SHA)
        self.send_header("ETag", '"' + hashlib.sha256(data).hexdigest() + '"')
        if ranged:
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        self.end_headers()
        if body:
            self.wfile.write(part)

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
        self._answer(False)

    def do_GET(self) -> None:  # noqa: N802
        self._answer(True)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hub(env) -> Iterator[str]:  # type: ignore[no-untyped-def]
    # huggingface_hub reads HF_HUB_OFFLINE once, at import; a CLI run is a fresh process,
    # these tests share one, where an earlier offline test may have imported it
    import huggingface_hub.constants

    env.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    _Hub.requests = 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    env.setenv("HF_ENDPOINT", url)
    try:
        yield url
    finally:
        server.shutdown()


def test_online_fetches_config_json_only(hub: str, tmp_path: Path, cli) -> None:
    data = cli.json("params", "org/model")
    assert data["total_params"] == 8_030_261_248
    assert "checkpoint" not in data
    assert any("no safetensors checkpoint" in n for n in data["notes"])
    cached = list((tmp_path / "cache").rglob("config.json"))
    assert len(cached) == 1 and cached[0].read_bytes() == CONFIG
    assert _Hub.requests <= 6


def test_online_reads_the_remote_safetensors_headers_not_the_weights(hub: str, tmp_path: Path,
                                                                      cli) -> None:
    data = cli.json("params", "org/tiny")
    c = data["checkpoint"]
    assert c["matches"] is True and c["params"] == 69_952 and c["dtypes"] == {"BF16": 69_952}
    assert not list((tmp_path / "cache").rglob("*.safetensors"))  # headers by range only


@pytest.mark.parametrize(("ref", "message"), [
    ("gated/model", "a gated repository: accept its terms on the Hub and set HF_TOKEN"),
    ("org/missing", "no such repository on the Hub (or private: set HF_TOKEN)"),
])
def test_online_errors_are_one_line(hub: str, cli, ref: str, message: str) -> None:
    r = cli("params", ref, code=2)
    assert r.stderr == f"Error: {ref}: {message}\n"


def test_a_local_path_wins_over_a_hub_id(tmp_path: Path, cli, monkeypatch) -> None:
    folder = tmp_path / "org" / "model"
    folder.mkdir(parents=True)
    (folder / "config.json").write_bytes((DATA / "hf" / "gpt2.json").read_bytes())
    monkeypatch.chdir(tmp_path)
    assert cli.json("params", "org/model")["total_params"] == 124_439_808


def test_hub_ids_import_huggingface_hub_only_on_that_path() -> None:
    import subprocess
    import sys

    code = ("import sys; from transformer_calc.presets import load_model; load_model('gpt2'); "
            "print('huggingface_hub' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"


# -- offline first, every failure one line (the library's requests replaced: no network) -----

def _unreachable(*_: object, **__: object) -> None:
    """What huggingface_hub's HTTP client raises when the Hub cannot be reached (httpx2 from
    huggingface_hub 2.0, httpx from 1.0; requests' ConnectionError, an OSError, before)."""
    import sys

    client = sys.modules.get("httpx2") or sys.modules.get("httpx")
    if client is not None:
        raise client.ConnectError("[Errno -2] Name or service not known")
    raise OSError("[Errno -2] Name or service not known")


def test_a_cached_config_is_read_without_a_request(env, tmp_path: Path, cli) -> None:
    import huggingface_hub

    _cache(tmp_path / "cache")
    for name in ("get_hf_file_metadata", "hf_hub_download"):
        env.setattr(huggingface_hub, name, _unreachable)
    assert cli.json("params", "meta-llama/Llama-3.1-8B")["total_params"] == 8_030_261_248


def test_an_unreachable_hub_is_one_line_at_once(env, cli) -> None:
    import time

    import huggingface_hub

    downloads = []
    env.setattr(huggingface_hub, "get_hf_file_metadata", _unreachable)
    env.setattr(huggingface_hub, "hf_hub_download", lambda *a, **k: downloads.append(a))
    start = time.monotonic()
    r = cli("params", "meta-llama/Llama-3.1-8B", code=2)
    assert time.monotonic() - start < 5  # one request, no retries
    assert r.stderr == (
        "Error: meta-llama/Llama-3.1-8B: config.json is not in the local cache and the Hub "
        "could not be reached ([Errno -2] Name or service not known); the shipped preset "
        "llama-3.1-8b is this model\n")
    assert downloads == []  # (the library's download, with its retry loop, never entered)


def test_an_unreachable_hub_leaves_a_cached_model_counted(env, tmp_path: Path, cli) -> None:
    import huggingface_hub

    _cache(tmp_path / "cache")
    env.setattr(huggingface_hub.HfApi, "get_safetensors_metadata", _unreachable)
    data = cli.json("params", "meta-llama/Llama-3.1-8B")
    assert data["total_params"] == 8_030_261_248 and "checkpoint" not in data
    assert any("checkpoint: its safetensors headers could not be read: [Errno -2]" in n
               for n in data["notes"])


@pytest.mark.parametrize("endpoint", ["http://[::1", "htp:/bad url", "https://", "ftp://x",
                                      "http://host:port"])
def test_a_malformed_endpoint_is_one_line(env, cli, endpoint: str) -> None:
    env.setenv("HF_ENDPOINT", endpoint)
    r = cli("params", "org/model", code=2)
    assert r.stderr == (f"Error: HF_ENDPOINT: expected the Hub's URL (https://huggingface.co, "
                        f"or a mirror's http(s) URL), got {endpoint!r}\n")


def test_offline_names_the_matching_preset(env, cli) -> None:
    env.setenv("HF_HUB_OFFLINE", "1")
    for ref, preset in (("openai-community/gpt2", "gpt2"), ("Qwen/Qwen3-8B", "qwen3-8b"),
                        ("meta-llama/Llama-3.1-8B", "llama-3.1-8b")):
        r = cli("params", ref, code=2)
        assert r.stderr == (f"Error: {ref}: config.json is not in the local cache and "
                            f"HF_HUB_OFFLINE is set; the shipped preset {preset} is this "
                            "model\n")
    r = cli("params", "a--b/c", code=2)
    assert r.stderr.startswith("Error: a--b/c: not a Hub id the Hub accepts (")


def test_check_takes_hub_ids(env, tmp_path: Path, cli) -> None:
    _cache(tmp_path / "cache")
    env.setenv("HF_HUB_OFFLINE", "1")
    r = cli("check", "meta-llama/Llama-3.1-8B", "someone/not-cached", "configs/gpt2.yaml",
            code=1)
    assert r.stdout.splitlines() == [
        "ok    meta-llama/Llama-3.1-8B: Llama-3.1-8B, 8,030,261,248 parameters",
        "FAIL  someone/not-cached: config.json is not in the local cache and HF_HUB_OFFLINE "
        "is set",
        "ok    configs/gpt2.yaml: gpt2, 124,439,808 parameters = expected_params",
        "3 files checked: 2 ok, 1 failed"]


def test_huggingface_hub_is_a_dependency() -> None:
    import re

    from conftest import ROOT

    line = re.search(r"^dependencies = \[(.*)\]$", (ROOT / "pyproject.toml").read_text(),
                     re.MULTILINE)
    assert line is not None and '"huggingface_hub>=' in line.group(1)
