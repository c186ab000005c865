"""The data layer's datasets room: the loader interface (``loader``), the embedded ``shapes``
benchmark, the file-backed FashionIQ and CIRR (``real``, ``fashioniq``, ``cirr``), their
registry, the rules a loaded dataset keeps (``dataset_rules``) and ``cirbench data check``
(``check``). It imports the ``checks`` room."""
