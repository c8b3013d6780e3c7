"""Durability and replication: the configuration files (:mod:`replication.configuration`), each partition's
journal and snapshots on local disk (:mod:`replication.journal`); later the replicated configuration log and
the partition primary/backup protocol with failover."""
