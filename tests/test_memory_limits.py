"""Reading limits: cgroup v2 and v1 parsing against directory trees laid out like /proc and /sys/fs/cgroup
(parsing only), the real machine's own cgroup, and the budget plan that follows from the limits."""

from pathlib import Path

import pytest

from cuzk.memory.limits import CgroupError, find_memory_cgroup, read_limits, read_meminfo, read_rss_bytes
from cuzk.memory.plan import OVER_LIMIT_SOURCE, BudgetPlanError, plan_budget
from cuzk.memory.probe import ProbeResult
from cuzk.memory.units import GiB, MiB

V1_UNLIMITED = "9223372036854771712"
MEMINFO = "MemTotal:       16384000 kB\nMemFree:         8000000 kB\nMemAvailable:   12000000 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n"


def make_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def v2_tree(root: Path, proc_path="/system.slice/cuzk.service", mount_root="/", extra=None) -> Path:
    files = {
        "/proc/meminfo": MEMINFO,
        "/proc/self/cgroup": f"0::{proc_path}\n",
        "/proc/self/mountinfo": (f"22 1 0:21 / /proc rw - proc proc rw\n"
                                 f"30 23 0:26 {mount_root} /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"),
        "/sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory pids\n",
        "/sys/fs/cgroup/memory.stat": "anon 1\n",
        "/sys/fs/cgroup/system.slice/memory.max": f"{8 * GiB}\n",
        "/sys/fs/cgroup/system.slice/memory.high": "max\n",
        "/sys/fs/cgroup/system.slice/memory.current": f"{3 * GiB}\n",
        "/sys/fs/cgroup/system.slice/memory.stat": f"anon {2 * GiB}\nfile {GiB}\ninactive_file {512 * MiB}\nactive_file 0\n",
        "/sys/fs/cgroup/system.slice/memory.peak": f"{4 * GiB}\n",
        "/sys/fs/cgroup/system.slice/cuzk.service/memory.max": "max\n",
        "/sys/fs/cgroup/system.slice/cuzk.service/memory.high": "max\n",
        "/sys/fs/cgroup/system.slice/cuzk.service/memory.current": f"{GiB}\n",
        "/sys/fs/cgroup/system.slice/cuzk.service/memory.stat": f"anon {GiB}\ninactive_file {100 * MiB}\n",
        "/sys/fs/cgroup/system.slice/cuzk.service/memory.events": "low 0\nhigh 7\nmax 3\noom 2\noom_kill 1\noom_group_kill 0\n",
        "/sys/fs/cgroup/system.slice/cuzk.service/memory.swap.max": "0\n",
    }
    files.update(extra or {})
    return make_tree(root, files)


def v1_tree(root: Path, proc_path="/docker/abc", mount_root="/", extra=None) -> Path:
    base = "/sys/fs/cgroup/memory"
    files = {
        "/proc/meminfo": MEMINFO,
        "/proc/self/cgroup": f"12:pids:/\n4:memory:{proc_path}\n1:name=systemd:/\n0::/\n",
        "/proc/self/mountinfo": ("31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
                                 f"35 31 0:32 {mount_root} {base} rw,relatime - cgroup cgroup rw,memory\n"
                                 "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"),
        "/sys/fs/cgroup/unified/cgroup.controllers": "\n",  # hybrid: the unified hierarchy carries no memory
        f"{base}/memory.limit_in_bytes": V1_UNLIMITED,
        f"{base}/memory.usage_in_bytes": f"{10 * GiB}",
        f"{base}/docker/memory.limit_in_bytes": f"{6 * GiB}\n",
        f"{base}/docker/memory.usage_in_bytes": f"{2 * GiB}\n",
        f"{base}/docker/abc/memory.limit_in_bytes": V1_UNLIMITED + "\n",
        f"{base}/docker/abc/memory.usage_in_bytes": f"{GiB}\n",
        f"{base}/docker/abc/memory.max_usage_in_bytes": f"{GiB + 5}\n",
        f"{base}/docker/abc/memory.failcnt": "4\n",
        f"{base}/docker/abc/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
        f"{base}/docker/abc/memory.stat": (f"cache 5\nrss 6\ninactive_file {MiB}\nhierarchical_memory_limit {6 * GiB}\n"
                                           f"total_inactive_file {2 * MiB}\n"),
    }
    files.update(extra or {})
    return make_tree(root, files)


