"""Session properties, the session filter language, branch mapping tables and session-tree resolution, and the security model (pure)."""
