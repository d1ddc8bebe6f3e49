"""The supervisor against real child processes: deaths of every kind, real OOM kills in a real memory cgroup.

The child here is a small stand-in workload that speaks the engine's heartbeat protocol and
allocates what it is told (the supervisor only ever sees a process, its heartbeat file and
the kernel's counters); the whole daemon under OOM is covered in test_daemon_memory.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import wait_for
from cuzk.engine.supervisor import (
    ENGINE_STATE_FILE, EXIT_CONFIG, EXIT_GAVE_UP, Death, Supervisor, SupervisorPolicy, SupervisorState, read_json)
from cuzk.memory.units import MiB

# argv: data_dir mode budget [exit-status]
FAKE_ENGINE = textwrap.dedent('''
    import os, signal, sys, time
    from pathlib import Path
    from cuzk.engine.supervisor import write_engine_state
    from cuzk.memory.limits import read_limits

    data_dir, mode, budget = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    def on_term(*_):
        (data_dir / "terminated").write_text(str(os.getpid()))
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    if mode == "exit":
        sys.exit(int(sys.argv[4]))
    def charged():
        cgroup = read_limits().cgroup
        return cgroup.charged_bytes if cgroup else None
    def beat(reserved, done, peak):
        write_engine_state(data_dir, budget_total=budget, budget_reserved=reserved, charged_bytes=charged(),
                           untracked_peak=peak, jobs_finished=done)
    idle = charged()
    # Like the engine: plan against min(budget, the kernel's ceiling now) — before the first heartbeat, which
    # tells the test it may lower the limit under this plan — keep a margin for what is not reserved, then
    # fill the rest once told to go.
    ceiling = min(budget, read_limits().ceiling_bytes)
    beat(0, 0, idle)
    if mode == "plan-and-fill":
        reserve = ceiling - idle - (32 << 20)
        while not (data_dir / "go").exists():
            time.sleep(0.01)
        beat(reserve, 0, idle)
        held = b"\\x01" * reserve  # every page touched: the kernel charges all of it
        beat(reserve, 1, idle)
    else:
        beat(0, 1 if mode == "idle-done" else 0, idle)
    while True:
        signal.pause()
''')


@pytest.fixture
def fake_engine(tmp_path) -> Path:
    path = tmp_path / "fake_engine.py"
    path.write_text(FAKE_ENGINE)
    return path


def fast_policy(**overrides) -> SupervisorPolicy:
    values = dict(backoff_initial_s=0.01, backoff_max_s=0.05, settle_timeout_s=5.0, healthy_after_s=3600.0)
    values.update(overrides)
    return SupervisorPolicy(**values)


def argv_for(fake_engine: Path, data_dir: Path, mode: str, *extra: str):
    return lambda budget: [sys.executable, str(fake_engine), str(data_dir), mode, str(budget or 0), *extra]


class InThread:
    """Run a Supervisor on a thread of the test process (where no cgroup is needed)."""

    def __init__(self, supervisor: Supervisor):
        self.supervisor = supervisor
        self.rc: int | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        self.rc = self.supervisor.run()

    def stop(self) -> int:
        self.supervisor.stop()
        self.thread.join(30)
        assert not self.thread.is_alive(), "supervisor did not stop"
        return self.rc


def engine_pid(data_dir: Path) -> int | None:
    state = read_json(data_dir / ENGINE_STATE_FILE)
    return state["pid"] if state else None


def test_sigkill_is_not_an_oom_kill_and_keeps_the_budget(tmp_path, fake_engine):
    data_dir = tmp_path / "data"
    sup = InThread(Supervisor(argv_for(fake_engine, data_dir, "idle-done"), data_dir, 300 * MiB, fast_policy()))
    first = wait_for(lambda: engine_pid(data_dir), what="first engine heartbeat")
    os.kill(first, signal.SIGKILL)
    second = wait_for(lambda: (p := engine_pid(data_dir)) and p != first and p, what="restarted engine")
    assert second != first
    state = SupervisorState.load(data_dir)
    assert state.restarts == 1 and state.oom_kills == 0
    assert state.current_budget == 300 * MiB and state.learned_budget is None
    assert "SIGKILL" in state.deaths[-1]["cause"] and "not by the OOM killer" in state.deaths[-1]["cause"]
    assert sup.stop() == 0
    # SIGTERM went to the engine, which shut down cleanly; nothing is left running.
    assert (data_dir / "terminated").read_text() == str(second)
    with pytest.raises(ProcessLookupError):
        os.kill(second, 0)


def test_gives_up_after_fruitless_restarts_with_a_message(tmp_path, fake_engine, caplog):
    data_dir = tmp_path / "data"
    sup = Supervisor(argv_for(fake_engine, data_dir, "exit", "1"), data_dir, None, fast_policy(max_fruitless_restarts=3))
    t0 = time.monotonic()
    assert sup.run() == EXIT_GAVE_UP
    state = SupervisorState.load(data_dir)
    assert len(state.deaths) == 3 and state.restarts == 2
    assert "3 times in a row without finishing a job" in state.gave_up and "exited with status 1" in state.gave_up
    assert "3 times in a row" in caplog.text
    assert time.monotonic() - t0 < 20


def test_engine_that_cannot_start_is_not_restarted(tmp_path, fake_engine):
    data_dir = tmp_path / "data"
    sup = Supervisor(argv_for(fake_engine, data_dir, "exit", str(EXIT_CONFIG)), data_dir, None, fast_policy())
    assert sup.run() == EXIT_GAVE_UP
    state = SupervisorState.load(data_dir)
    assert len(state.deaths) == 1 and "could not start" in state.gave_up


def test_backoff_grows_while_deaths_are_fruitless(tmp_path, fake_engine):
    data_dir = tmp_path / "data"
    policy = fast_policy(backoff_initial_s=0.2, backoff_max_s=0.4, max_fruitless_restarts=4)
    sup = Supervisor(argv_for(fake_engine, data_dir, "exit", "2"), data_dir, None, policy)
    assert sup.run() == EXIT_GAVE_UP
    times = [d["time"] for d in SupervisorState.load(data_dir).deaths]
    gaps = [b - a for a, b in zip(times, times[1:])]
    # waits of 0.2, 0.4, 0.4 (capped) s between the four deaths, plus each child's start-up
    assert gaps[0] >= 0.2 and gaps[1] >= 0.4 and gaps[2] >= 0.4


@given(planned=st.integers(64 * MiB, 1 << 40), limit=st.integers(64 * MiB, 1 << 40))
def test_lowered_budget_is_below_both_the_plan_and_the_limit(planned, limit):
    sup = Supervisor.__new__(Supervisor)
    sup.policy = SupervisorPolicy()
    death = Death(pid=1, returncode=-9, uptime_s=1, oom_kill=True, jobs_finished=0, budget=planned, planned_ceiling=planned, limit=limit)
    lowered = sup.lowered_budget(death)
    step = sup.policy.min_oom_step
    assert lowered <= planned * (1 - step) and lowered <= limit * (1 - step)
    assert lowered >= min(planned, limit) * (1 - step) - 1


# -- real OOM kills in a real memory cgroup ------------------------------------------------------

SUPERVISOR_MAIN = textwrap.dedent('''
    import logging, signal, sys
    from pathlib import Path
    from cuzk.engine.supervisor import Supervisor, SupervisorPolicy
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    fake, data_dir, mode, budget, min_budget = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    policy = SupervisorPolicy(backoff_initial_s=0.05, backoff_max_s=0.2, settle_timeout_s=10, healthy_after_s=3600,
                              max_fruitless_restarts=4, min_budget=min_budget)
    sup = Supervisor(lambda b: [sys.executable, fake, str(data_dir), mode, str(b)], data_dir, budget, policy)
    if mode == "report-budget":
        print(sup.starting_budget())
        sys.exit(0)
    signal.signal(signal.SIGTERM, sup.stop)
    sys.exit(sup.run())
''')


@pytest.fixture
def cgroup_1g(memory_cgroups):
    return memory_cgroups(1024 * MiB, "cuzk-test-sup-", oom_counter=True)


def run_supervisor_in(cg, tmp_path, fake_engine, data_dir, mode, budget, min_budget=64 * MiB):
    main = tmp_path / "supervisor_main.py"
    main.write_text(SUPERVISOR_MAIN)
    return cg.popen([sys.executable, str(main), str(fake_engine), str(data_dir), mode, str(budget), str(min_budget)],
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def limit_lowered_under_a_running_engine(cg, data_dir: Path, limit: int) -> None:
    """The engine planned against 800 MiB; the cgroup now allows less, and the engine goes ahead."""
    wait_for(lambda: engine_pid(data_dir), what="first engine heartbeat")
    cg.set_limit(limit)
    (data_dir / "go").write_text("")


@pytest.mark.cgroup
def test_oom_kill_recognised_budget_lowered_persisted_and_reused(tmp_path, fake_engine, cgroup_1g):
    data_dir = tmp_path / "data"
    proc = run_supervisor_in(cgroup_1g, tmp_path, fake_engine, data_dir, "plan-and-fill", 800 * MiB)
    try:
        limit_lowered_under_a_running_engine(cgroup_1g, data_dir, 300 * MiB)
        # The first engine fills its 800 MiB plan in a 300 MiB cgroup and is OOM-killed;
        # the next one, at the learned budget, completes its "job".
        wait_for(lambda: (s := read_json(data_dir / ENGINE_STATE_FILE)) and s["jobs_finished"] == 1, 60, "a surviving engine")
        state = SupervisorState.load(data_dir)
        assert state.oom_kills == 1 and cgroup_1g.oom_kills() == 1
        death = state.deaths[0]
        assert death["oom_kill"] and "OOM kill" in death["cause"]
        assert death["planned_ceiling"] == 800 * MiB and death["limit"] == 300 * MiB
        assert state.learned_budget == int(300 * MiB * (1 - SupervisorPolicy().min_oom_step))
        assert state.current_budget == state.learned_budget and state.learned_under_limit == 300 * MiB
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "OOM kill" in out and "budget lowered by" in out and "charged usage is down to" in out

    # A new supervisor under the same limit starts from the learned budget ...
    report = run_supervisor_in(cgroup_1g, tmp_path, fake_engine, data_dir, "report-budget", 800 * MiB)
    assert int(report.communicate(timeout=30)[0].strip().splitlines()[-1]) == state.learned_budget
    # ... and forgets it under a different limit.
    cgroup_1g.set_limit(400 * MiB)
    report = run_supervisor_in(cgroup_1g, tmp_path, fake_engine, data_dir, "report-budget", 800 * MiB)
    out = report.communicate(timeout=30)[0]
    assert int(out.strip().splitlines()[-1]) == 800 * MiB and "forgetting the learned budget" in out


@pytest.mark.cgroup
def test_oom_with_a_budget_that_cannot_fit_stops_with_a_message(tmp_path, fake_engine, cgroup_1g):
    data_dir = tmp_path / "data"
    proc = run_supervisor_in(cgroup_1g, tmp_path, fake_engine, data_dir, "plan-and-fill", 800 * MiB, min_budget=290 * MiB)
    limit_lowered_under_a_running_engine(cgroup_1g, data_dir, 300 * MiB)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_GAVE_UP, out
    state = SupervisorState.load(data_dir)
    assert state.oom_kills == 1 and "below the minimum" in state.gave_up
    assert "memory limit is too small" in out


def test_only_the_configured_budget_is_trusted_over_the_limit_and_a_learned_one_wins(tmp_path, fake_engine):
    """--budget-over-limit: the first engine is told to trust its budget; after an OOM kill the learned one is passed plainly."""
    from cuzk.memory.limits import read_limits

    data_dir = tmp_path / "data"
    over = read_limits().ceiling_bytes + 4096 * MiB
    calls = []

    def argv(budget, over_limit=False):
        calls.append((budget, over_limit))
        return [sys.executable, str(fake_engine), str(data_dir), "exit", str(budget), "1"]

    with pytest.raises(ValueError, match="needs a configured budget"):
        Supervisor(argv, data_dir, None, fast_policy(), budget_over_limit=True)
    sup = Supervisor(argv, data_dir, over, fast_policy(max_fruitless_restarts=1), budget_over_limit=True)
    assert sup.trusts_over_limit(over) and not sup.trusts_over_limit(over - 1)
    death = sup._run_once(sup.starting_budget())
    assert calls[-1] == (over, True) and death.planned_ceiling == over  # planned as the engine did: over the limit
    sup.state.learned_budget, sup.state.learned_under_limit = sup.lowered_budget(death), death.limit  # as after an OOM kill
    assert sup.state.learned_budget < read_limits().ceiling_bytes
    assert sup.starting_budget() == sup.state.learned_budget and not sup.trusts_over_limit(sup.state.learned_budget)
    sup._run_once(sup.starting_budget())
    assert calls[-1] == (sup.state.learned_budget, False)
    plain = Supervisor(argv, data_dir, over, fast_policy())
    death = plain._run_once(over)
    assert calls[-1] == (over, False) and death.planned_ceiling == read_limits().ceiling_bytes
