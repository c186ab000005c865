"""The released ``tiny`` start (``--weights cir``): written by ``cirbench start rebuild --write``, not by hand."""

RELEASE = 0
FILE = ''
SHA256 = ''
START_KEY = ''
