"""The analysis's rankings room: the leaderboard with its marks and four answers
(``leaderboard``), the reference rows (``references``), the first screen's answers
(``glance``), the tuned leaderboard (``tuned``) and what a kept set is worth (``kept_worth``).
It imports the ``loading``, ``statistics`` and ``verdicts`` rooms."""
