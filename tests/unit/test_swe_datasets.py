"""SWE dataset rows → TaskRequests: the three row shapes, the three file formats, and the rejections."""

from __future__ import annotations

import json
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from polar_jobs.scoring.datasets import DEFAULT_REPO_TEMPLATE, load_rows, load_task_requests, swe_task_request

pytestmark = pytest.mark.unit

COMMAND = "agent --task {instruction}"
BASE = "a" * 40
F2P = ["tests/test_calc.py::test_add", "tests/test_calc.py::test_add_negative"]
P2P = ["tests/test_calc.py::test_sub"]


def swe_bench_row(**overrides) -> dict:
    """Every field a string, F2P/P2P JSON-encoded (SWE-bench Lite/Verified)."""
    row = {
        "instance_id": "calc__calc-1",
        "repo": "calc/calc",
        "base_commit": BASE,
        "patch": "diff --git a/calc.py b/calc.py\n",
        "test_patch": "diff --git a/tests/test_calc.py b/tests/test_calc.py\n",
        "problem_statement": "add() subtracts",
        "hints_text": "",
        "created_at": "2024-01-01T00:00:00Z",
        "version": "0.0",
        "FAIL_TO_PASS": json.dumps(F2P),
        "PASS_TO_PASS": json.dumps(P2P),
        "environment_setup_commit": BASE,
    }
    return row | overrides


def swe_gym_row(**overrides) -> dict:
    """F2P/P2P real lists, no environment_setup_commit."""
    row = swe_bench_row(instance_id="calc__calc-2", FAIL_TO_PASS=list(F2P), PASS_TO_PASS=list(P2P))
    del row["environment_setup_commit"]
    return row | overrides


def skyrl_row(*, prompt=None) -> dict:
    """A SkyRL-v0-293-data row: a chat prompt and a nested SWE-Gym instance with numpy F2P/P2P."""
    instance = swe_gym_row(instance_id="calc__calc-3", FAIL_TO_PASS=np.array(F2P), PASS_TO_PASS=np.array(P2P))
    if prompt is None:
        prompt = [{"role": "system", "content": "You are a coder."}, {"role": "user", "content": "Fix calc: add()"}]
    return {"prompt": prompt, "data_source": "swe-gym", "ability": "coding", "instance": instance}


def expected_instance(row: dict) -> dict:
    return row | {"FAIL_TO_PASS": F2P, "PASS_TO_PASS": P2P}


def request(row: dict, **kwargs):
    return swe_task_request(row, agent_command=COMMAND, **kwargs)


# -- the three row shapes ----------------------------------------------------------------------
def test_swe_bench_row():
    row = swe_bench_row()
    task = request(row, num_samples=4, timeout_seconds=900)
    assert task.instruction == "add() subtracts"
    assert task.num_samples == 4
    assert task.timeout_seconds == 900
    assert task.runtime.repo == "https://github.com/calc/calc.git"
    assert task.runtime.commit == BASE
    assert task.agent.harness == "shell" and task.agent.command == COMMAND
    assert task.evaluator.name == "swe"
    assert task.evaluator.config == {"instance": expected_instance(row)}
    assert task.metadata == {"instance_id": "calc__calc-1", "repo": "calc/calc", "data_source": None}
    assert row["FAIL_TO_PASS"] == json.dumps(F2P)  # the caller's row is not mutated


def test_swe_gym_row():
    row = swe_gym_row()
    task = request(row)
    assert task.instruction == "add() subtracts"
    assert task.runtime.commit == BASE
    instance = task.evaluator.config["instance"]
    assert instance == expected_instance(row)
    assert "environment_setup_commit" not in instance  # defaulted by load_instance at grading time


def test_skyrl_row_uses_the_user_message():
    task = request(skyrl_row())
    assert task.instruction == "Fix calc: add()"
    instance = task.evaluator.config["instance"]
    assert instance["FAIL_TO_PASS"] == F2P and type(instance["FAIL_TO_PASS"]) is list
    assert instance["PASS_TO_PASS"] == P2P and type(instance["PASS_TO_PASS"]) is list
    assert instance["instance_id"] == "calc__calc-3"
    assert "prompt" not in instance
    json.dumps(task.evaluator.config)  # JSON-able: no numpy left
    assert task.metadata == {"instance_id": "calc__calc-3", "repo": "calc/calc", "data_source": "swe-gym"}


@pytest.mark.parametrize("prompt", ["just a string", [{"role": "system", "content": "only a system message"}]])
def test_skyrl_row_without_a_user_message_uses_the_problem_statement(prompt):
    assert request(skyrl_row(prompt=prompt)).instruction == "add() subtracts"


def test_repo_source_callable_and_template():
    assert request(swe_bench_row(), repo_source=lambda repo: f"/mirrors/{repo}").runtime.repo == "/mirrors/calc/calc"
    task = request(swe_bench_row(), repo_source="/mirrors/{owner}__{name}")
    assert task.runtime.repo == "/mirrors/calc__calc"
    assert DEFAULT_REPO_TEMPLATE.format(repo="calc/calc") == request(swe_bench_row()).runtime.repo


