"""A deterministic simulator of a canopy cluster, in one process and simulated time.

The kernel: :mod:`~tests.simulation.world` (the event queue, the clock, seeded randomness, the
trace), :mod:`~tests.simulation.network` (Ray-call messages and TCP-like streams between
nodes, cuts, latency), :mod:`~tests.simulation.disk` (a partition's journal and a node's disk,
with process kills, power cuts and corruption) and :mod:`~tests.simulation.schedule` (what
happens in a run, drawn from a seed, printable as Python). On it:
:mod:`~tests.simulation.processes` (nodes, processes Ray restarts, Ray calls),
:mod:`~tests.simulation.replica` (the real ``ReplicaState`` in a shell like ``Partition``'s),
:mod:`~tests.simulation.managed` (the real control plane: ``ReplicaSet``, ``PartitionManager``
and ``Liveness`` over a simulated :class:`~actors.cluster.Cluster`, as serve drives them; what the
runs use), :mod:`~tests.simulation.controller` (a scripted controller over the real placement
functions, for the regressions that need one without the safeguards),
:mod:`~tests.simulation.client` (a gateway's writes, by ``actors/link.py``'s rules),
:mod:`~tests.simulation.invariants` (what every run must keep) and
:mod:`~tests.simulation.run` (one seeded run; ``python -m tests.simulation SEED [--trace]``
replays one). Nothing here imports Ray (``test_world.py`` checks it in a subprocess): the
control plane's modules it runs reach Ray only through ``RayCluster``, which it never makes.
"""
