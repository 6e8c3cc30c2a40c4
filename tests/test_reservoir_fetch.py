"""gravpipe fetch from gravpipe serve and from nginx on 127.0.0.1: whole and verified files,
resume without re-sending verified chunks, and the faults of issue 47."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from aiohttp import web

from gravpipe.cli import main
from gravpipe.reservoir import fetch, manifest, serve
from reservoir_support import SMALL_CHUNK, TOKEN, ThreadServer, free_port, make_run, start_serve, token_file


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("fetch") / "run")


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return token_file(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def server(run):
    s = ThreadServer(serve.make_app(run, TOKEN))
    yield s
    s.close()


def final_names(dest: Path) -> list[str]:
    return sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()
                  and not p.relative_to(dest).as_posix().startswith(fetch.PARTIAL))


def test_fetch_a_run_folder_from_gravpipe_serve(run, tok, tmp_path, capsys):
    proc, port = start_serve(run, tok)
    try:
        dest = tmp_path / "copy"
        assert main(["fetch", f"http://127.0.0.1:{port}/", str(dest), "--token-file", str(tok), "--streams", "3",
                     "--json", str(tmp_path / "r.json"), "--no-progress"]) == 0
        # a second fetch finds every file in place and asks for no chunk
        again = fetch.fetch(f"http://127.0.0.1:{port}", dest, token_file=str(tok))
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(10)
    assert "verified" in capsys.readouterr().out
    assert manifest.verify(dest)[0] == len(manifest.load(run).files)
    assert final_names(dest) == sorted([*manifest.load(run).files, "manifest.json"])
    import json

    report = json.loads((tmp_path / "r.json").read_text())
    assert report["streams"] == 3 and len(report["per_stream"]) == 3 and report["bytes"] == manifest.load(run).total_bytes
    assert again["bytes_transferred"] == 0 and again["bytes_reused"] == report["bytes"]


def test_a_wrong_token_fails_the_fetch_in_one_line(server, tmp_path, capsys):
    (tmp_path / "bad").write_text("not-the-token-at-all\n")
    assert main(["fetch", server.url, str(tmp_path / "d"), "--token-file", str(tmp_path / "bad"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "bearer token" in err


def test_resume_after_a_killed_fetch_resends_no_verified_chunk(run, server, tok, tmp_path):
    dest = tmp_path / "d"
    total = manifest.load(run).total_bytes
    before = server.stats["bytes"]
    # paced to ~300 kB/s: about 1.2 MB takes ~4 s; killed after ~1.5 s
    p = subprocess.Popen([sys.executable, "-m", "gravpipe.cli", "fetch", server.url, str(dest), "--token-file",
                          str(tok), "--rate", "300k", "--streams", "2", "--no-progress"])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and server.stats["bytes"] - before < 300_000:
        time.sleep(0.05)
    p.kill()
    p.wait(10)
    assert (dest / fetch.PARTIAL).is_dir()
    first = server.stats["bytes"] - before - len((run / "manifest.json").read_bytes())
    mid = server.stats["bytes"]
    report = fetch.fetch(server.url, dest, token_file=str(tok), streams=2)
    resent = server.stats["bytes"] - mid - len((run / "manifest.json").read_bytes())
    assert report["bytes_reused"] > 0 and report["bytes_transferred"] + report["bytes_reused"] == total
    assert resent == report["bytes_transferred"]
    # chunks in flight when killed are the only bytes sent twice: at most two chunks per
    # stream (one arriving, one being hashed and written), 2 streams
    assert first + resent <= total + 2 * 2 * SMALL_CHUNK
    manifest.verify(dest)
    assert not (dest / fetch.PARTIAL).exists()


def test_a_file_changed_after_its_manifest_entry_fails_naming_it(run, tok, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(run, src)
    data = bytearray((src / "extra.bin").read_bytes())
    data[SMALL_CHUNK * 5 + 7] ^= 0xFF
    (src / "extra.bin").write_bytes(bytes(data))
    s = ThreadServer(serve.make_app(src, TOKEN))
    try:
        with pytest.raises(fetch.FetchError, match=r"extra\.bin: chunk 5 .* does not match the manifest"):
            fetch.fetch(s.url, tmp_path / "d", token_file=str(tok), streams=2)
    finally:
        s.close()
    assert not (tmp_path / "d" / "extra.bin").exists() and not (tmp_path / "d" / "manifest.json").exists()


def test_a_connection_dropped_mid_chunk_is_retried(run, tok, tmp_path):
    inner = serve.make_app(run, TOKEN)
    handler = next(iter(inner.router.routes())).handler  # gravpipe serve's own handler
    drops = {"n": 0}

    async def dropping(request: web.Request):
        if request.path.endswith("extra.bin") and drops["n"] < 3:
            drops["n"] += 1
            resp = web.StreamResponse(status=206, headers={"Content-Range": f"bytes 0-{SMALL_CHUNK - 1}/1",
                                                           "Content-Length": str(SMALL_CHUNK)})
            await resp.prepare(request)
            await resp.write(b"x" * 1000)
            request.transport.close()
            return resp
        return await handler(request)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", dropping)
    app[serve.STATS] = inner[serve.STATS]
    s = ThreadServer(app)
    try:
        report = fetch.fetch(s.url, tmp_path / "d", token_file=str(tok), streams=2)
    finally:
        s.close()
    assert drops["n"] == 3 and report["retries"] >= 3
    manifest.verify(tmp_path / "d")


def test_the_server_killed_and_restarted_mid_fetch(run, tok, tmp_path):
    port = free_port()
    proc, _ = start_serve(run, tok, port)
    out: dict = {}

    def go():
        try:
            out["report"] = fetch.fetch(f"http://127.0.0.1:{port}", tmp_path / "d", token_file=str(tok),
                                        streams=2, rate=400_000)
        except Exception as exc:  # noqa: BLE001 - reported below
            out["error"] = exc

    t = threading.Thread(target=go)
    t.start()
    time.sleep(1.0)
    proc.kill()
    proc.wait(10)
    time.sleep(0.5)
    proc, _ = start_serve(run, tok, port)
    try:
        t.join(60)
    finally:
        proc.kill()
        proc.wait(10)
    assert "error" not in out, out.get("error")
    assert out["report"]["retries"] >= 1
    manifest.verify(tmp_path / "d")


def test_a_full_destination_is_refused_before_the_first_byte(server, tok, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10 ** 9, 10 ** 9, 1000))
    assert main(["fetch", server.url, str(tmp_path / "d"), "--token-file", str(tok), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "free" in err and not (tmp_path / "d" / "extra.bin").exists()


NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)


@pytest.mark.skipif(NGINX is None, reason="nginx is not installed (Debian package nginx; .ci/run installs it)")
def test_fetch_from_nginx(run, tmp_path):
    port = free_port()
    conf = tmp_path / "nginx.conf"
    import getpass  # the workers read the test's folders (nginx's default user cannot)

    conf.write_text(f"""daemon off; worker_processes 1; user {getpass.getuser()}; pid {tmp_path}/nginx.pid; error_log {tmp_path}/error.log;
