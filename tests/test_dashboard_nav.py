"""The dashboard's pages switch to one another through `state.go`, which reads the page registry
that `app.py` keeps in the session: a page never imports `nav.py` (which imports every page)."""

from __future__ import annotations

from pathlib import Path

import pytest

# app.py's main() as it registers the pages, with a button that goes where the runs page's buttons go.
SCRIPT = """
import streamlit as st
from tpu_perf.dashboard import nav, state
pages = nav.pages()
st.session_state[state.PAGES] = pages
page = st.navigation(list(pages.values()))
if st.button("go", key="go"):
    state.go("compare", runs="nosuchrun,other")
page.run()
"""


def test_a_page_switches_to_another_with_its_query(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("TPU_PERF_STORE", str(tmp_path / "store"))
    monkeypatch.setenv("TPU_PERF_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "store").mkdir()
    at = AppTest.from_string(SCRIPT, default_timeout=60).run()
    assert not at.exception
    assert any("0 run(s)" in c.value for c in at.caption)  # the default page: the runs list
    at.button(key="go").click().run()
    assert not at.exception
    assert at.query_params.get("runs") == "nosuchrun,other"
    assert [t.value for t in at.title] == ["Compare runs"], [t.value for t in at.title]
