"""The released ``tiny`` start (``--weights cir``): written by ``cirbench start rebuild --write``, not by hand."""

RELEASE = 2
FILE = 'tiny-cir-v2.pt'
SHA256 = '34a002010a353b9c1bbf138d54c48af8428e4d5b728e66c5ae62d5434432e08b'
START_KEY = 'tiny-pretrained-1dabed60+cir-20264692'
