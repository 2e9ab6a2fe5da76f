"""The API reference (`make docs`): generated from the docstrings with pdoc, every link resolves."""

from __future__ import annotations

import html.parser
import pathlib
import re
import subprocess
import sys
import urllib.parse

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def _modules() -> list:
    """The modules the Makefile's `docs` target documents (one list, read from there)."""
    text = (REPO / "Makefile").read_text()
    match = re.search(r"^API_MODULES :=(.*?)(?<!\\)$", text, re.S | re.M)
    assert match, "the Makefile has no API_MODULES"
    return match.group(1).replace("\\", " ").split()


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list = []
        self.ids: set = set()

    def handle_starttag(self, tag, attrs):
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(values["id"])
        if tag == "a" and values.get("href"):
            self.hrefs.append(values["href"])


def _parse(path: pathlib.Path) -> _Links:
    links = _Links()
    links.feed(path.read_text())
    return links


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("api")
    result = subprocess.run([sys.executable, "-m", "pdoc", "--docformat", "google", "-o", str(out), *_modules()],
                            capture_output=True, text=True, timeout=300, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def test_the_reference_covers_the_public_api(reference):
    pages = {path.relative_to(reference).as_posix() for path in reference.rglob("*.html")}
    assert {f"{name.replace('.', '/')}.html" for name in _modules()} <= pages
    triton = _parse(reference / "pytriton" / "triton.html")
    for name in ("Triton", "Triton.bind", "Triton.serve", "Triton.run", "Triton.stop", "TritonConfig"):
        assert name in triton.ids, f"{name} is missing from the reference of pytriton.triton"
    client = _parse(reference / "pytriton" / "client.html")
    for name in ("ModelClient", "FuturesModelClient", "AsyncioModelClient", "DecoupledModelClient",
                 "AsyncioDecoupledModelClient"):
        assert name in client.ids, f"{name} is missing from the reference of pytriton.client"
    assert "ModelConfig" in _parse(reference / "pytriton" / "model_config.html").ids
    assert "batch" in _parse(reference / "pytriton" / "decorators.html").ids
    remote = _parse(reference / "pytriton" / "remote.html")
    assert "RemoteTriton" in remote.ids
    # What both facades share is documented once, on their base, and each facade's page links there.
    base_page = reference / "pytriton" / "facade" / "base.html"
    base = _parse(base_page)
    for name in ("bind", "bind_ensemble", "unbind", "run", "connect", "serve", "is_alive", "is_connected", "stop"):
        assert f"TritonBase.{name}" in base.ids, f"TritonBase.{name} is missing from the reference"
        for facade, page in (("Triton", triton), ("RemoteTriton", remote)):
            assert f"{facade}.{name}" in page.ids, f"{facade}.{name} is missing from the reference"
            assert any(href.endswith(f"#TritonBase.{name}") for href in page.hrefs), (facade, name)
        assert f"TritonBase.{name}" in triton.ids, "pytriton.triton documents TritonBase too, as it exports it"
    # bind's docstring rendered there (not only in the page's view of the source).
    assert re.search(r"<strong>infer_func:</strong>\s+a callable taking a list of requests", base_page.read_text())


def test_every_link_of_the_reference_resolves(reference):
    broken = []
    pages = {path: _parse(path) for path in reference.rglob("*.html")}
    for page, links in pages.items():
        for href in links.hrefs:
            parts = urllib.parse.urlsplit(href)
            if parts.scheme or href.startswith("//"):
                continue  # outside the reference (the project's home, Python's docs): not checked offline
            target = (page.parent / parts.path).resolve() if parts.path else page
            if target.suffix != ".html":
                continue
            if target not in pages:
                broken.append(f"{page.relative_to(reference)}: {href} (no such page)")
            elif parts.fragment and parts.fragment not in pages[target].ids:
                broken.append(f"{page.relative_to(reference)}: {href} (no such anchor)")
    assert broken == []
