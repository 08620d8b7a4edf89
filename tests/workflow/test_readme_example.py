"""The README's shortest complete algorithm runs as printed (on the tiny config)."""

import json
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_readme_new_algorithm_example_runs(tmp_path, monkeypatch):
    readme = open(os.path.join(ROOT, "README.md")).read()
    [block] = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "sign_pg" in b]
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "README.md", "exec"), {"__name__": "readme"})
    summary = json.load(open(tmp_path / "runs" / "sign_pg" / "summary.json"))
    assert summary["algorithm"] == "sign_pg" and summary["steps"] == 4
    assert summary["eval_before"]["accuracy"] >= 0 and "eval_after" in summary
    # each evaluation keeps its per-question answers for the report's hack check
    from jaxrl_llm.metrics import read_eval_rows

    rows = read_eval_rows(str(tmp_path / "runs" / "sign_pg"))
    assert sorted(step for step, _ in rows) == [0, 4]
    for row in rows.values():
        assert len(row["answers"]) == len(row["copied_input"]) == len(row["correct"]) > 0
