"""The method plugin contract and the math that methods share.

A method plugin imports its contract from here, ``from cirbench.method import Method,
MethodConfig, Batch, StepOutput`` (defined in :mod:`cirbench.method.contract`); the shared
math sits beside it: the contrastive losses (:mod:`cirbench.method.losses`), entropic
optimal transport (:mod:`cirbench.method.ot`), the search-space distributions a ``Config``
declares (:mod:`cirbench.method.search`) and a trained method's weights on disk
(:mod:`cirbench.method.checkpoint`). It imports the data and backbone layers below it and
:mod:`cirbench.settings`, never the engine above.
"""

from cirbench.method.contract import (
                                      METHOD_CONTRACT,
                                      Batch,
                                      Method,
                                      MethodConfig,
                                      Partition,
                                      StepOutput,
                                      TrainingContext,
                                      frozen_parameters,
                                      method_role,
)

__all__ = ["METHOD_CONTRACT", "Batch", "Method", "MethodConfig", "Partition", "StepOutput", "TrainingContext",
           "frozen_parameters", "method_role"]
