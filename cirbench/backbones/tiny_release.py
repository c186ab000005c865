"""The released ``tiny`` start (``--weights cir``): written by ``cirbench start rebuild --write``, not by hand."""

RELEASE = 4
FILE = 'tiny-cir-v4.pt'
SHA256 = '167e0f407631aca6d060c86ea29f500167dfd13b22b52271b8cf7333e4d11a1d'
START_KEY = 'tiny-pretrained-5ba3bd02+cir-e5593561'
