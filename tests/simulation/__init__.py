"""A deterministic simulator of a canopy cluster, in one process and simulated time.

The kernel: :mod:`~tests.simulation.world` (the event queue, the clock, seeded randomness, the
trace), :mod:`~tests.simulation.network` (Ray-call messages and TCP-like streams between
nodes, cuts, latency), :mod:`~tests.simulation.disk` (a partition's journal and a node's disk,
with process kills, power cuts and corruption) and :mod:`~tests.simulation.schedule` (what
happens in a run, drawn from a seed, printable as Python). Production state machines plug into
the network's stream ends and the disk's journals. Nothing here imports Ray
(``test_world.py`` checks it in a subprocess).
"""
