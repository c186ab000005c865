"""The engine's cell room: one cell's life, from the resources a grid's cells share
(``resources``: the dataset, the tower tokens in ``features`` or ``online``, the start) through
training (``train``, with its ``hooks``, ``precision`` and ``step_rules``) and the recorder
(``recorder``) to evaluation (``evaluate``, ``retrieval``) and kept sets (``kept_sets``);
``life`` runs it end to end and writes its rows once; ``distributed`` holds the ranks a cell
runs on under torchrun. It imports the ``planning`` room only, never what runs cells."""
