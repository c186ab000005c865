"""The analysis's statistics room: query bootstraps (``bootstrap``) and paired
comparisons over seeds and queries (``significance``). It imports the ``loading`` room."""
