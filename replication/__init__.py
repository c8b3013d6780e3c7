"""The replicated, persisted cluster configuration log and the partition primary/backup protocol with failover."""
