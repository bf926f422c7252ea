"""The run page's Advice tab: the advisor's fired findings, each with why, its evidence, the fix
for JAX and PyTorch and the expected gain; then every rule that passed or could not be checked, and why.

The same findings, in the same order, as `tpu-perf advise RUN --all --json` (`data.advice`).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from tpu_perf.dashboard import tables
from tpu_perf.views.advice import gain_text

SEVERITY_ICON = {"high": ":material/error:", "medium": ":material/warning:", "low": ":material/info:"}
OUTCOME_WORDS = {"fired": "fired", "passed": "passed", "not_evaluable": "could not be checked"}


def _finding(i: int, f: dict[str, Any]) -> None:
    with st.container(border=True, key=f"finding_{i}"):
        st.markdown(f"#### {f['title']}\n`{f['id']}` · {f['severity']} · {f['family']}")
        st.markdown(f"**Why:** {f['reason']}")
        gain = f.get("expected_gain")
        if gain:
            st.markdown(f"**Expected gain:** {gain_text(gain)}: {gain.get('basis')}")
        if f.get("evidence"):
            st.dataframe(tables.evidence_table(f["evidence"]), hide_index=True, width="stretch", key=f"evidence_{i}")
        fix = f.get("fix") or {}
        if fix:
            st.markdown(f"**Fix:** {fix.get('summary')}")
            for framework, language in (("jax", "python"), ("pytorch", "python")):
                if fix.get(framework):
                    st.caption("JAX" if framework == "jax" else "PyTorch")
                    st.code(fix[framework], language=language)
        if f.get("docs"):
            st.caption("Read more: " + " · ".join(f"[{d}]({d})" if str(d).startswith("http") else str(d) for d in f["docs"]))


def render(findings: list[dict[str, Any]] | None, problem: str | None, summary: dict[str, Any] | None = None) -> None:
    """`summary`: the advisor's `next`, `nothing_left`, `also` and `conclusion` (`data.advice_summary`)."""
    if findings is None:
        st.info(f"No advice for this run: {problem or 'unknown reason'}.", icon=":material/info:")
        return
    fired = [f for f in findings if f["outcome"] == "fired"]
    also_ids = set((summary or {}).get("also") or [])
    step = [f for f in fired if f["id"] not in also_ids]
    also = [f for f in fired if f["id"] in also_ids]
    others = [f for f in findings if f["outcome"] != "fired"]
    counts = {o: sum(f["outcome"] == o for f in others) for o in ("passed", "not_evaluable")}
    st.markdown(f"**{len(fired)} of {len(findings)} rules fired**, largest expected step-time gain first; {counts['passed']} passed, {counts['not_evaluable']} could not be checked. The same as `tpu-perf advise RUN --all`.")
    if summary and summary.get("conclusion"):
        (st.success if summary.get("nothing_left") else st.info)(summary["conclusion"], icon=":material/flag:")
    if not fired:
        st.success("No finding fired on this run.", icon=":material/check_circle:")
    for i, f in enumerate(step):
        _finding(i, f)
    if also:
        st.markdown("##### Also: not step time\nThese save compile time or memory, or are a risk; each shows its own figure. They are not proposed as the next fix for a faster step.")
        for i, f in enumerate(also, start=len(step)):
            _finding(i, f)
    with st.expander(f"Rules that passed or could not be checked ({len(others)})"):
        st.dataframe(
            pd.DataFrame([{"rule": f["id"], "title": f["title"], "outcome": OUTCOME_WORDS[f["outcome"]], "why": f.get("reason") or ""} for f in others], columns=["rule", "title", "outcome", "why"]),
            hide_index=True, width="stretch", key="advice_others",
        )  # fmt: skip