def test_other_harness_needs_no_command():
    task = swe_task_request(swe_bench_row(), harness="claude_code")
    assert task.agent.harness == "claude_code" and task.agent.command is None


def test_shell_harness_without_command_is_rejected():
    with pytest.raises(ValueError, match="command"):
        swe_task_request(swe_bench_row())


# -- files -------------------------------------------------------------------------------------
def write_parquet(path, rows: list[dict]) -> None:
    plain = json.loads(json.dumps(rows, default=lambda value: value.tolist()))  # numpy → lists for pyarrow
    pq.write_table(pa.Table.from_pylist(plain), path)


def test_json_jsonl_and_parquet(tmp_path):
    (tmp_path / "bench.json").write_text(json.dumps([swe_bench_row(), swe_bench_row(instance_id="calc__calc-9")]))
    (tmp_path / "gym.jsonl").write_text("\n".join(json.dumps(r) for r in [swe_gym_row(), swe_gym_row()]) + "\n\n")
    write_parquet(tmp_path / "skyrl.parquet", [skyrl_row(), skyrl_row()])

    bench = load_task_requests(tmp_path / "bench.json", agent_command=COMMAND)
    assert [t.metadata["instance_id"] for t in bench] == ["calc__calc-1", "calc__calc-9"]
    assert bench[0].evaluator.config["instance"] == expected_instance(swe_bench_row())

    gym = load_task_requests(tmp_path / "gym.jsonl", agent_command=COMMAND, num_samples=8)
    assert len(gym) == 2 and all(t.num_samples == 8 for t in gym)
    assert gym[0].evaluator.config["instance"] == expected_instance(swe_gym_row())

    skyrl = load_task_requests(tmp_path / "skyrl.parquet", agent_command=COMMAND)
    assert [t.instruction for t in skyrl] == ["Fix calc: add()"] * 2
    assert skyrl[0].runtime.commit == BASE
    assert skyrl[0].evaluator.config["instance"]["FAIL_TO_PASS"] == F2P
    assert skyrl[0].metadata["data_source"] == "swe-gym"


def test_parquet_rows_are_plain_dicts(tmp_path):
    write_parquet(tmp_path / "skyrl.parquet", [skyrl_row()])
    (row,) = load_rows(tmp_path / "skyrl.parquet")
    assert row["prompt"][1] == {"role": "user", "content": "Fix calc: add()"}
    assert row["instance"]["FAIL_TO_PASS"] == F2P


@pytest.mark.parametrize(
    "name, content",
    [("rows.json", '{"instance_id": "x"}'), ("rows.jsonl", "[1, 2]\n"), ("rows.csv", "a,b\n")],
)
def test_load_rows_rejects(tmp_path, name, content):
    (tmp_path / name).write_text(content)
    with pytest.raises(ValueError):
        load_rows(tmp_path / name)


# -- rejections --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "row, field",
    [
        (swe_bench_row(FAIL_TO_PASS="[]"), "FAIL_TO_PASS"),
        (swe_gym_row(FAIL_TO_PASS=[]), "FAIL_TO_PASS"),
        (swe_bench_row(FAIL_TO_PASS="['a', 'b']"), "FAIL_TO_PASS"),  # Python repr, not JSON
        (swe_bench_row(PASS_TO_PASS="['a', 'b']"), "PASS_TO_PASS"),
        (swe_bench_row(FAIL_TO_PASS='"tests/test_calc.py::test_add"'), "FAIL_TO_PASS"),  # JSON, not a list
        (swe_bench_row(FAIL_TO_PASS="[1, 2]"), "FAIL_TO_PASS"),
        (swe_gym_row(PASS_TO_PASS=None), "PASS_TO_PASS"),
        ({k: v for k, v in swe_bench_row().items() if k != "FAIL_TO_PASS"}, "FAIL_TO_PASS"),
        ({k: v for k, v in swe_bench_row().items() if k != "base_commit"}, "base_commit"),
        (swe_gym_row(base_commit=""), "base_commit"),
        (swe_bench_row(repo=None), "repo"),
        (swe_bench_row(problem_statement="  "), "problem_statement"),
    ],
)
def test_rejects_bad_rows(row, field):
    instance_id = row["instance_id"]
    with pytest.raises(ValueError, match=field) as excinfo:
        request(row)
    assert instance_id in str(excinfo.value)


def test_rejects_empty_numpy_f2p_in_a_nested_instance():
    row = skyrl_row()
    row["instance"]["FAIL_TO_PASS"] = np.array([], dtype=str)
    with pytest.raises(ValueError, match="calc__calc-3: FAIL_TO_PASS is empty"):
        request(row)


def test_rejects_a_row_without_instance_id():
    row = {k: v for k, v in swe_bench_row().items() if k != "instance_id"}
    with pytest.raises(ValueError, match="instance_id is missing"):
        request(row)


def test_parquet_without_pyarrow_names_the_package(tmp_path, monkeypatch):
    write_parquet(tmp_path / "rows.parquet", [swe_bench_row()])
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # makes the import fail
    with pytest.raises(ImportError, match="pyarrow"):
        load_rows(tmp_path / "rows.parquet")
