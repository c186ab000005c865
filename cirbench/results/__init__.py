"""The parquet results store: one part file per run and table, each cell's record verified
against the hashes its runs row keeps (verify), and one writer per cell (locks)."""
