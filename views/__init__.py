"""The topic view DSL: grammar, AST, evaluation, throttle and delay (pure)."""
