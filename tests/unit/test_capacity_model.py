"""benchmarks/capacity_model.py: the arithmetic behind docs/capacity.md's projections."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import orjson
import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))

from capacity_model import Inputs, from_fired, masters_for, model, nodes_for, spread


def test_spread_matches_the_measured_table() -> None:
    # docs/capacity.md, F: 1,024 slots on 96 masters 1.59, 4,096 on 96 1.15.
    assert spread(1024, 96) == pytest.approx(1.59, abs=0.01)
    assert spread(4096, 96) == pytest.approx(1.15, abs=0.01)


def test_nodes_carry_their_own_fixed_cost() -> None:
    inputs = Inputs(node_us=50.0, slot_idle_ms_per_s=0.0, node_fixed_cores=0.1)
    cores, nodes = nodes_for(100_000, 0, inputs)
    # 5 cores of jobs; each node can give 0.5 - 0.1 of its core to them.
    assert nodes == 13
    assert cores == pytest.approx(5.0 + 13 * 0.1)
    assert nodes_for(10, 0, inputs)[1] == 2  # never fewer than two: failover


def test_masters_grow_by_the_spread_of_the_slots() -> None:
    inputs = Inputs(redis_us=50.0)
    _, masters, factor = masters_for(1_000_000, 4096, inputs)
    assert factor == pytest.approx(spread(4096, 96))
    assert masters == -(-100 * factor // 1)  # 100 even masters, then the spread


def test_cheaper_jobs_need_fewer_processes() -> None:
    before = model(Inputs())
    after = model(dataclasses.replace(Inputs(), node_us=20.0, redis_us=15.0, mariadb_us=20.0))
    for old, new in zip(before, after, strict=True):
        assert new["nodes"] <= old["nodes"]
        assert new["redis_masters"] <= old["redis_masters"]
        assert new["all_cores"] < old["all_cores"]
    assert after[-1]["nodes"] < before[-1]["nodes"]


def test_fired_results_replace_the_per_job_costs(tmp_path: Path) -> None:
    def run(node: float, redis: float, mariadb: bool = True) -> dict[str, object]:
        groups = {
            "delayq node": {"us_per_job": node},
            "Redis": {"us_per_job": redis},
            "producer (this process)": {"us_per_job": 20.0},
        }
        if mariadb:
            groups["MariaDB"] = {"us_per_job": 30.0}
        return {
            "cpu": {"groups": groups},
            "redo_bytes_per_job": 900.0,
            "mysql_bytes_per_fired_job": 800.0,
        }

    path = tmp_path / "capacity.json"
    path.write_bytes(orjson.dumps({"fired": [run(30.0, 20.0), run(40.0, 10.0)]}))
    inputs = from_fired(path, Inputs())
    assert (inputs.node_us, inputs.redis_us, inputs.mariadb_us) == (40.0, 20.0, 30.0)
    assert inputs.consumer_us == Inputs().consumer_us  # not from this step
    path.write_bytes(orjson.dumps({"fired": [run(30.0, 20.0, mariadb=False)]}))
    with pytest.raises(SystemExit, match="no CPU of 'MariaDB'"):
        from_fired(path, Inputs())  # a group missing is an error, not a free process
    path.write_bytes(orjson.dumps({"pending": []}))
    with pytest.raises(SystemExit, match="no `fired` step"):
        from_fired(path, Inputs())
