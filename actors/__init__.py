"""Thin Ray actor shells around the pure core: partitions, view evaluators, session trees, gateways, the controller and node agents."""
