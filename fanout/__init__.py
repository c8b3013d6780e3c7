"""Fan-out links between clusters, remote server connections, missing-topic notification propagation and remote topic view sources."""