events {{ worker_connections 64; }}
http {{ access_log off; client_body_temp_path {tmp_path}/tmp; proxy_temp_path {tmp_path}/tmp;
  fastcgi_temp_path {tmp_path}/tmp; uwsgi_temp_path {tmp_path}/tmp; scgi_temp_path {tmp_path}/tmp;
  server {{ listen 127.0.0.1:{port}; root {run}; autoindex off; }} }}
""")
    p = subprocess.Popen([NGINX, "-c", str(conf), "-p", str(tmp_path)], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        import socket

        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        report = fetch.fetch(f"http://127.0.0.1:{port}/", tmp_path / "d", streams=4)
    finally:
        p.terminate()
        p.wait(10)
    assert report["bytes"] == manifest.load(run).total_bytes
    manifest.verify(tmp_path / "d")


@pytest.mark.parametrize("length", [True, False], ids=["content-length", "chunked"])
def test_a_manifest_delivered_in_small_delayed_pieces(run, tok, tmp_path, length):
    """A slow or shaped link hands the manifest over in pieces: fetch reads it to its end
    (with and without Content-Length) before parsing it."""
    import asyncio

    inner = serve.make_app(run, TOKEN)
    handler = next(iter(inner.router.routes())).handler
    text = (run / "manifest.json").read_bytes()
    sent = {"pieces": 0}

    async def trickling(request: web.Request):
        if request.path != "/manifest.json":
            return await handler(request)
        headers = {"Content-Type": "application/json"}
        if length:
            headers["Content-Length"] = str(len(text))
        resp = web.StreamResponse(status=200, headers=headers)
        if not length:
            resp.enable_chunked_encoding()
        await resp.prepare(request)
        for i in range(0, len(text), 97):
            await resp.write(text[i:i + 97])
            sent["pieces"] += 1
            if i % (97 * 8) == 0:
                await asyncio.sleep(0.002)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", trickling)
    app[serve.STATS] = inner[serve.STATS]
    s = ThreadServer(app)
    try:
        report = fetch.fetch(s.url, tmp_path / "d", token_file=str(tok), streams=2)
    finally:
        s.close()
    assert sent["pieces"] > 10 and report["retries"] == 0
    assert (tmp_path / "d" / "manifest.json").read_bytes() == text
    manifest.verify(tmp_path / "d")


def test_each_stream_holds_at_most_two_chunks(run, server, tok, tmp_path, monkeypatch):
    """Pipelined streams: the next chunk arrives while the last is hashed and written, but a
    stream never holds more than two (one arriving, one being stored), even when storing is
    slower than the link."""
    held = {"now": 0, "most": 0}
    lock = threading.Lock()
    receive, store = fetch.Fetcher._receive, fetch.Fetcher._store

    async def counted_receive(self, *a, **kw):
        data = await receive(self, *a, **kw)
        with lock:
            held["now"] += 1
            held["most"] = max(held["most"], held["now"])
        return data

    def slow_store(f, k, offset, data):
        time.sleep(0.01)
        try:
            store(f, k, offset, data)
        finally:
            with lock:
                held["now"] -= 1

    monkeypatch.setattr(fetch.Fetcher, "_receive", counted_receive)
    monkeypatch.setattr(fetch.Fetcher, "_store", staticmethod(slow_store))
    fetch.fetch(server.url, tmp_path / "d", token_file=str(tok), streams=3)
    manifest.verify(tmp_path / "d")
    assert 3 < held["most"] <= 2 * 3 and held["now"] == 0
