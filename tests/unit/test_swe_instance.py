"""Instance and prediction loading (swe-eval.md §1): three row schemas in, one shape out, strict on F2P/P2P."""

from __future__ import annotations

import json

import numpy as np
import pytest

from polar_jobs.scoring.swe.instance import (
    DEFAULT_TEST_CMD,
    SweInstance,
    load_instance,
    load_instances,
    load_predictions,
)

pytestmark = pytest.mark.unit

F2P = ["tests/test_a.py::test_new"]
P2P = ["tests/test_a.py::test_old", "tests/test_a.py::test_p[x y]"]


def swebench_row(**overrides) -> dict:
    row = {"instance_id": "octo__repo-12", "repo": "octo/repo", "base_commit": "a" * 40, "patch": "diff --git x",
           "test_patch": "diff --git y", "problem_statement": "It breaks.", "hints_text": "", "created_at": "2024",
           "version": "1.0", "FAIL_TO_PASS": json.dumps(F2P), "PASS_TO_PASS": json.dumps(P2P),
           "environment_setup_commit": "b" * 40}
    row.update(overrides)
    return row


def test_swebench_row_with_json_strings():
    instance = load_instance(swebench_row())
    assert instance.fail_to_pass == tuple(F2P) and instance.pass_to_pass == tuple(P2P)
    assert instance.environment_setup_commit == "b" * 40
    assert instance.test_cmd == DEFAULT_TEST_CMD
    assert DEFAULT_TEST_CMD == ("python", "-m", "pytest", "--no-header", "-rA", "--tb=no", "-p", "no:cacheprovider")
    assert (instance.log_parser, instance.timeout_s, instance.install) == ("pytest", 1800.0, ())
    assert instance.repo_dirname == "octo__repo"


def test_swegym_row_with_lists_and_no_setup_commit():
    row = swebench_row(FAIL_TO_PASS=F2P, PASS_TO_PASS=P2P)
    del row["environment_setup_commit"], row["hints_text"]
    instance = load_instance(row)
    assert instance.fail_to_pass == tuple(F2P)
    assert instance.environment_setup_commit == "a" * 40
    assert instance.hints_text == ""


class FakeArray:
    def __init__(self, items):
        self.items = items

    def tolist(self):
        return list(self.items)


@pytest.mark.parametrize("make_array", [FakeArray, lambda items: np.array(items, dtype=object)])
def test_skyrl_row_nested_with_arrays(make_array):
    inner = swebench_row(FAIL_TO_PASS=make_array(F2P), PASS_TO_PASS=make_array(P2P))
    del inner["environment_setup_commit"]
    row = {"prompt": [{"role": "user", "content": "fix"}], "data_source": "swe-gym", "ability": "coding",
           "instance": inner}
    instance = load_instance(row)
    assert instance.fail_to_pass == tuple(F2P) and instance.pass_to_pass == tuple(P2P)
    assert all(type(test) is str for test in instance.pass_to_pass)
    assert instance.data_source == "swe-gym"
    assert instance.environment_setup_commit == "a" * 40


def test_empty_pass_to_pass_is_allowed():
    assert load_instance(swebench_row(PASS_TO_PASS="[]")).pass_to_pass == ()


@pytest.mark.parametrize("field, value, words", [
    ("FAIL_TO_PASS", "[]", "empty"),
    ("FAIL_TO_PASS", [], "empty"),
    ("FAIL_TO_PASS", "['tests/test_a.py::test_new']", "not a JSON list"),  # str(list), as OpenHands once wrote
    ("PASS_TO_PASS", "not json", "not a JSON list"),
    ("PASS_TO_PASS", None, "missing"),
    ("FAIL_TO_PASS", '{"a": 1}', "list of non-empty strings"),
    ("FAIL_TO_PASS", "[1, 2]", "list of non-empty strings"),
    ("base_commit", "", "base_commit"),
    ("test_cmd", [], "test_cmd"),
    ("log_parser", "django", "log_parser"),
    ("timeout_s", 0, "timeout_s"),
    ("install", 3, "install"),
])
def test_rejections_name_the_instance_and_field(field, value, words):
    with pytest.raises(ValueError) as caught:
        load_instance(swebench_row(**{field: value}))
    assert "octo__repo-12" in str(caught.value) and field in str(caught.value) and words in str(caught.value)


def test_optional_fields():
    instance = load_instance(swebench_row(test_cmd="python -m pytest -x", install="pip install -e .",
                                          log_parser="pytest_v2", timeout_s=5))
    assert instance.test_cmd == ("python", "-m", "pytest", "-x")
    assert instance.install == ("pip install -e .",)
    assert (instance.log_parser, instance.timeout_s) == ("pytest_v2", 5.0)


def test_instance_is_frozen():
    instance = load_instance(swebench_row())
    with pytest.raises(AttributeError):
        instance.base_commit = "c"  # type: ignore[misc]
    assert isinstance(instance, SweInstance)


def test_load_instances_from_json_list_dict_and_jsonl(tmp_path):
    rows = [swebench_row(), swebench_row(instance_id="octo__repo-13")]
    (tmp_path / "list.json").write_text(json.dumps(rows))
    (tmp_path / "dict.json").write_text(json.dumps({row["instance_id"]: row for row in rows}))
    (tmp_path / "rows.jsonl").write_text("\n".join(json.dumps(row) for row in rows) + "\n\n")
    for name in ("list.json", "dict.json", "rows.jsonl"):
        assert [i.instance_id for i in load_instances(tmp_path / name)] == ["octo__repo-12", "octo__repo-13"]
    (tmp_path / "dupes.json").write_text(json.dumps([rows[0], rows[0]]))
    with pytest.raises(ValueError, match="twice"):
        load_instances(tmp_path / "dupes.json")


def test_load_predictions_in_three_shapes(tmp_path):
    preds = [{"instance_id": "a-1", "model_name_or_path": "m", "model_patch": "diff --git a"},
             {"instance_id": "b-2", "model_name_or_path": "m", "model_patch": None},
             {"instance_id": "c-3", "model_name_or_path": "m", "model_patch": ""}]
    expected = {"a-1": "diff --git a", "b-2": None, "c-3": ""}
    (tmp_path / "p.jsonl").write_text("\n".join(json.dumps(p) for p in preds))
    (tmp_path / "p.json").write_text(json.dumps(preds))
    (tmp_path / "keyed.json").write_text(json.dumps({p["instance_id"]: p for p in preds}))
    for name in ("p.jsonl", "p.json", "keyed.json"):
        assert load_predictions(tmp_path / name) == expected
    (tmp_path / "bad.json").write_text(json.dumps([{"model_patch": "x"}]))
    with pytest.raises(ValueError, match="instance_id"):
        load_predictions(tmp_path / "bad.json")
