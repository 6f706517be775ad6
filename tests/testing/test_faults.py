import json
import multiprocessing
import os
import pickle
import signal

import pytest

from connectors.testing import Fault, FaultPlan, FaultPlanError, InjectedFault


def write_plan(tmp_path, faults):
    path = tmp_path / "faults.json"
    path.write_text(json.dumps(faults))
    return FaultPlan(str(path))


def test_missing_file_means_no_faults(tmp_path):
    plan = FaultPlan(str(tmp_path / "none.json"))
    assert plan.faults() == []
    plan.fire("after_open", 1, 0)  # nothing happens


def test_raise_fires_at_most_times_in_total(tmp_path):
    plan = write_plan(
        tmp_path,
        [
            {
                "id": "r",
                "step": "after_pre_commit",
                "epoch": 3,
                "partition": 1,
                "action": "raise",
                "times": 2,
            }
        ],
    )
    plan.fire("after_pre_commit", 3, 0)  # other partition: no fault
    plan.fire("after_pre_commit", 2, 1)  # other epoch: no fault
    plan.fire("after_open", 3, 1)  # other step: no fault
    for _ in range(2):
        with pytest.raises(InjectedFault, match="'r'"):
            plan.fire("after_pre_commit", 3, 1)
    plan.fire("after_pre_commit", 3, 1)  # exhausted
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "faults.json",
        "faults.json.r.0",
        "faults.json.r.1",
    ]


def test_null_epoch_and_partition_match_anything(tmp_path):
    plan = write_plan(
        tmp_path,
        [
            {
                "id": "any",
                "step": "driver_after_plan",
                "epoch": None,
                "partition": None,
                "action": "raise",
            }
        ],
    )
    with pytest.raises(InjectedFault):
        plan.fire("driver_after_plan", 17)


def _claim_in_child(path, queue):
    plan = FaultPlan(path)
    queue.put(plan.claim(plan.faults()[0]))


def test_claims_are_exclusive_across_processes(tmp_path):
    plan = write_plan(tmp_path, [{"id": "k", "step": "after_open", "action": "raise", "times": 1}])
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_claim_in_child, args=(plan.path, queue)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    results = [queue.get(timeout=10) for _ in procs]
    assert sorted(results) == [False, False, False, True]


def _fire_kill(path):
    FaultPlan(path).fire("after_commit", 1, 0)


def test_kill_sends_sigkill_to_the_current_process(tmp_path):
    plan = write_plan(tmp_path, [{"id": "k", "step": "after_commit", "action": "kill"}])
    proc = multiprocessing.get_context("spawn").Process(target=_fire_kill, args=(plan.path,))
    proc.start()
    proc.join(60)
    assert proc.exitcode == -signal.SIGKILL
    assert os.path.exists(plan.path + ".k.0")


def test_mid_write_threshold(tmp_path):
    plan = write_plan(
        tmp_path,
        [
            {
                "id": "m",
                "step": "mid_write",
                "epoch": 2,
                "partition": 0,
                "action": "raise",
                "after_rows": 10,
            }
        ],
    )
    assert plan.mid_write_threshold(2, 1) is None
    fault = plan.mid_write_threshold(2, 0)
    assert fault is not None and fault.after_rows == 10
    with pytest.raises(InjectedFault):
        plan.fire_fault(fault)
    plan.fire_fault(fault)  # already fired once


@pytest.mark.parametrize(
    "content",
    [
        '{"not": "a list"}',
        "[1]",
        '[{"id": "x", "step": "nope", "action": "raise"}]',
        '[{"id": "x", "step": "after_open", "action": "explode"}]',
        '[{"step": "after_open"}]',
        "{{",
    ],
)
def test_bad_plan_files_raise_typed_errors(tmp_path, content):
    path = tmp_path / "f.json"
    path.write_text(content)
    with pytest.raises(FaultPlanError):
        FaultPlan(str(path)).faults()


def test_pickle_round_trips(tmp_path):
    plan = FaultPlan(str(tmp_path / "f.json"))
    assert pickle.loads(pickle.dumps(plan)) == plan
    fault = Fault(
        id="a", step="mid_write", action="kill", epoch=1, partition=2, after_rows=3, times=4
    )
    assert pickle.loads(pickle.dumps(fault)) == fault
