"""The comparison wing: each run's curves.json and ``tm.compare`` over saved runs (bqplot figures, a table)."""
