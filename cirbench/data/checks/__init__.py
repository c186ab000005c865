"""The data layer's checks room: a dataset's files read with errors that name the file and
the entry (``files``, ``imagecheck``), and what a check finds (``problems``). It imports no
other room of the data layer."""
