"""The report's render room: the report's content put in reading order and written out as
Markdown, HTML, CSV and TeX files and the README's results block (``build_report`` here).

It may import every other room: ``analysis``, ``tables`` and ``figures``; none of them imports it."""
