"""The update journal, its conversion to Parquet and the PySpark jobs over it (time-series history, view replay, statistics)."""
