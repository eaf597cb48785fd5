"""A grammar sent by a client is text or a shipped grammar's name, never a file path.

No response may quote a file's contents or tell whether a path exists (issue 11, item 1).
"""

from __future__ import annotations

import os

import httpx
import pytest

from tests.server.conftest import AUTH, MODEL_NAME, assert_still_serving, error_of

PATHS = ["/etc/passwd", "/proc/self/environ", "../../etc/passwd", "/etc/hostname",
         "/no/such/file", os.path.abspath(__file__)]
FIELDS = {
    "guided_grammar": lambda g: {"guided_grammar": g},
    "structured_outputs.grammar": lambda g: {"structured_outputs": {"grammar": g}},
}


def _post(server, body: dict, chat: bool = False) -> httpx.Response:
    if chat:
        return httpx.post(server.base_url + "/v1/chat/completions", headers=AUTH, timeout=30,
                          json={"model": MODEL_NAME, "max_tokens": 4,
                                "messages": [{"role": "user", "content": "hi"}], **body})
    return httpx.post(server.base_url + "/v1/completions", headers=AUTH, timeout=30,
                      json={"model": MODEL_NAME, "prompt": "Hi", "max_tokens": 4, **body})


def _messages(paths: list[str]) -> list[str]:
    return [r.json()["error"]["message"] for r in paths]


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("path", PATHS)
def test_grammar_path_is_refused_without_reading_it(server, field, path):
    r = _post(server, FIELDS[field](path))
    assert r.status_code == 400
    error = error_of(r)
    assert error["param"] == field and "grammar" in error["message"]
    assert "root:" not in error["message"]  # /etc/passwd's first line
    assert "PATH=" not in error["message"] and "import" not in error["message"]
    assert_still_serving(server)


def test_existing_and_missing_paths_get_the_same_answer(server):
    """The message depends on the string only: no oracle for which files exist."""
    def answer(path: str) -> str:
        return _post(server, {"guided_grammar": path}).json()["error"]["message"].replace(
            path, "<path>")

    assert answer("/etc/passwd") == answer("/etc/no-such-file-here")
    assert answer("/etc/hostname.lark") == answer("/etc/missing.lark")


def test_path_with_a_colon_is_grammar_text_not_a_file(server, tmp_path):
    """One line with ':' is grammar text: its Lark error, never the file's contents."""
    secret = tmp_path / "a:b.lark"
    secret.write_text('start: "TOPSECRET"\n')
    r = _post(server, {"guided_grammar": str(secret)})
    assert r.status_code == 400
    assert "TOPSECRET" not in r.text
    assert_still_serving(server)


def test_relative_import_is_refused(server):
    r = _post(server, {"guided_grammar": 'start: x\n%import .secret.x\n'})
    assert r.status_code == 400 and "%import" in error_of(r)["message"]


def test_response_format_grammar_is_refused(server):
    r = _post(server, {"response_format": {"type": "grammar", "grammar": "/etc/passwd"}},
              chat=True)
    assert r.status_code == 400 and "root:" not in r.text
    assert error_of(r)["param"] == "response_format"


@pytest.mark.parametrize("name", ["json.lark", "json", "arithmetic"])
def test_shipped_grammar_names_still_work(server, name):
    r = _post(server, {"guided_grammar": name, "max_tokens": 3})
    assert r.status_code == 200, r.text