def test_v2_tightest_limit_up_the_tree_wins_and_its_counters_are_read(tmp_path):
    limits = read_limits(v2_tree(tmp_path))
    cg = limits.cgroup
    assert (cg.version, cg.path, cg.resolution) == (2, "/system.slice/cuzk.service", "exact")
    assert cg.limit_bytes == 8 * GiB and cg.limit_source == "memory.max at /system.slice"
    # The limit sits on the parent, so the usage it is compared against is the parent's (siblings included).
    assert cg.usage_bytes == 3 * GiB and cg.inactive_file_bytes == 512 * MiB
    assert cg.charged_bytes == 3 * GiB - 512 * MiB and cg.usage_source == "memory.current at /system.slice"
    assert cg.peak_bytes == 4 * GiB
    assert (cg.oom_events, cg.oom_kills, cg.events["high"], cg.swap_limit_bytes) == (2, 1, 7, 0)
    assert [lv.path for lv in cg.levels] == ["/system.slice/cuzk.service", "/system.slice", "/"]
    assert limits.ceiling_bytes == 8 * GiB and "memory.max at /system.slice" in limits.ceiling_source


def test_v2_memory_high_below_max_sets_the_ceiling(tmp_path):
    root = v2_tree(tmp_path, extra={"/sys/fs/cgroup/system.slice/cuzk.service/memory.high": f"{5 * GiB}\n"})
    limits = read_limits(root)
    assert limits.cgroup.limit_bytes == 8 * GiB and limits.cgroup.high_bytes == 5 * GiB
    assert limits.cgroup.effective_limit_bytes == 5 * GiB == limits.ceiling_bytes
    assert limits.ceiling_source == "cgroup v2 memory.high at /system.slice/cuzk.service"
    # memory.high on our own level binds first, so its counters are the ones compared against it.
    assert limits.cgroup.usage_source == "memory.current at /system.slice/cuzk.service" and limits.cgroup.usage_bytes == GiB


def test_v2_own_limit_reads_own_counters(tmp_path):
    root = v2_tree(tmp_path, extra={"/sys/fs/cgroup/system.slice/cuzk.service/memory.max": f"{2 * GiB}\n"})
    cg = read_limits(root).cgroup
    assert cg.limit_bytes == 2 * GiB and cg.usage_bytes == GiB and cg.charged_bytes == GiB - 100 * MiB
    assert cg.peak_bytes is None  # memory.peak absent (kernels before 5.19)


def test_v2_without_memory_controller_means_no_cgroup(tmp_path):
    root = v2_tree(tmp_path, extra={"/sys/fs/cgroup/cgroup.controllers": "cpu io pids\n"})
    limits = read_limits(root)
    assert limits.cgroup is None
    assert limits.ceiling_bytes == 16384000 * 1024 and limits.ceiling_source.startswith("MemTotal")
    assert any("no memory cgroup" in n for n in limits.notes)


def test_v1_in_hybrid_setup_with_unlimited_own_level_and_limited_parent(tmp_path):
    limits = read_limits(v1_tree(tmp_path))
    cg = limits.cgroup
    assert (cg.version, cg.path, cg.resolution) == (1, "/docker/abc", "exact")
    assert cg.limit_bytes == 6 * GiB and cg.limit_source == "memory.limit_in_bytes at /docker"
    assert cg.usage_bytes == 2 * GiB and cg.high_bytes is None
    assert cg.oom_kills == 3 and cg.oom_events is None and cg.events["failcnt"] == 4
    assert cg.levels[0].limit_bytes is None  # 9223372036854771712 reads as unlimited
    assert limits.ceiling_bytes == 6 * GiB


def test_v1_hierarchical_limit_covers_ancestors_the_mount_hides(tmp_path):
    # Inside a container the mount shows only our own directory; memory.stat still knows the host-side limit.
    files = {"/sys/fs/cgroup/memory/memory.limit_in_bytes": V1_UNLIMITED,
             "/sys/fs/cgroup/memory/memory.usage_in_bytes": f"{GiB}",
             "/sys/fs/cgroup/memory/memory.stat": f"hierarchical_memory_limit {3 * GiB}\ntotal_inactive_file {MiB}\ninactive_file 7\n",
             "/sys/fs/cgroup/memory/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n"}
    root = v1_tree(tmp_path, proc_path="/docker/abc", mount_root="/docker/abc", extra=files)
    cg = read_limits(root).cgroup
    assert cg.path == "/" and cg.resolution == "exact"
    assert cg.limit_bytes == 3 * GiB and "hierarchical_memory_limit" in cg.limit_source
    assert cg.charged_bytes == GiB - MiB  # total_inactive_file (hierarchical) preferred over inactive_file


