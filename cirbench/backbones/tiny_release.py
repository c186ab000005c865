"""The released ``tiny`` start (``--weights cir``): written by ``cirbench start rebuild --write``, not by hand."""

RELEASE = 1
FILE = 'tiny-cir-v1.pt'
SHA256 = '81c7957f425a4f270648f1b36e1d8f6b11b000d23a90f0ac5b8d80b809906798'
START_KEY = 'tiny-random-1c3dc40d+cir-e7e6b36b'
