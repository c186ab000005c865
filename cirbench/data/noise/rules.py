"""The rules a noise protocol's output must keep, checked on every injection: a proposal of
one in-range value per sample, and a manifest whose noise types sit on exactly the samples
that changed. :func:`~cirbench.data.noise.injection.inject_noise` refuses a breach with a
:class:`NoiseProtocolError` naming the protocol, the sample and the rule, so that a wrong
ground truth is never written; ``check-plugin`` and the grid's pre-flight report it."""

from __future__ import annotations

import numpy as np

from cirbench.data.noise.proposal import Proposal

FIELDS = ("reference", "text_source", "target", "attempted")
"""The per-sample arrays of a :class:`Proposal`."""


class NoiseProtocolError(ValueError):
    """A noise protocol's proposal or manifest breaks a rule (the message names the
    protocol, where it came from, the rate and seed, the sample and the rule)."""

    def __init__(self, where: str, problems: list[str]) -> None:
        super().__init__(f"{where}: " + "; ".join(problems))
        self.problems = problems


def proposal_problems(proposal: Proposal, n: int, n_images: int) -> list[str]:
    """What is wrong with ``proposal`` for a split of ``n`` samples over ``n_images`` images."""
    if not isinstance(proposal, Proposal):
        return [f"propose returned {type(proposal).__name__}, not a Proposal"]
    problems = [f"Proposal.{name} has {len(getattr(proposal, name))} values for {n} samples (rule: one per sample)"
                for name in FIELDS if len(getattr(proposal, name)) != n]
    if problems:
        return problems
    if ((proposal.reference < 0) | (proposal.reference >= n_images)).any() or (proposal.target >= n_images).any():
        problems.append(f"Proposal.reference or .target holds an image index out of range (rule: in [0, {n_images}))")
    if ((proposal.text_source < 0) | (proposal.text_source >= n)).any():
        problems.append(f"Proposal.text_source holds a sample index out of range (rule: in [0, {n}))")
    if not all(isinstance(t, str) and t for t in proposal.attempted):
        problems.append("Proposal.attempted must hold noise type names (non-empty str)")
    if proposal.texts is not None and (len(proposal.texts) != n or not all(isinstance(t, str) for t in proposal.texts)):
        problems.append(f"Proposal.texts must hold one str per sample ({n})")
    return problems


def mislabel_problems(sample_ids: list[str], changed: dict[str, np.ndarray], noise_type: np.ndarray) -> list[str]:
    """The samples that ``changed`` (per part: ``reference``, ``text``, ``target``) yet are
    typed ``clean``: the first named, the others counted."""
    any_change = np.logical_or.reduce(list(changed.values()))
    wrong = np.flatnonzero(any_change & (noise_type == "clean"))
    if not len(wrong):
        return []
    first = int(wrong[0])
    parts = ", ".join(part for part, mask in changed.items() if mask[first])
    more = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
    return [f"sample {sample_ids[first]!r} changed ({parts}) but its noise type is 'clean'{more} (rule: a noisy sample's "
            "type names its corruption: set Proposal.attempted on every sample you change)"]