def test_mount_showing_a_subtree_maps_the_proc_path_into_it(tmp_path):
    files = {"/sys/fs/cgroup/memory/abc/memory.limit_in_bytes": f"{GiB}", "/sys/fs/cgroup/memory/abc/memory.usage_in_bytes": "5"}
    root = v1_tree(tmp_path, proc_path="/docker/abc", mount_root="/docker", extra=files)
    location = find_memory_cgroup(root)
    assert location.directory == root / "sys/fs/cgroup/memory/abc" and location.resolution == "exact"
    assert read_limits(root).cgroup.limit_bytes == GiB


def test_missing_cgroup_path_falls_back_to_deepest_existing_ancestor_and_says_so(tmp_path):
    root = v1_tree(tmp_path, proc_path="/docker/abc/inner/deeper")
    location = find_memory_cgroup(root)
    assert location.resolution == "ancestor" and location.directory == root / "sys/fs/cgroup/memory/docker/abc"
    limits = read_limits(root)
    assert limits.cgroup.limit_bytes == 6 * GiB
    assert any("does not exist" in n and "ancestor" in n for n in limits.notes)


def test_unreachable_cgroup_path_falls_back_to_the_mount_root(tmp_path):
    root = v1_tree(tmp_path, proc_path="/kubepods/pod1/ctr")
    assert find_memory_cgroup(root).resolution == "mount-root"
    # A foreign cgroup namespace writes paths that climb out of the mount.
    root2 = v2_tree(tmp_path / "ns", proc_path="/../../elsewhere")
    location = find_memory_cgroup(root2)
    assert location.resolution == "mount-root" and location.directory == root2 / "sys/fs/cgroup"


def test_escaped_mount_points_are_unescaped(tmp_path):
    root = v2_tree(tmp_path, proc_path="/", extra={
        "/proc/self/mountinfo": "30 23 0:26 / /sys/fs/my\\040cgroup rw - cgroup2 cgroup2 rw\n",
        "/sys/fs/my cgroup/cgroup.controllers": "memory\n",
        "/sys/fs/my cgroup/memory.stat": "inactive_file 0\n"})
    location = find_memory_cgroup(root)
    assert location.mount == root / "sys/fs/my cgroup" and location.resolution == "exact"


def test_garbage_in_a_limit_file_is_an_error_naming_the_file(tmp_path):
    root = v2_tree(tmp_path, extra={"/sys/fs/cgroup/system.slice/memory.max": "lots\n"})
    with pytest.raises(CgroupError, match="system.slice/memory.max.*'lots'"):
        read_limits(root)


def test_meminfo_without_memtotal_is_an_error(tmp_path):
    make_tree(tmp_path, {"/proc/meminfo": "MemFree: 5 kB\n"})
    with pytest.raises(CgroupError, match="MemTotal"):
        read_meminfo(tmp_path)
    info = read_meminfo(v2_tree(tmp_path / "ok"))
    assert (info.total_bytes, info.available_bytes) == (16384000 * 1024, 12000000 * 1024)


def test_this_machine_reports_a_consistent_picture():
    limits = read_limits()
    info = limits.meminfo
    assert 0 < info.available_bytes <= info.total_bytes
    assert 0 < limits.ceiling_bytes <= info.total_bytes
    assert read_rss_bytes() > 10 * MiB  # this interpreter with pytest loaded
    cg = limits.cgroup
    if cg is not None:
        assert Path(cg.directory).is_dir() and cg.usage_bytes is not None and cg.usage_bytes > 0
        assert 0 <= cg.charged_bytes <= cg.usage_bytes
        assert cg.levels[-1].path == "/"
    # The summary is plain data the status API can serve.
    assert limits.to_dict()["ceiling_bytes"] == limits.ceiling_bytes


# -------------------------------------------------------------------------------------------------
# budget plan


def probe_result(**overrides) -> ProbeResult:
    fields = dict(mode="anonymous", cgroup_version=2, cgroup_path="/system.slice/cuzk.service", cgroup_limit_bytes=8 * GiB,
                  cgroup_limit_source="memory.max at /system.slice", ceiling_bytes=8 * GiB, usage_source="cgroup usage - inactive_file",
                  usage_before_bytes=GiB, allocated_bytes=4 * GiB, allocated_gib=4.0, usage_peak_bytes=5 * GiB + 40 * MiB,
                  usage_after_bytes=GiB, overhead_bytes=40 * MiB, overhead_gib=0.039, probe_chunks=4, chunk_bytes=GiB,
                  safety_bytes=2 * GiB, stop_reason="safety distance reached", oom_killed=False, oom_kills_before=0,
                  oom_kills_after=0, kernel_peak_bytes=None, child_exit_status=0, child_init_bytes=0, duration_s=1.0,
                  measured_at=0.0, hostname="h")
    fields.update(overrides)
    return ProbeResult(**fields)


