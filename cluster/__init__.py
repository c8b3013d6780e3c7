"""Cluster bootstrap, server settings, partition map and placement, actor names, health and `canopy serve`.

:mod:`cluster.cli` is the ``canopy`` console script (the client verbs and ``serve``); it and the leaf
modules :mod:`cluster.config`, :mod:`cluster.names` and :mod:`cluster.partitioning` import no Ray.
"""
