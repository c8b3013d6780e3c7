"""Placement decisions (replication/placement.py): pure functions, checked on every small cluster."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replication.placement import (
    Adoption,
    Placement,
    Standing,
    after_loss,
    fill_backups,
    freshest,
    from_replicas,
    hosts,
    initial,
    leader,
    promotable,
    rebalance_step,
    repaired,
)
from replication.replica import Role

NODES = ["n0", "n1", "n2", "n3", "n4"]


def check(placements: tuple[Placement, ...], count: int, alive: list[str]) -> None:
    assert [p.partition for p in placements] == list(range(count))
    for p in placements:
        assert p.primary != p.backup
        if p.primary in alive and len(alive) > 1:
            assert p.backup in alive, p


def spread(placements: tuple[Placement, ...], alive: list[str]) -> tuple[int, int]:
    primaries = Counter({n: 0 for n in alive})
    primaries.update(p.primary for p in placements)
    return min(primaries.values()), max(primaries.values())


def test_initial_spreads_primaries_and_backups() -> None:
    placements = initial(6, ["n0", "n1", "n2"])
    check(placements, 6, ["n0", "n1", "n2"])
    assert spread(placements, ["n0", "n1", "n2"]) == (2, 2)
    assert all(p.epoch == 1 for p in placements)
    backups = Counter(p.backup for p in placements)
    assert sorted(backups.values()) == [2, 2, 2]


def test_one_node_has_no_backups() -> None:
    assert initial(2, ["n0"]) == (Placement(0, "n0", None, 1), Placement(1, "n0", None, 1))
    with pytest.raises(ValueError, match="no node is alive"):
        initial(2, [])


def test_initial_puts_a_partition_where_its_data_is_newest() -> None:
    held = {0: {"n2": 4, "n0": 5, "n1": 1}, 1: {"n1": 3}, 2: {"gone": 9}}
    placements = initial(3, ["n0", "n1", "n2"], held)
    assert placements[0] == Placement(0, "n0", "n2", 6)
    assert placements[1].primary == "n1" and placements[1].epoch == 4
    assert placements[2].epoch == 10 and placements[2].primary in ("n0", "n1", "n2")


def test_a_lost_primary_is_replaced_by_its_backup() -> None:
    placements = initial(3, ["n0", "n1", "n2"])
    lost = placements[0].primary
    after = after_loss(placements, [n for n in ["n0", "n1", "n2"] if n != lost])
    for before, now in zip(placements, after):
        if lost in before.nodes():
            assert now.epoch == before.epoch + 1
            assert lost not in now.nodes() and now.backup is not None
            if before.primary == lost:
                assert now.primary == before.backup
            else:
                assert now.primary == before.primary
        else:
            assert now == before


def test_a_partition_whose_replicas_are_all_gone_waits_for_them() -> None:
    placements = (Placement(0, "n0", "n1", 3),)
    assert after_loss(placements, ["n2"]) == placements
    assert after_loss(placements, ["n1", "n2"]) == (Placement(0, "n1", "n2", 4),)


def test_the_last_node_runs_without_backups_then_gets_them_back() -> None:
    placements = initial(2, ["n0", "n1"])
    alone = after_loss(placements, ["n1"])
    assert all(p.primary == "n1" and p.backup is None for p in alone)
    assert fill_backups(alone, ["n1"]) == alone
    again = fill_backups(alone, ["n1", "n0"])
    assert all(p.backup == "n0" and p.epoch == q.epoch + 1 for p, q in zip(again, alone))


def test_freshest_prefers_the_newer_epoch_then_the_longer_journal() -> None:
    assert freshest((3, 10), (2, 500))
    assert not freshest((2, 500), (3, 10))
    assert freshest((3, 11), (3, 10)) and freshest((3, 10), (3, 10))


@settings(max_examples=300, deadline=None)
@given(
    count=st.integers(1, 8),
    first=st.integers(1, 3),
    joined=st.integers(1, 2),
    lost=st.lists(st.sampled_from(NODES), max_size=2, unique=True),
    head=st.sampled_from([None, "n0"]),
)
def test_any_history_keeps_the_invariants_and_rebalancing_converges(
    count: int, first: int, joined: int, lost: list[str], head: str | None
) -> None:
    alive = NODES[:first]
    placements = initial(count, alive, head=head)
    check(placements, count, alive)
    # nodes die (at most one at a time, so that a backup always survives)
    for node in lost:
        if node in alive and len(alive) > 1:
            alive = [n for n in alive if n != node]
            before = placements
            placements = after_loss(placements, alive, head)
            check(placements, count, alive)
            assert all(p.primary in alive for p in placements), (before, placements)
    # nodes join; backups first, then rebalance until nothing changes
    alive = sorted(set(alive) | set([n for n in NODES if n not in alive and n not in lost][:joined]))
    placements = fill_backups(placements, alive, head)
    check(placements, count, alive)
    for _ in range(8 * count + 10):
        step = rebalance_step(placements, alive, caught_up=range(count), head=head)
        if step == placements:
            break
        changed = [(a, b) for a, b in zip(placements, step) if a != b]
        assert len(changed) == 1 and changed[0][1].epoch == changed[0][0].epoch + 1
        placements = step
        check(placements, count, alive)
    else:
        pytest.fail(f"rebalancing did not settle: {placements}")
    used = hosts(alive, head)
    assert all(set(p.nodes()) <= set(used) for p in placements), (used, placements)  # none on the head
    leaders = [n for n in used if n != head] or used  # a head used for want of workers: backups only
    assert all(p.primary in leaders for p in placements), (leaders, placements)
    low, high = spread(placements, leaders)
    assert high - low <= 1 or high <= 1, placements


def test_a_primary_is_handed_only_to_a_caught_up_backup() -> None:
    placements = (Placement(0, "n0", "n1", 1), Placement(1, "n0", "n1", 1), Placement(2, "n0", "n1", 1))
    step = rebalance_step(placements, ["n0", "n1"], caught_up=[])
    assert all(p.primary == "n0" for p in step)
    step = rebalance_step(placements, ["n0", "n1"], caught_up=[1])
    assert step[1] == Placement(1, "n1", "n0", 2) and step[0] == placements[0]


# -- the head holds no data ---------------------------------------------------------------

HEAD = "n0"


def on(placements: tuple[Placement, ...], node: str) -> list[Placement]:
    return [p for p in placements if node in p.nodes()]


def settle(placements: tuple[Placement, ...], alive: list[str], head: str | None = HEAD) -> tuple[Placement, ...]:
    """Rebalancing steps until nothing changes, every backup caught up."""
    for _ in range(100):
        step = rebalance_step(placements, alive, range(len(placements)), head)
        if step == placements:
            return placements
        placements = step
    pytest.fail(f"rebalancing did not settle: {placements}")


def test_the_head_is_a_host_only_while_fewer_than_two_other_nodes_are_alive() -> None:
    assert hosts(["n2", "n0", "n1"], HEAD) == ["n1", "n2"]
    assert hosts(["n0", "n1"], HEAD) == ["n0", "n1"] and hosts(["n0"], HEAD) == ["n0"]
    assert hosts(["n1", "n2"], HEAD) == ["n1", "n2"]  # the head is gone
    assert hosts(["n0", "n1", "n2"]) == ["n0", "n1", "n2"]  # no head known


def test_three_nodes_keep_every_replica_off_the_head() -> None:
    placements = initial(4, ["n0", "n1", "n2"], head=HEAD)
    check(placements, 4, ["n0", "n1", "n2"])
    assert on(placements, HEAD) == [] and spread(placements, ["n1", "n2"]) == (2, 2)
    assert settle(placements, ["n0", "n1", "n2"]) == placements  # balanced as it is


def test_a_two_node_cluster_keeps_backups_on_the_head_and_primaries_on_the_worker() -> None:
    placements = initial(2, ["n0", "n1"], head=HEAD)
    assert {p.nodes() for p in placements} == {("n1", "n0")}
    assert settle(placements, ["n0", "n1"]) == placements
    on_head = (Placement(0, HEAD, "n1", 3), Placement(1, "n1", HEAD, 3))  # a failover left a primary there
    assert rebalance_step(on_head, ["n0", "n1"], [], HEAD) == on_head  # its backup has not caught up
    assert rebalance_step(on_head, ["n0", "n1"], [0], HEAD) == (Placement(0, "n1", HEAD, 4), on_head[1])


def test_a_lost_worker_s_backups_go_to_the_head_and_come_off_it_when_it_is_back() -> None:
    alive = ["n0", "n1", "n2"]
    placements = initial(4, alive, head=HEAD)
    degraded = fill_backups(after_loss(placements, ["n0", "n1"], HEAD), ["n0", "n1"], HEAD)
    check(degraded, 4, ["n0", "n1"])
    assert all(p.primary == "n1" and p.backup == HEAD for p in degraded), degraded
    # n2 is back before any rebalancing: nothing needs a backup, and the head's backups move off it
    assert fill_backups(degraded, alive, HEAD) == degraded
    first = rebalance_step(degraded, alive, range(4), HEAD)
    (before, after), = [(a, b) for a, b in zip(degraded, first) if a != b]
    assert before.backup == HEAD and after == Placement(before.partition, "n1", "n2", before.epoch + 1)
    again = settle(degraded, alive)
    check(again, 4, alive)
    assert on(again, HEAD) == [] and spread(again, ["n1", "n2"]) == (2, 2), again
    # while n2 is away nothing moves: the head keeps the backups, n1 every primary (no handover to
    # the head now, and none back when n2 returns); n2's return moves the backups off the head
    even = settle(degraded, ["n0", "n1"])
    assert even == degraded
    again = settle(even, alive)
    check(again, 4, alive)
    assert on(again, HEAD) == [] and spread(again, ["n1", "n2"]) == (2, 2), again


def test_a_primary_on_the_head_is_handed_to_its_caught_up_backup_then_its_backup_moves() -> None:
    placements = (Placement(0, HEAD, "n1", 3), Placement(1, "n1", "n2", 3), Placement(2, HEAD, None, 2))
    alive = ["n0", "n1", "n2"]
    assert rebalance_step(placements, alive, [], HEAD) == (  # nothing caught up: a backup for the one alone
        placements[0], placements[1], Placement(2, HEAD, "n2", 3))
    handed = rebalance_step(placements, alive, [0], HEAD)
    assert handed[0] == Placement(0, "n1", HEAD, 4) and handed[1:] == placements[1:]
    assert rebalance_step(handed, alive, [], HEAD)[0] == handed[0]  # the head's copy stays until the backup caught up
    moved = rebalance_step(handed, alive, [0], HEAD)
    assert moved[0] == Placement(0, "n1", "n2", 5)
    assert on(settle(placements, alive), HEAD) == []


def test_a_partition_whose_newest_journal_is_on_the_head_starts_there() -> None:
    held = {0: {HEAD: 5, "n1": 4}, 1: {HEAD: 3, "n2": 3}, 2: {"n1": 2, HEAD: 1}}
    placements = initial(3, ["n0", "n1", "n2"], held, HEAD)
    assert placements[0] == Placement(0, HEAD, "n1", 6)  # the newest data serves, until rebalancing
    assert placements[1] == Placement(1, "n2", HEAD, 4)  # as new: a host first, the head's whole copy kept
    assert placements[2] == Placement(2, "n1", "n2", 3)  # an older copy on the head: a backup primed anew
    assert on(settle(placements, ["n0", "n1", "n2"]), HEAD) == []


def test_a_lost_primary_s_backup_on_the_head_takes_over_there() -> None:
    placements = (Placement(0, "n3", HEAD, 2),)
    after = after_loss(placements, ["n0", "n1", "n2"], HEAD)
    assert after == (Placement(0, HEAD, "n1", 3),)  # its journal is there; the new backup on a worker
    assert on(settle(after, ["n0", "n1", "n2"]), HEAD) == []


# -- a restarted controller: the map from what the replicas say -------------------------

def test_a_consistent_partition_is_taken_over_as_it_stands() -> None:
    standing = {0: [Standing("p0a", "n0", Role.PRIMARY, 3, since=2, address="a", backup="b"),
                    Standing("p0b", "n1", Role.BACKUP, 3, primed=True, address="b")],
                1: [Standing("p1a", "n1", Role.PRIMARY, 1, since=1, address="c")]}  # alone: no backup
    (zero, one) = from_replicas(2, standing)
    assert zero == Adoption(Placement(0, "n0", "n1", 3), 2, ("p0a", "p0b"), None)
    assert one == Adoption(Placement(1, "n1", None, 1), 1, ("p1a",), None)


def test_the_newest_primary_wins_and_a_stale_one_is_dropped() -> None:
    standing = {0: [Standing("old", "n0", Role.PRIMARY, 2, since=1, address="a", backup="b"),
                    Standing("new", "n1", Role.PRIMARY, 3, since=3, address="b", backup="c"),
                    Standing("bk", "n2", Role.BACKUP, 3, primed=True, address="c")]}
    (a,) = from_replicas(1, standing)
    assert a.placement == Placement(0, "n1", "n2", 3) and a.keep == ("new", "bk") and a.again is None


@pytest.mark.parametrize("cut_off", ["backup not following", "handover half made", "primary gone"])
def test_a_change_cut_off_is_placed_again_above_every_epoch(cut_off: str) -> None:
    if cut_off == "backup not following":  # the new backup was told epoch 5, the primary not yet
        standing = [Standing("p", "n0", Role.PRIMARY, 4, since=4, address="a", backup="x"),
                    Standing("b", "n1", Role.BACKUP, 5, address="b")]
        chosen = "n0"
    elif cut_off == "handover half made":  # the primary stopped applying; its backup is primed
        standing = [Standing("p", "n0", Role.PRIMARY, 4, since=4, handing_over=True, address="a", backup="b"),
                    Standing("b", "n1", Role.BACKUP, 4, primed=True, address="b")]
        chosen = "n1"
    else:  # the old primary already follows, the successor was not told yet
        standing = [Standing("p", "n0", Role.BACKUP, 5, address="a"),
                    Standing("b", "n1", Role.BACKUP, 4, primed=True, address="b")]
        chosen = "n1"
    (a,) = from_replicas(1, {0: standing})
    newest = max(r.epoch for r in standing)
    assert a.again is not None and a.again.primary == chosen and a.again.epoch == newest + 1, a
    assert a.again.backup == ({"n0", "n1"} - {chosen}).pop() and set(a.keep) == {"p", "b"}, a


def test_a_partition_with_no_replica_that_can_serve_is_refused() -> None:
    with pytest.raises(ValueError, match="partition 1: no replica"):
        from_replicas(2, {0: [Standing("p", "n0", Role.PRIMARY, 1, address="a")]})
    with pytest.raises(ValueError, match="none is primed"):
        from_replicas(1, {0: [Standing("b", "n0", Role.BACKUP, 2), Standing("i", "n1", Role.IDLE, 0)]})


# -- only a placement that took is trusted: its backup alone is promoted ----------------

def test_an_unsettled_partition_s_backup_is_not_promoted_when_its_primary_is_lost() -> None:
    # partition 0's last placement failed partway: n1 may never have heard of epoch 3
    placements = (Placement(0, "n0", "n1", 3), Placement(1, "n0", "n2", 2))
    after = repaired(placements, ["n1", "n2", "n3"], unsettled={0})
    assert after[0] == placements[0]  # as it was: placed again from its replicas' positions
    assert after[1].primary == "n2" and after[1].epoch == 3  # a settled one fails over as ever
    assert repaired(placements, ["n1", "n2", "n3"])[0].primary == "n1"


def test_an_unsettled_partition_gets_no_backup_either() -> None:
    placements = (Placement(0, "n0", None, 4),)
    assert repaired(placements, ["n0", "n1"], unsettled={0}) == placements
    assert repaired(placements, ["n0", "n1"]) == (Placement(0, "n0", "n1", 5),)


PRIMED = Standing("b", "n1", Role.BACKUP, 3, primed=True)


@pytest.mark.parametrize("unsettled, said, promoted", [
    ((), PRIMED, True),
    ({0}, PRIMED, False),  # the placement failed partway: the backup may never have followed at 3
    ((), None, False),  # it did not answer
    ((), PRIMED._replace(primed=False), False),  # never primed: its journal awaits a prime
    ((), PRIMED._replace(epoch=2), False),  # primed at an older placement: it may lack epoch 3's writes
    ((), PRIMED._replace(role=Role.IDLE), False),  # restarted too: back idle with its journal
])
def test_a_backup_is_promoted_only_from_a_placement_that_took(
    unsettled: set[int], said: Standing | None, promoted: bool
) -> None:
    assert promotable(Placement(0, "n0", "n1", 3), unsettled, said) is promoted


# -- a copy that may have lost its tail does not lead while a fuller one is away ----------

def idle(node: str, epoch: int, sequence: int, damaged: bool = False) -> Standing:
    return Standing(f"p@{node}", node, Role.IDLE, epoch, sequence=sequence, damaged=damaged)


def test_the_holder_back_from_a_power_cut_waits_for_its_absent_backup() -> None:
    # both nodes of partition 0 were lost; the holder n0 is back first, with what it had synced
    back = [idle("n0", 3, 40)]
    assert leader(back, "n0", ("n0", "n1"), absent=["n1"], held={"n0": (3, 40)}) is None
    # the backup's node is back too, its journal no longer than the holder's: the holder leads
    both = back + [idle("n1", 3, 40)]
    assert leader(both, "n0", ("n0", "n1"), absent=[], held={"n0": (3, 40), "n1": (3, 40)}) == "n0"


def test_a_longer_copy_of_the_holder_s_epoch_leads_instead() -> None:
    both = [idle("n0", 3, 40), idle("n1", 3, 44)]
    assert leader(both, "n0", ("n0", "n1"), absent=[], held={"n0": (3, 40), "n1": (3, 44)}) == "n1"


def test_the_holder_does_not_lead_while_a_journal_elsewhere_holds_more() -> None:
    # n2's copy, which the map no longer names (a backup replaced meanwhile), holds more
    back = [idle("n0", 3, 40), Standing("p@n1", "n1", Role.BACKUP, 4)]  # n1 never primed: it cannot lead
    held = {"n0": (3, 40), "n1": (2, 10), "n2": (3, 41)}
    assert leader(back, "n0", ("n0", "n1"), absent=[], held=held) is None
    assert leader(back, "n0", ("n0", "n1"), absent=[], held={**held, "n2": (3, 40)}) == "n0"


def test_with_no_holder_known_an_idle_copy_leads_only_with_every_node_back() -> None:
    back = [idle("n0", 3, 40), idle("n1", 2, 90)]
    held = {"n0": (3, 40), "n1": (2, 90)}
    assert leader(back, None, (), absent=["n2"], held=held) is None
    assert leader(back, None, (), absent=[], held=held) == "n0"  # the newest epoch, then the longest
    assert leader(back, None, (), absent=[], held={**held, "n2": (3, 41)}) is None


def test_a_serving_replica_leads_and_one_that_cannot_never_does() -> None:
    serving = [idle("n0", 3, 40), Standing("p@n1", "n1", Role.BACKUP, 3, primed=True)]
    assert leader(serving, "n0", ("n0", "n1"), absent=["n2"], held={"n2": (9, 9)}) == "n1"  # it holds it all
    aside = [idle("n0", 3, 40, damaged=True), idle("n1", 2, 10)]
    assert leader(aside, "n0", ("n0", "n1"), absent=[], held={"n1": (2, 10)}) is None
