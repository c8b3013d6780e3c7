"""Cluster bootstrap, server settings, partition map and placement, actor names, health and `canopy serve`.

:mod:`cluster.cli` is the ``canopy`` console script (the client verbs and ``serve``); it and the leaf
modules :mod:`cluster.config`, :mod:`actors.names` and :mod:`topics.partitioning` import no Ray.
"""
