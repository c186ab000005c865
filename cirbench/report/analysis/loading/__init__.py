"""The analysis's loading room: a results folder read and checked (``load``), the epoch
each cell is read at (``selection``), cells, their numbers and their rounding (``cells``,
``numbers``), collapsed cells, the machines that ran them, and ``cirbench reproduce``'s
check (``reproduce_check``). It imports no other analysis room."""
