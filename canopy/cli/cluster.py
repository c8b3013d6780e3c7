"""``canopy cluster``: the cluster's status, and crashing, pausing, adding, cutting off and delaying nodes."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from canopy.cli.common import _seconds, _session


def _cluster(args: argparse.Namespace) -> int:
    if args.action != "status":
        return _cluster_node(args)
    with _session(args) as session:
        status = session.server.cluster_status()
    if args.json:
        print(json.dumps(status, indent=2, allow_nan=False))
        return 0 if status.get("healthy") else 2
    for line in format_status(status):
        print(line)
    return 0 if status.get("healthy") else 2


def _cluster_node(args: argparse.Namespace) -> int:
    with _session(args) as session:
        if args.action == "kill-node":
            done = session.server.kill_node(args.node, force=args.force)
            print(f"node {done['node']}: its raylet (pid {done['raylet_pid']}) and every process it started "
                  "are being killed; watch `canopy cluster status`")
        elif args.action == "pause-node":
            done = session.server.pause_node(args.node, args.seconds, force=args.force)
            print(f"node {done['node']}: its raylet (pid {done['raylet_pid']}) and every process it started "
                  f"are being paused for {args.seconds:g} s")
        elif args.action == "restart-gcs":
            done = session.server.restart_gcs(args.seconds)
            print(f"Ray's GCS: being killed and started again {args.seconds:g} s later (its tables come back "
                  "from Redis); watch canopy serve's output and `canopy cluster status`")
        elif args.action == "partition":
            peers = [p.strip() for p in args.peers.split(",") if p.strip()] if args.peers else None
            done = session.server.partition(args.node, args.seconds, peers=peers, direction=args.one_way or "both",
                                            delay_ms=args.delay_ms)
            what = {"both": "both ways", "in": "what it receives only", "out": "what it sends only"}[done["direction"]]
            whom = ", ".join(done["peers"] or ["every other node"])
            if done.get("delay_ms"):
                print(f"node {done['node']}: its traffic with {whom} ({what}) being delayed by {done['delay_ms']} ms "
                      f"for {args.seconds:g} s; watch canopy serve's output and `canopy cluster status`")
            else:
                print(f"node {done['node']}: being cut off from {whom} ({what}) for {args.seconds:g} s, then healed; "
                      "watch canopy serve's output and `canopy cluster status`")
        elif args.action == "kill-head":
            done = session.server.kill_head(args.seconds)
            print(f"the head node: its GCS, raylet and every process on it being killed, started again "
                  f"{args.seconds:g} s later; the partitions serve throughout through the other nodes' gateways; "
                  "watch canopy serve's output and `canopy cluster status`")
        else:
            done = session.server.add_node(args.node)
            print(f"node {done['node']}: {'starting again' if done.get('rejoins') else 'starting'}; "
                  "watch `canopy cluster status`")
    return 0


def format_status(status: dict[str, Any]) -> list[str]:
    """``canopy cluster status`` as text: a line per node, partition and gateway."""
    lines = [f"cluster: {'healthy' if status.get('healthy') else 'DEGRADED'}"
             f"{'' if status.get('balanced') else ' (rebalancing)'}, namespace {status.get('namespace')}"]
    lines.append("nodes:")
    for node in status.get("nodes", []):
        lines.append(f"  {node['name']:<16} {node['address']:<16} {'alive' if node['alive'] else 'DEAD'}"
                     f"{'  (controller)' if node.get('home') else ''}{'  (Ray head)' if node.get('head') else ''}")
    lines.append("partitions:   primary          backup           epoch  topics  sequence  backup-seq  lag")
    for p in status.get("partitions", []):
        def show(value: Any) -> str:
            return "-" if value is None else str(value)

        lines.append(
            f"  {p['partition']:<10}  {p['primary']:<16} {show(p['backup']):<16} {p['epoch']:<6} "
            f"{show(p['topics']):<7} {show(p['sequence']):<9} {show(p['backup_sequence']):<11} {show(p['lag'])}"
            f"{'' if p['healthy'] else '  NOT HEALTHY'}"
        )
    conf = status.get("configuration") or {}
    if "log_committed" in conf:
        copies = ", ".join(f"{node} {position}" for node, position in sorted(conf.get("log_copies", {}).items()))
        lines.append(f"configuration log: term {conf['log_term']}, committed {conf['log_committed']} "
                     f"(majority {conf['log_majority']}; copies: {copies or 'none caught up'})")
    services = status.get("services") or {}
    if services:
        lines.append("services: " + ", ".join(f"{name} on {node or 'nowhere (restarting)'}"
                                              for name, node in sorted(services.items())))
    lines.append("gateways:")
    for g in status.get("gateways", []):
        state = "lost with its node" if g.get("lost") else (
            f"{g.get('sessions')} sessions" if g.get("answering") else "not answering")
        guard = g.get("guard") or {}
        if g.get("answering") and guard:  # what clients tried: see the README's security section
            state += (f", {g.get('connections')} connections; logins failed {guard.get('login_failures', 0)}, "
                      f"refused {guard.get('login_refused', 0)}; unexpected errors {guard.get('unexpected_errors', 0)}")
        if g.get("answering") and g.get("mqtt"):
            state += (f"; MQTT at {g['mqtt']}: {g.get('mqtt_connections')} connections, "
                      f"{g.get('mqtt_kept_sessions')} sessions kept for absent clients, "
                      f"{g.get('mqtt_sessions_replayed') or 0} taken up from their records "
                      f"({g.get('mqtt_replay_gaps') or 0} missing messages no partition kept), "
                      f"{g.get('mqtt_sessions_adopted') or 0} adopted from lost gateways")
        lines.append(f"  {g['gateway']:<12} {str(g.get('node')):<16} {str(g.get('url')):<24} {state}")
    return lines


#: the longest ``cluster pause-node`` the server carries out (``actors.node_control.MAX_PAUSE``,
#: which the client cannot import; tests/unit/canopy/test_cli_arguments.py keeps them equal)
MAX_PAUSE = 3600.0
#: the longest ``cluster partition --delay-ms`` (``actors.node_control.MAX_DELAY_MS``, kept equal the same way)
MAX_DELAY_MS = 10_000


def _pause_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds <= MAX_PAUSE:  # NaN fails every comparison
        raise argparse.ArgumentTypeError(
            f"expected a number of seconds, more than 0 and at most {MAX_PAUSE:g}, got {text!r}")
    return seconds


def _delay_ms(text: str) -> int:
    try:
        ms = int(text)
    except ValueError:
        ms = 0
    if not 1 <= ms <= MAX_DELAY_MS:
        raise argparse.ArgumentTypeError(f"expected whole milliseconds from 1 to {MAX_DELAY_MS}, got {text!r}")
    return ms


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], client: argparse.ArgumentParser
) -> None:
    """Add ``canopy cluster``."""
    cluster = commands.add_parser("cluster", help="the cluster").add_subparsers(dest="action", required=True)
    status = cluster.add_parser(
        "status", parents=[client],
        help="nodes, partitions (primary, backup, epoch, lag) and gateways; exit status 2 when not healthy",
    )
    status.add_argument("--json", action="store_true")
    kill = cluster.add_parser(
        "kill-node", parents=[client],
        help="crash a node: SIGKILL its raylet and every process it started (--local-nodes clusters; "
             "elsewhere, or the controller's node, with --force)",
    )
    pause = cluster.add_parser(
        "pause-node", parents=[client],
        help="freeze a node: SIGSTOP its raylet and every process it started, SIGCONT after --seconds",
    )
    for p in (kill, pause):
        p.add_argument("node", help="the node's name, as `canopy cluster status` shows it")
        p.add_argument("--force", action="store_true", help="also on a real cluster, or the controller's node")
    pause.add_argument("--seconds", type=_pause_seconds, required=True,
                       help=f"how long it stays frozen (more than 0, at most {MAX_PAUSE:g})")
    add = cluster.add_parser(
        "add-node", parents=[client],
        help="start a simulated node (--local-nodes clusters); a dead node's name starts it again",
    )
    add.add_argument("node", nargs="?", help="its name (default: the next free node-<k>)")
    gcs = cluster.add_parser(
        "restart-gcs", parents=[client],
        help="kill Ray's GCS (the head's control store) and start it again, as when the head restarts "
             "(--local-nodes clusters with gcs_redis_address)",
    )
    gcs.add_argument("--seconds", type=_seconds, default=2.0, help="how long it stays down (default: 2)")
    head = cluster.add_parser(
        "kill-head", parents=[client],
        help="kill the head node (Ray's GCS, its raylet and every process on it, canopy's controller included) "
             "and start it again (--local-nodes clusters with gcs_redis_address)",
    )
    head.add_argument("--seconds", type=_seconds, default=5.0, help="how long it stays down (default: 5)")
    cut = cluster.add_parser(
        "partition", parents=[client],
        help="cut a node off the other nodes' network for --seconds, then heal it (--local-nodes clusters with "
             "--node-namespaces); a node declared dead meanwhile is started again and rejoins; with --delay-ms "
             "its traffic is delayed instead",
    )
    cut.add_argument("node", help="the node's name, as `canopy cluster status` shows it")
    cut.add_argument("--from", dest="peers", metavar="NODE,...",
                     help="cut it off from these nodes only (default: from every other node)")
    cut.add_argument("--one-way", choices=("in", "out"),
                     help="drop only what the node receives (in) or only what it sends (out); default: both")
    cut.add_argument("--delay-ms", type=_delay_ms, metavar="MS",
                     help=f"delay that traffic by MS milliseconds (1 to {MAX_DELAY_MS}) instead of dropping it, "
                          "as tc netem would: each way that --one-way names, or both")
    cut.add_argument("--seconds", type=_pause_seconds, default=10.0,
                     help=f"how long it stays cut off or delayed (more than 0, at most {MAX_PAUSE:g}; default: 10)")
    for p in (status, kill, pause, add, gcs, head, cut):
        p.set_defaults(run=_cluster)
