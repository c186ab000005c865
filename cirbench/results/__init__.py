"""The parquet results store: one part file per run and table."""
