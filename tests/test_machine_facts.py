"""Machine facts: detected where the profile runs, written beside its samples."""

from __future__ import annotations

import json

import pytest
import tvm

from codl_tvm.profiler import machine_facts


def test_detects_this_host_and_no_gpu_facts_for_a_cpu_device() -> None:
    facts = machine_facts.detect(tvm.cpu(0))
    assert facts["cpu_logical"] >= 1
    assert "gpu_sms" not in facts
    assert all(v > 0 for k, v in facts.items() if k.startswith("cpu_l"))
    assert machine_facts.detect(None, host=False) == {}


def test_facts_go_beside_the_samples_and_read_back(tmp_path) -> None:
    samples = tmp_path / "run.csv"
    path = machine_facts.write(samples, {"gpu_sms": 8, "cpu_logical": 16})
    assert path == tmp_path / "run.machine.json"
    assert machine_facts.read(path) == {"gpu_sms": 8, "cpu_logical": 16}
    assert [p.name for p in tmp_path.iterdir()] == ["run.machine.json"]
    (tmp_path / "bad.json").write_text(json.dumps([1, 2]))
    with pytest.raises(ValueError, match="not a machine facts file"):
        machine_facts.read(tmp_path / "bad.json")
