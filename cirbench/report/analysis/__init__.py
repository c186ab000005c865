"""The report's analysis room: a results folder loaded and what the report says of it, as
numbers, verdicts and sentences; nothing is drawn, tabulated or written to a file here.

It may import ``cirbench.data``, ``cirbench.results`` and the shared helpers, and no other
room of the report (``tables``, ``figures`` and ``render`` read it, never the reverse)."""
