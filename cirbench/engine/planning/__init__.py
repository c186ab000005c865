"""The engine's planning room: what a grid's cells are, before any data, start or weight
is loaded: the grid spec with its run ids and labels (``spec``), ablation and sweep cells
(``ablation``, ``sweep``), the kept-set cells (``kept_plan``) and the untrained reference
rows a plan names (``reference``). It imports no other engine room."""
