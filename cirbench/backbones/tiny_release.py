"""The released ``tiny`` start (``--weights cir``): written by ``cirbench start rebuild --write``, not by hand."""

RELEASE = 3
FILE = 'tiny-cir-v3.pt'
SHA256 = 'e4e823f03944889037d25083f84a0478adbdd9686eccb59d5bf752d27b33763c'
START_KEY = 'tiny-pretrained-1dabed60+cir-92ef6804'