@pytest.mark.parametrize("ceiling, headroom, allowance", [
    (512 * MiB, 32 * MiB, 64 * MiB), (16 * GiB, 16 * GiB // 20, 16 * GiB // 20), (256 * GiB, 2 * GiB, GiB)])
def test_default_plan_keeps_headroom_and_allowance(tmp_path, ceiling, headroom, allowance):
    root = v2_tree(tmp_path, extra={"/sys/fs/cgroup/system.slice/memory.max": str(ceiling),
                                    "/proc/meminfo": f"MemTotal: {ceiling // 1024 * 4} kB\nMemAvailable: 1 kB\n"})
    plan = plan_budget(read_limits(root))
    assert (plan.ceiling_bytes, plan.headroom_bytes, plan.untracked_allowance_bytes) == (ceiling, headroom, allowance)
    assert plan.total_bytes == ceiling - headroom - allowance and plan.margin_source.startswith("default")


def test_plan_takes_the_margin_from_a_matching_memprobe(tmp_path):
    limits = read_limits(v2_tree(tmp_path))
    anon = probe_result()
    pinned = probe_result(mode="pinned", overhead_bytes=400 * MiB, safety_bytes=GiB)
    plan = plan_budget(limits, probes=[anon, pinned])
    # The worse overhead (pinned: 400 MiB per 4 GiB = 9.77 %) scales to the whole 8 GiB ceiling; the larger safety distance.
    assert plan.headroom_bytes == 2 * GiB
    assert plan.untracked_allowance_bytes == 800 * MiB
    assert plan.total_bytes == 8 * GiB - 2 * GiB - 800 * MiB
    assert "memprobe (anonymous, pinned)" in plan.margin_source


@pytest.mark.parametrize("override, why", [
    ({"cgroup_limit_bytes": 4 * GiB}, "limited to 4.00 GiB"),
    ({"cgroup_path": "/other"}, "/other"),
    ({"oom_killed": True}, "did not complete"),
    ({"overhead_bytes": 2 * GiB}, "implausible"),
])
def test_plan_ignores_a_memprobe_for_other_limits_and_says_why(tmp_path, override, why):
    plan = plan_budget(read_limits(v2_tree(tmp_path)), probes=[probe_result(**override)])
    assert plan.margin_source.startswith("default")
    assert any("ignored" in n and why in n for n in plan.notes)


def test_configured_budget_and_margin(tmp_path):
    limits = read_limits(v2_tree(tmp_path))
    plan = plan_budget(limits, configured_bytes=4 * GiB, margin_bytes=256 * MiB)
    assert (plan.ceiling_bytes, plan.ceiling_source, plan.headroom_bytes, plan.untracked_allowance_bytes) == (4 * GiB, "configured", 256 * MiB, 0)
    above = plan_budget(limits, configured_bytes=64 * GiB)
    assert above.ceiling_bytes == 8 * GiB and any("the ceiling wins" in n for n in above.notes)
    with pytest.raises(BudgetPlanError, match="leaves nothing"):
        plan_budget(limits, margin_bytes=8 * GiB)
    with pytest.raises(BudgetPlanError, match="positive"):
        plan_budget(limits, configured_bytes=0)


def test_a_configured_budget_over_the_limit_is_trusted_only_when_asked_and_loudly(tmp_path):
    limits = read_limits(v2_tree(tmp_path))  # an 8 GiB cgroup limit
    trusted = plan_budget(limits, configured_bytes=64 * GiB, trust_configured=True)
    assert trusted.ceiling_bytes == 64 * GiB and trusted.ceiling_source == OVER_LIMIT_SOURCE
    assert trusted.total_bytes == 64 * GiB - trusted.margin_bytes
    assert any(n.startswith("WARNING") and "--budget-over-limit" in n and "8.00 GiB" in n for n in trusted.notes)
    # Under the limit there is nothing to trust over: the configured figure is the ceiling as always, no warning.
    below = plan_budget(limits, configured_bytes=4 * GiB, trust_configured=True)
    assert below.ceiling_source == "configured" and not any(n.startswith("WARNING") for n in below.notes)
    with pytest.raises(BudgetPlanError, match="needs a configured budget"):
        plan_budget(limits, trust_configured=True)
