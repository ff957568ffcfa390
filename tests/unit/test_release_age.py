"""A dependency taken from far back (``harness/install/release_age.py``): release dates read from an index's JSON API
(a real HTTP server on loopback serving PEP 691 pages), the files that install on the target's Python, the two-year
line, and what forced the old release."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from packaging.version import Version

from harness.install.distributions import installed
from harness.install.release_age import Release, ancient_releases, behind, forced_by, releases
from tests.fake_index import installed_distribution

PYTHON = "3.11.7"
PAGES = {
    "oldlib": [
        ("oldlib-0.9.tar.gz", "2019-03-01T00:00:00Z", None),
        ("oldlib-1.0-py3-none-any.whl", "2019-05-01T00:00:00Z", None),
        ("oldlib-2.0-py3-none-any.whl", "2024-01-01T00:00:00Z", None),
        ("oldlib-3.0-py3-none-any.whl", "2026-06-01T00:00:00Z", ">=3.12"),
        ("oldlib-3.0-cp312-cp312-manylinux_2_28_x86_64.whl", "2026-06-01T00:00:00Z", None),
        ("oldlib-4.0rc1-py3-none-any.whl", "2026-11-01T00:00:00Z", None),
    ],
    "freshlib": [("freshlib-1.0-py3-none-any.whl", "2025-01-01T00:00:00Z", None)],
}


class _Index(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        name = self.path.strip("/").split("/")[-1]
        if name == "broken":
            self.send_error(500)
            return
        if name not in PAGES:
            self.send_error(404)
            return
        files = [
            {"filename": f, "upload-time": t, "requires-python": r, "yanked": False, "url": f"/{f}", "hashes": {}}
            for f, t, r in PAGES[name]
        ]
        body = json.dumps({"meta": {"api-version": "1.1"}, "name": name, "files": files}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture(scope="module")
def index() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Index)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    server.shutdown()


def test_only_files_that_install_on_the_targets_python_count_and_each_release_is_dated_by_its_first_upload(
    index: str,
) -> None:
    found = releases("oldlib", PYTHON, index)
    assert sorted(found) == [Version("0.9"), Version("1.0"), Version("2.0"), Version("4.0rc1")]
    assert found[Version("1.0")].uploaded == datetime(2019, 5, 1, tzinfo=UTC)
    assert releases("oldlib", "3.12.1", index).keys() >= {Version("3.0")}
    assert releases("nosuchproject", PYTHON, index) == {}


def test_more_than_two_years_behind_the_newest_stable_release_is_old_and_less_is_not() -> None:
    day = datetime(2020, 1, 1, tzinfo=UTC)
    found = {
        Version("1.0"): Release(Version("1.0"), day),
        Version("2.0"): Release(Version("2.0"), day + timedelta(days=700)),
        Version("3.0a1"): Release(Version("3.0a1"), day + timedelta(days=2000)),
    }
    assert behind("1.0", found) is None
    found[Version("2.1")] = Release(Version("2.1"), day + timedelta(days=731))
    old = behind("1.0", found)
    assert old is not None and old[1].version == Version("2.1")
    assert behind("2.0", found) is None
    assert behind("0.5", found) is None


def test_what_forced_an_old_release_is_the_requirement_that_excludes_the_newest(tmp_path: Path) -> None:
    installed_distribution(tmp_path, "needsold", "1.0", requires=("oldlib<2", 'oldlib<1.5; python_version < "3"'))
    distributions = installed(tmp_path)
    assert forced_by("oldlib", Version("2.0"), distributions, ["oldlib!=2.0", "other"], "3.11") == [
        "needsold 1.0 (`oldlib<2`)",
        "the install's `oldlib!=2.0`",
    ]
    assert forced_by("oldlib", Version("1.0"), distributions, [], "3.11") == []


def test_the_finding_names_the_old_release_the_newest_and_the_cause_and_unread_dates_are_said(
    index: str, tmp_path: Path
) -> None:
    chosen = {"oldlib": "1.0", "freshlib": "1.0", "broken": "1.0", "localonly": "0.1"}
    lines = ancient_releases(chosen, installed(tmp_path), ["oldlib<1.5"], "3.11", PYTHON, index)
    assert lines == [
        "oldlib 1.0 (2019-05-01) is 4.7 years behind oldlib 2.0 (2024-01-01), the newest for Python 3.11: forced "
        "by the install's `oldlib<1.5`",
        f"the release dates of broken could not be read from {index}: their age is not checked",
    ]
