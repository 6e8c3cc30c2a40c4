"""gravpipe serve: token, confinement to its folder, no listings, ranges (faults of issue 47)."""

from __future__ import annotations

import http.client
import os

import pytest

from gravpipe.reservoir import serve
from reservoir_support import TOKEN, ThreadServer


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("serve")
    root = base / "root"
    (root / "sub").mkdir(parents=True)
    (root / "manifest.json").write_text("{}")
    (root / "data.bin").write_bytes(bytes(range(256)) * 40)
    (root / ".token").write_text(TOKEN)
    (base / "secret.txt").write_text("SECRET-CONTENT")
    os.symlink(base / "secret.txt", root / "escape.txt")
    os.symlink(base, root / "up")
    os.symlink(root / "data.bin", root / "inside.bin")  # a link that stays inside is fine
    s = ThreadServer(serve.make_app(root, TOKEN, max_connections=4))
    yield s
    s.close()


def get(server, path: str, token: str | None = TOKEN, **headers):
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    c.request("GET", path, headers=headers)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, dict(r.getheaders()), body


@pytest.mark.parametrize("token", [None, "", "wrong-token-wrong-token", TOKEN + "x", TOKEN[:-1]])
def test_a_wrong_or_missing_token_is_refused(server, token):
    status, headers, _ = get(server, "/data.bin", token)
    assert status == 401 and "Bearer" in headers["WWW-Authenticate"]


@pytest.mark.parametrize("path, status", [
    ("/../secret.txt", 400), ("/sub/../../secret.txt", 400), ("/%2e%2e/secret.txt", 400),
    ("/%2E%2E%2Fsecret.txt", 400), ("/sub%2f..%2f..%2fsecret.txt", 400), ("/..%5csecret.txt", 400),
    ("//etc/passwd", 400), ("/escape.txt", 403), ("/up/secret.txt", 403), ("/etc/passwd", 404),
    ("/", 404), ("/sub/", 404), ("/sub", 404), ("/.token", 404), ("/missing", 404),
])
def test_nothing_outside_the_folder_and_no_listing(server, path, status):
    code, _, body = get(server, path)
    assert code == status, body
    assert b"SECRET-CONTENT" not in body and TOKEN.encode() not in body


def test_ranges_and_the_manifest(server):
    assert get(server, "/manifest.json")[0] == 200
    status, headers, body = get(server, "/data.bin", Range="bytes=300-309")
    assert status == 206 and headers["Content-Range"] == "bytes 300-309/10240"
    assert body == bytes(range(44, 54))
    assert get(server, "/inside.bin", Range="bytes=0-0")[2] == b"\x00"
    assert get(server, "/data.bin", Range="bytes=0-1,5-6")[0] == 416  # one range a request
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    c.request("PUT", "/data.bin", body=b"x", headers={"Authorization": f"Bearer {TOKEN}"})
    assert c.getresponse().status in (405, 413)


def test_a_short_token_file_is_refused(tmp_path):
    (tmp_path / "t").write_text("short\n")
    with pytest.raises(ValueError, match="at least 16 characters"):
        serve.read_token(tmp_path / "t")
