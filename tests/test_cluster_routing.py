"""The cluster's routing decision, a pure function over what each host reported (no Ray needed)."""

from __future__ import annotations

from cuzk.cluster.routing import HostView, NoHost, Route, Wait, route


def host(name: str, *, held: int = 0, slots: int = 4, resident=(), room=None, never=None) -> HostView:
    return HostView(name, held=held, slots=slots, resident=frozenset(resident), room=room or {}, never=never or {})


def test_a_host_holding_the_key_with_room_wins_over_a_less_loaded_one():
    hosts = [host("idle", room={"sha": 4}), host("warm", held=3, resident={"sha"}, room={"sha": 1})]
    assert route("sha", hosts) == Route("warm")


def test_a_host_holding_the_key_without_room_is_passed_over():
    hosts = [host("warm", held=4, resident={"sha"}, room={"sha": 0}), host("idle", room={"sha": 4})]
    assert route("sha", hosts) == Route("idle")


def test_without_the_key_anywhere_the_least_loaded_host_with_room_wins():
    hosts = [host("busy", held=3, slots=4, room={"sha": 1}), host("calm", held=1, slots=4, room={"sha": 1}),
             host("big", held=2, slots=16, room={"sha": 2})]
    assert route("sha", hosts) == Route("big")  # 2/16 is the lightest load, whatever the raw count


def test_ties_go_to_the_first_name_so_the_choice_is_stable():
    hosts = [host("b", room={"sha": 1}), host("a", room={"sha": 1})]
    assert route("sha", hosts) == Route("a")


def test_the_job_waits_when_hosts_could_run_it_but_none_has_room():
    hosts = [host("a", held=4, room={"sha": 0}), host("b", never={"sha": "too large here"})]
    assert isinstance(route("sha", hosts), Wait)


def test_a_host_that_can_never_run_the_job_is_skipped_even_with_room_for_others():
    hosts = [host("small", room={"toy": 3}, never={"sha": "too large here"}), host("large", held=2, room={"sha": 1})]
    assert route("sha", hosts) == Route("large")


def test_when_no_host_can_ever_run_the_job_each_hosts_reason_is_named():
    hosts = [host("a", never={"sha": "needs 3 GiB, budget 2 GiB"}), host("b", never={"sha": "key file missing here"})]
    decision = route("sha", hosts)
    assert isinstance(decision, NoHost)
    message = decision.message("sha")
    assert "'sha'" in message and "a: needs 3 GiB, budget 2 GiB" in message and "b: key file missing here" in message


def test_an_empty_cluster_says_so():
    decision = route("sha", [])
    assert isinstance(decision, NoHost) and "no live host" in decision.message("sha")


def test_a_job_sent_takes_room_from_every_circuit_of_its_host_until_the_host_answers():
    view = host("a", held=1, room={"sha": 2, "toy": 1, "big": 0}).taken()
    assert view.held == 2 and view.room == {"sha": 1, "toy": 0, "big": 0}
    assert isinstance(route("toy", [view]), Wait)
