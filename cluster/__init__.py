"""Cluster bootstrap, configuration, partition map and placement, actor names, health and `canopy serve`."""
